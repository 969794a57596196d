package testagent

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Environment variables read when the matching flag is not given. Each is
// SKEIN_TESTAGENT_ + the flag name upper-cased with '-' turned into '_'.
// Booleans take the strconv.ParseBool forms ("1", "true", "0", "false").
const (
	EnvLoadSession        = "SKEIN_TESTAGENT_LOAD_SESSION"
	EnvResume             = "SKEIN_TESTAGENT_RESUME"
	EnvClose              = "SKEIN_TESTAGENT_CLOSE"
	EnvConfigOptions      = "SKEIN_TESTAGENT_CONFIG_OPTIONS"
	EnvForgetConfig       = "SKEIN_TESTAGENT_FORGET_CONFIG"
	EnvLegacyModes        = "SKEIN_TESTAGENT_LEGACY_MODES"
	EnvLegacyModels       = "SKEIN_TESTAGENT_LEGACY_MODELS"
	EnvCommands           = "SKEIN_TESTAGENT_COMMANDS"
	EnvStateDir           = "SKEIN_TESTAGENT_STATE_DIR"
	EnvControlDir         = "SKEIN_TESTAGENT_CONTROL_DIR"
	EnvAuthMethod         = "SKEIN_TESTAGENT_AUTH_METHOD"
	EnvExitOnEOF          = "SKEIN_TESTAGENT_EXIT_ON_EOF"
	EnvLogLevel           = "SKEIN_TESTAGENT_LOG_LEVEL"
	EnvSilent             = "SKEIN_TESTAGENT_SILENT"
	EnvGarbage            = "SKEIN_TESTAGENT_GARBAGE"
	EnvFailLoad           = "SKEIN_TESTAGENT_FAIL_LOAD"
	EnvPromptCapabilities = "SKEIN_TESTAGENT_PROMPT_CAPABILITIES"
)

const envPrefix = "SKEIN_TESTAGENT_"

// Config option ids --config-options accepts.
const (
	configMode  = "mode"
	configModel = "model"
)

// config is the agent's effective configuration.
type config struct {
	LoadSession   bool
	Resume        bool
	Close         bool
	ConfigOptions []string // subset of configMode, configModel, in flag order
	LegacyModes   bool
	LegacyModels  bool
	Commands      bool
	StateDir      string
	ControlDir    string
	ExitOnEOF     bool
	LogLevel      slog.Level
	// AuthMethod, when set, is advertised as the one auth method, and
	// session/new and session/load answer -32000 (auth required) until
	// authenticate names it, as codex-acp does without a login.
	AuthMethod string
	// ForgetConfig brings a session read back from the state dir with the
	// default mode and model: an agent that keeps a conversation across
	// processes but not its settings.
	ForgetConfig bool
	// Silent answers nothing at all (each request is logged to stderr and
	// dropped): an agent that hangs before initialize.
	Silent bool
	// Garbage is how many lines that are not JSON the agent writes to
	// stdout when it starts, before it reads anything: an adapter that
	// prints a banner or its usage where ACP belongs.
	Garbage int
	// FailLoad makes the first FailLoad session/load and session/resume
	// calls for each session ID answer -32603 Internal error, as
	// gemini-cli does when it lost the session's chat file; failAlways
	// makes every one fail.
	FailLoad int
	// PromptCapabilities is what initialize advertises in
	// agentCapabilities.promptCapabilities, and so the content blocks a
	// prompt may carry besides text and resource_link: a prompt with
	// another is refused (-32602). All three unless
	// --prompt-capabilities names fewer.
	PromptCapabilities promptCapabilities
}

// failAlways is FailLoad for --fail-load=always.
const failAlways = -1

// registerFlags binds c to fs. Flag names are kebab-case; env names derive
// from them (see envName).
func (c *config) registerFlags(fs *flag.FlagSet) {
	fs.BoolVar(&c.LoadSession, "load-session", false, "advertise loadSession and implement session/load (replays history)")
	fs.BoolVar(&c.Resume, "resume", false, "advertise sessionCapabilities.resume and implement session/resume")
	fs.BoolVar(&c.Close, "close", false, "advertise sessionCapabilities.close and implement session/close")
	fs.Func("config-options", "comma-separated config options to offer: mode, model (select options)", func(s string) error {
		c.ConfigOptions = nil
		for part := range strings.SplitSeq(s, ",") {
			part = strings.TrimSpace(part)
			switch {
			case part == "":
			case part != configMode && part != configModel:
				return fmt.Errorf("unknown config option %q (want mode, model)", part)
			case !slices.Contains(c.ConfigOptions, part):
				c.ConfigOptions = append(c.ConfigOptions, part)
			}
		}
		return nil
	})
	fs.BoolVar(&c.ForgetConfig, "forget-config", false, "a session loaded or resumed from the state dir comes back with the default mode and model")
	fs.BoolVar(&c.LegacyModes, "legacy-modes", false, "return modes from session/new and implement session/set_mode")
	fs.BoolVar(&c.LegacyModels, "legacy-models", false, "return models and implement session/set_model; session/set_config_option answers -32601 (like gemini)")
	fs.BoolVar(&c.Commands, "commands", false, "send available_commands_update after session/new, load and resume")
	fs.StringVar(&c.AuthMethod, "auth-method", "", "advertise this auth method and require authenticate with it before sessions open")
	fs.StringVar(&c.StateDir, "state-dir", "", "directory to persist sessions in, so a later process can load or resume them")
	fs.StringVar(&c.ControlDir, "control-dir", "", "directory for pause/release files (script command pause)")
	fs.BoolVar(&c.ExitOnEOF, "exit-on-eof", true, "exit 0 once stdin is closed and running turns have ended")
	fs.TextVar(&c.LogLevel, "log-level", slog.LevelInfo, "stderr log level: debug, info, warn, error")
	fs.BoolVar(&c.Silent, "silent", false, "answer nothing: every request is logged to stderr and dropped")
	fs.IntVar(&c.Garbage, "garbage", 0, "write this many non-JSON lines to stdout at start")
	c.PromptCapabilities = promptCapabilities{Image: true, Audio: true, EmbeddedContext: true}
	fs.Func("prompt-capabilities", "comma-separated promptCapabilities to advertise: image, audio, embeddedContext, or none (default all three); a prompt block needing another is refused", func(s string) error {
		c.PromptCapabilities = promptCapabilities{}
		for part := range strings.SplitSeq(s, ",") {
			switch part = strings.TrimSpace(part); part {
			case "", "none":
			case capImage:
				c.PromptCapabilities.Image = true
			case capAudio:
				c.PromptCapabilities.Audio = true
			case capEmbeddedContext:
				c.PromptCapabilities.EmbeddedContext = true
			default:
				return fmt.Errorf("unknown prompt capability %q (want %s, %s, %s or none)", part, capImage, capAudio, capEmbeddedContext)
			}
		}
		return nil
	})
	fs.Func("fail-load", "answer the first N session/load and session/resume calls of each session with -32603 Internal error (N, or always)", func(s string) error {
		if s == "always" {
			c.FailLoad = failAlways
			return nil
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return fmt.Errorf("want a count or always, got %q", s)
		}
		c.FailLoad = n
		return nil
	})
}

// validate checks flag combinations.
func (c *config) validate() error {
	if c.LegacyModels && len(c.ConfigOptions) > 0 {
		return errors.New("-legacy-models and -config-options exclude each other: legacy-models agents answer session/set_config_option with -32601")
	}
	if c.Garbage < 0 {
		return errors.New("-garbage must not be negative")
	}
	return nil
}

// envName returns the environment variable for flag name.
func envName(name string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// parseConfig applies the environment, then args, so flags win.
func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("skein-testagent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c.registerFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: skein-testagent [flags]\n\n"+
			"A scriptable ACP agent on stdin/stdout for tests. Every flag can also be set\n"+
			"with %s<FLAG_NAME> (flag wins). See README.md for the script language.\n\n", envPrefix)
		fs.PrintDefaults()
	}
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		name := envName(f.Name)
		if v := getenv(name); v != "" && envErr == nil {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = fmt.Errorf("%s=%q: %w", name, v, err)
			}
		}
	})
	if envErr != nil {
		return c, envErr
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if err := c.validate(); err != nil {
		return c, err
	}
	for _, dir := range []string{c.StateDir, c.ControlDir} {
		if dir != "" {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return c, fmt.Errorf("create directory: %w", err)
			}
		}
	}
	return c, nil
}
