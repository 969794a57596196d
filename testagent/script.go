package testagent

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// opKind names one script command. The string is the keyword.
type opKind string

// Script commands. Keywords are lower case and matched exactly; "/say" is
// the same as "say" so the commands also work as ACP slash commands.
const (
	opEcho         opKind = "echo" // not a keyword: a line that is not a command
	opSay          opKind = "say"
	opChunks       opKind = "chunks"
	opMessage      opKind = "message"
	opThink        opKind = "think"
	opTool         opKind = "tool"
	opToolStep     opKind = "toolstep"
	opPlan         opKind = "plan"
	opPermission   opKind = "permission"
	opSleep        opKind = "sleep"
	opPause        opKind = "pause"
	opStop         opKind = "stop"
	opError        opKind = "error"
	opCrash        opKind = "crash"
	opStderr       opKind = "stderr"
	opGarbage      opKind = "garbage"
	opBig          opKind = "big"
	opUpdate       opKind = "update"
	opFlood        opKind = "flood"
	opStamp        opKind = "stamp"
	opStream       opKind = "stream"
	opPermissions  opKind = "permissions"
	opStampEnd     opKind = "stampend"
	opNotify       opKind = "notify"
	opUsage        opKind = "usage"
	opTitle        opKind = "title"
	opMode         opKind = "mode"
	opConfig       opKind = "config"
	opInstructions opKind = "instructions"
	opBurst        opKind = "burst"
	opTick         opKind = "tick"
	opLater        opKind = "later"
)

// keywords maps each command keyword to its parser. A parser gets the
// argument text (the line after the keyword, trimmed) and fills op.
var keywords = map[opKind]func(op *op, args string) error{
	opSay:          parseText,
	opChunks:       parseChunks,
	opMessage:      parseNoArgs,
	opThink:        parseText,
	opTool:         parseTool,
	opToolStep:     parseToolStep,
	opPlan:         parsePlan,
	opPermission:   parsePermission,
	opSleep:        parseSleep,
	opPause:        parsePause,
	opStop:         parseStop,
	opError:        parseError,
	opCrash:        parseCrash,
	opStderr:       parseText,
	opGarbage:      parseGarbage,
	opBig:          parseBig,
	opUpdate:       parseUpdate,
	opFlood:        parseFlood,
	opStamp:        parseStamp,
	opStream:       parseStream,
	opPermissions:  parsePermission,
	opStampEnd:     parseNoArgs,
	opNotify:       parseNotify,
	opUsage:        parseUsage,
	opTitle:        parseText,
	opMode:         parseMode,
	opConfig:       parseNoArgs,
	opInstructions: parseNoArgs,
	opBurst:        parseNoArgs,
	opTick:         parseTick,
	opLater:        parseNoArgs,
}

// writesOnly are the commands that only write: a burst goes on across
// them, and any other command (one that waits, asks or stops) ends it first.
var writesOnly = map[opKind]bool{
	opSay: true, opChunks: true, opMessage: true, opThink: true, opTool: true, opToolStep: true,
	opPlan: true, opBig: true, opUpdate: true, opFlood: true, opNotify: true, opUsage: true,
	opTitle: true, opMode: true, opConfig: true, opInstructions: true, opBurst: true,
	opStamp: true, opStampEnd: true,
}

// Limits that keep a typo from exhausting memory or hanging a test run.
const (
	maxChunks    = 1 << 20
	maxBigBytes  = 256 << 20
	maxSleep     = 24 * time.Hour
	defaultCrash = 1
)

// op is one parsed script command. Which fields are set depends on Kind.
type op struct {
	Kind    opKind
	Line    int    // 1-based line in the prompt text
	Text    string // say, think, stderr, title, echo, garbage, error message, chunks prefix, tool title, toolstep content
	ID      string // tool call id, pause name, mode id, notify method
	Status  string // toolstep status, stop reason
	N       int64  // chunks count, big bytes, error code, crash exit code
	Used    uint64 // usage used
	Size    uint64 // usage size
	Delay   time.Duration
	Options []permissionOption
	Entries []planEntry
	Raw     json.RawMessage // update object, notify params
}

// scriptError reports a command line with bad arguments. No command of a
// script with an error runs.
type scriptError struct {
	Line int
	Msg  string
}

func (e *scriptError) Error() string { return fmt.Sprintf("script error: line %d: %s", e.Line, e.Msg) }

// parseScript turns prompt text into the ops of a turn.
//
// If no line is a command, the whole text, unchanged, is one echo op: the
// default reply. Otherwise each line is trimmed; blank lines and lines
// starting with '#' are skipped; a command line becomes its op; any other
// line becomes an echo op of that line.
func parseScript(text string) ([]op, error) {
	lines := strings.Split(text, "\n")
	var ops []op
	commands := false
	for i, raw := range lines {
		line := strings.TrimSpace(raw)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		kw, args := splitKeyword(line)
		parse, ok := keywords[opKind(kw)]
		if !ok {
			ops = append(ops, op{Kind: opEcho, Line: i + 1, Text: line})
			continue
		}
		commands = true
		o := op{Kind: opKind(kw), Line: i + 1}
		if err := parse(&o, args); err != nil {
			return nil, &scriptError{Line: i + 1, Msg: kw + ": " + err.Error()}
		}
		ops = append(ops, o)
	}
	if !commands {
		return []op{{Kind: opEcho, Line: 1, Text: text}}, nil
	}
	return ops, nil
}

// splitKeyword splits a trimmed line into its first word (without one
// leading '/') and the trimmed rest.
func splitKeyword(line string) (kw, args string) {
	end := strings.IndexFunc(line, unicode.IsSpace)
	if end < 0 {
		end = len(line)
	}
	kw, args = line[:end], strings.TrimSpace(line[end:])
	return strings.TrimPrefix(kw, "/"), args
}

// unquote returns s unquoted if it is a valid Go double-quoted string
// (so `say "a\nb"` can send a newline) and s unchanged otherwise.
func unquote(s string) string {
	if len(s) >= 2 && s[0] == '"' {
		if u, err := strconv.Unquote(s); err == nil {
			return u
		}
	}
	return s
}

func parseText(o *op, args string) error {
	o.Text = unquote(args)
	return nil
}

func parseNoArgs(_ *op, args string) error {
	if args != "" {
		return fmt.Errorf("takes no arguments, got %q", args)
	}
	return nil
}

func parseChunks(o *op, args string) error {
	first, rest := cutWord(args)
	n, err := strconv.ParseInt(first, 10, 64)
	if err != nil || n < 0 || n > maxChunks {
		return fmt.Errorf("count must be an integer in [0, %d], got %q", maxChunks, first)
	}
	o.N = n
	o.Text = "chunk"
	if rest != "" {
		o.Text = unquote(rest)
	}
	return nil
}

func parseTool(o *op, args string) error {
	id, title := cutWord(args)
	if id == "" {
		return fmt.Errorf("missing tool call id")
	}
	o.ID = id
	o.Text = "Tool " + id
	if title != "" {
		o.Text = unquote(title)
	}
	return nil
}

func parseToolStep(o *op, args string) error {
	id, rest := cutWord(args)
	status, text := cutWord(rest)
	if id == "" || status == "" {
		return fmt.Errorf("want: toolstep <id> <status> [text]")
	}
	o.ID, o.Status, o.Text = id, status, unquote(text)
	return nil
}

// planMarks are the status prefixes a plan entry may start with.
var planMarks = []struct{ mark, status string }{
	{"[x]", "completed"},
	{"[~]", "in_progress"},
	{"[ ]", "pending"},
}

// parsePlan reads entries separated by '|'. An entry may start with a status
// mark: "[x]" completed, "[~]" in_progress, "[ ]" pending (the default).
// "plan" with no entries sends an empty plan.
func parsePlan(o *op, args string) error {
	o.Entries = []planEntry{}
	if args == "" {
		return nil
	}
	for part := range strings.SplitSeq(args, "|") {
		part = strings.TrimSpace(part)
		e := planEntry{Priority: "medium", Status: "pending"}
		for _, m := range planMarks {
			if rest, ok := strings.CutPrefix(part, m.mark); ok {
				part, e.Status = strings.TrimSpace(rest), m.status
				break
			}
		}
		if part == "" {
			return fmt.Errorf("empty plan entry")
		}
		e.Content = part
		o.Entries = append(o.Entries, e)
	}
	return nil
}

// permissionNames are the option labels used for the four ACP kinds.
var permissionNames = map[string]string{
	"allow_once":    "Allow once",
	"allow_always":  "Always allow",
	"reject_once":   "Reject",
	"reject_always": "Always reject",
}

// parsePermission reads "<toolCallId> [<kind>[=<optionId>],...]". The
// optionId defaults to the kind; the options default to
// "allow_once=allow,reject_once=reject". Unknown kinds are sent as given.
func parsePermission(o *op, args string) error {
	id, spec := cutWord(args)
	if id == "" {
		return fmt.Errorf("missing tool call id")
	}
	o.ID = id
	if spec == "" {
		spec = "allow_once=allow,reject_once=reject"
	}
	seen := map[string]bool{}
	for part := range strings.SplitSeq(spec, ",") {
		kind, optionID, hasID := strings.Cut(strings.TrimSpace(part), "=")
		kind, optionID = strings.TrimSpace(kind), strings.TrimSpace(optionID)
		if !hasID {
			optionID = kind
		}
		if kind == "" || optionID == "" || strings.ContainsFunc(kind+optionID, unicode.IsSpace) {
			return fmt.Errorf("bad option %q: want kind[=optionId]", part)
		}
		if seen[optionID] {
			return fmt.Errorf("duplicate optionId %q", optionID)
		}
		seen[optionID] = true
		name := permissionNames[kind]
		if name == "" {
			name = kind
		}
		o.Options = append(o.Options, permissionOption{OptionID: optionID, Name: name, Kind: kind})
	}
	return nil
}

// parseSleep accepts milliseconds ("250") or a Go duration ("1.5s").
func parseSleep(o *op, args string) error {
	var d time.Duration
	if ms, err := strconv.ParseInt(args, 10, 64); err == nil && ms >= 0 && ms <= maxSleep.Milliseconds() {
		d = time.Duration(ms) * time.Millisecond
	} else if pd, err := time.ParseDuration(args); err == nil && pd >= 0 && pd <= maxSleep {
		d = pd
	} else {
		return fmt.Errorf("want milliseconds or a duration up to %v, got %q", maxSleep, args)
	}
	o.Delay = d
	return nil
}

func parsePause(o *op, args string) error {
	if !validPauseName(args) {
		return fmt.Errorf("name must be letters, digits, '.', '_' or '-' and not start with '.', got %q", args)
	}
	o.ID = args
	return nil
}

func parseStop(o *op, args string) error {
	if args == "" || strings.ContainsFunc(args, unicode.IsSpace) {
		return fmt.Errorf("want one stop reason, got %q", args)
	}
	o.Status = args
	return nil
}

func parseError(o *op, args string) error {
	first, msg := cutWord(args)
	code, err := strconv.ParseInt(first, 10, 64)
	if err != nil {
		return fmt.Errorf("code must be an integer, got %q", first)
	}
	o.N, o.Text = code, unquote(msg)
	if o.Text == "" {
		o.Text = "Internal error"
	}
	return nil
}

func parseCrash(o *op, args string) error {
	o.N = defaultCrash
	if args == "" {
		return nil
	}
	code, err := strconv.ParseInt(args, 10, 64)
	if err != nil || code < 0 || code > 255 {
		return fmt.Errorf("exit code must be in [0, 255], got %q", args)
	}
	o.N = code
	return nil
}

func parseGarbage(o *op, args string) error {
	o.Text = "this is not json"
	if args != "" {
		o.Text = unquote(args)
	}
	if strings.ContainsAny(o.Text, "\r\n") {
		return fmt.Errorf("text must not contain a line break")
	}
	return nil
}

func parseBig(o *op, args string) error {
	n, err := strconv.ParseInt(args, 10, 64)
	if err != nil || n < 0 || n > maxBigBytes {
		return fmt.Errorf("size must be an integer in [0, %d], got %q", maxBigBytes, args)
	}
	o.N = n
	return nil
}

// maxFlood bounds "flood": enough for any benchmark, small enough that a
// typo cannot wedge a test.
const maxFlood = 1_000_000

// parseFlood reads "flood <count> <bytes>".
func parseFlood(o *op, args string) error {
	f := strings.Fields(args)
	if len(f) != 2 {
		return fmt.Errorf("want flood <count> <bytes>, got %q", args)
	}
	n, err1 := strconv.ParseInt(f[0], 10, 64)
	size, err2 := strconv.ParseUint(f[1], 10, 64)
	if err1 != nil || err2 != nil || n < 1 || n > maxFlood || size > maxBigBytes {
		return fmt.Errorf("want flood <count in [1, %d]> <bytes in [0, %d]>, got %q", maxFlood, maxBigBytes, args)
	}
	o.N, o.Size = n, size
	return nil
}

// parseStamp reads "stamp <count> <chunk|update> [interval]".
func parseStamp(o *op, args string) error {
	f := strings.Fields(args)
	if len(f) < 2 || len(f) > 3 || (f[1] != "chunk" && f[1] != "update") {
		return fmt.Errorf("want stamp <count> <chunk|update> [interval], got %q", args)
	}
	n, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || n < 1 || n > maxFlood {
		return fmt.Errorf("stamp count must be in [1, %d], got %q", maxFlood, f[0])
	}
	o.N, o.ID = n, f[1]
	if len(f) == 3 {
		return parseSleep(o, f[2])
	}
	return nil
}

// parseTick reads "tick <count> <interval>": count numbered chunks of one
// message, interval apart.
func parseTick(o *op, args string) error {
	f := strings.Fields(args)
	if len(f) != 2 {
		return fmt.Errorf("want tick <count> <interval>, got %q", args)
	}
	n, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || n < 1 || n > maxChunks {
		return fmt.Errorf("tick count must be in [1, %d], got %q", maxChunks, f[0])
	}
	o.N = n
	return parseSleep(o, f[1])
}

// Bounds of "stream": a rate above maxStreamRate per second is not a pace
// but a flood; the size default is about one LLM token or two.
const (
	maxStreamRate     = 1_000_000
	defaultStreamSize = 16
)

// parseStream reads "stream <count> <rate> [size]": count chunks at rate
// per second (a decimal, e.g. 0.5 or 50), each of size bytes of text.
func parseStream(o *op, args string) error {
	f := strings.Fields(args)
	if len(f) < 2 || len(f) > 3 {
		return fmt.Errorf("want stream <count> <rate> [size], got %q", args)
	}
	n, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || n < 1 || n > maxFlood {
		return fmt.Errorf("stream count must be in [1, %d], got %q", maxFlood, f[0])
	}
	rate, err := strconv.ParseFloat(f[1], 64)
	if err != nil || !(rate > 0 && rate <= maxStreamRate) {
		return fmt.Errorf("stream rate must be a number of chunks per second in (0, %d], got %q", maxStreamRate, f[1])
	}
	size := uint64(defaultStreamSize)
	if len(f) == 3 {
		if size, err = strconv.ParseUint(f[2], 10, 64); err != nil || size > maxBigBytes {
			return fmt.Errorf("stream size must be in [0, %d], got %q", maxBigBytes, f[2])
		}
	}
	o.N, o.Size = n, size
	o.Delay = time.Duration(float64(time.Second) / rate)
	if o.Delay <= 0 {
		o.Delay = 1
	}
	return nil
}

func parseUpdate(o *op, args string) error {
	raw, err := jsonObject(args)
	if err != nil {
		return err
	}
	o.Raw = raw
	return nil
}

// parseNotify reads "<method> [params object]"; params default to {}.
func parseNotify(o *op, args string) error {
	method, params := cutWord(args)
	if method == "" {
		return fmt.Errorf("missing method")
	}
	o.ID, o.Raw = method, json.RawMessage("{}")
	if params != "" {
		raw, err := jsonObject(params)
		if err != nil {
			return err
		}
		o.Raw = raw
	}
	return nil
}

func parseUsage(o *op, args string) error {
	first, second := cutWord(args)
	used, err1 := strconv.ParseUint(first, 10, 64)
	size, err2 := strconv.ParseUint(second, 10, 64)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("want: usage <used> <size>, got %q", args)
	}
	o.Used, o.Size = used, size
	return nil
}

func parseMode(o *op, args string) error {
	if args == "" || strings.ContainsFunc(args, unicode.IsSpace) {
		return fmt.Errorf("want one mode id, got %q", args)
	}
	o.ID = args
	return nil
}

// jsonObject checks that s is one JSON object and returns it.
func jsonObject(s string) (json.RawMessage, error) {
	var probe map[string]json.RawMessage
	if err := json.Unmarshal([]byte(s), &probe); err != nil || probe == nil {
		return nil, fmt.Errorf("want a JSON object, got %q", s)
	}
	return json.RawMessage(s), nil
}

// cutWord splits s at its first run of white space.
func cutWord(s string) (word, rest string) {
	s = strings.TrimSpace(s)
	end := strings.IndexFunc(s, unicode.IsSpace)
	if end < 0 {
		return s, ""
	}
	return s[:end], strings.TrimSpace(s[end:])
}

// validPauseName reports whether name is safe as a file name stem in the
// control directory.
func validPauseName(name string) bool {
	if name == "" || name[0] == '.' || len(name) > 200 {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}
