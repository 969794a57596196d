package testagent

import "encoding/json"

// ACP method names (protocol v1). The agent handles the C→A ones and sends
// the A→C ones.
const (
	methodInitialize        = "initialize"
	methodSessionNew        = "session/new"
	methodAuthenticate      = "authenticate"
	methodSessionLoad       = "session/load"
	methodSessionResume     = "session/resume"
	methodSessionClose      = "session/close"
	methodSessionPrompt     = "session/prompt"
	methodSessionCancel     = "session/cancel"
	methodSetMode           = "session/set_mode"
	methodSetConfigOption   = "session/set_config_option"
	methodSetModel          = "session/set_model" // unstable, removed from the schema; gemini and claude-code-acp still speak it
	methodCancelRequest     = "$/cancel_request"
	methodSessionUpdate     = "session/update"
	methodRequestPermission = "session/request_permission"
)

// protocolVersion is the only ACP version the agent speaks; it answers it
// whatever the client asked for, as the TypeScript SDK does.
const protocolVersion = 1

// Stop reasons the agent produces itself. "stop <reason>" can send any other.
const (
	stopEndTurn   = "end_turn"
	stopCancelled = "cancelled"
)

// implementation is ACP's Implementation (agentInfo).
type implementation struct {
	Name    string `json:"name"`
	Title   string `json:"title,omitempty"`
	Version string `json:"version"`
}

var agentInfo = implementation{Name: "skein-testagent", Title: "Skein test agent", Version: "1.0.0"}

type initializeResult struct {
	ProtocolVersion   int               `json:"protocolVersion"`
	AgentCapabilities agentCapabilities `json:"agentCapabilities"`
	AuthMethods       []authMethod      `json:"authMethods"`
	AgentInfo         implementation    `json:"agentInfo"`
}

type agentCapabilities struct {
	LoadSession         bool                `json:"loadSession"`
	PromptCapabilities  promptCapabilities  `json:"promptCapabilities"`
	MCPCapabilities     mcpCapabilities     `json:"mcpCapabilities"`
	SessionCapabilities sessionCapabilities `json:"sessionCapabilities"`
}

type promptCapabilities struct {
	Image           bool `json:"image"`
	Audio           bool `json:"audio"`
	EmbeddedContext bool `json:"embeddedContext"`
}

// The members of promptCapabilities, as --prompt-capabilities names them.
const (
	capImage           = "image"
	capAudio           = "audio"
	capEmbeddedContext = "embeddedContext"
)

// missing returns the member of c that a prompt block of type blockType
// needs and c lacks, or "": text, resource_link and types ACP does not
// define need none.
func (c promptCapabilities) missing(blockType string) string {
	switch {
	case blockType == "image" && !c.Image:
		return capImage
	case blockType == "audio" && !c.Audio:
		return capAudio
	case blockType == "resource" && !c.EmbeddedContext:
		return capEmbeddedContext
	}
	return ""
}

type mcpCapabilities struct {
	HTTP bool `json:"http"`
	SSE  bool `json:"sse"`
}

// sessionCapabilities marks each capability with an empty object; absent
// means unsupported.
type sessionCapabilities struct {
	Resume *struct{} `json:"resume,omitempty"`
	Close  *struct{} `json:"close,omitempty"`
}

// sessionSetup is the result of session/new, load and resume. SessionID is
// empty (omitted) for load and resume.
type sessionSetup struct {
	SessionID     string         `json:"sessionId,omitempty"`
	Modes         *modeState     `json:"modes,omitempty"`
	Models        *modelState    `json:"models,omitempty"`
	ConfigOptions []configOption `json:"configOptions,omitempty"`
}

type modeState struct {
	CurrentModeID  string `json:"currentModeId"`
	AvailableModes []mode `json:"availableModes"`
}

type mode struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

// modelState and model are the legacy (never stabilized) models shape that
// goes with session/set_model.
type modelState struct {
	CurrentModelID  string  `json:"currentModelId"`
	AvailableModels []model `json:"availableModels"`
}

type model struct {
	ModelID     string `json:"modelId"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

type configOption struct {
	ID           string         `json:"id"`
	Name         string         `json:"name"`
	Description  string         `json:"description,omitempty"`
	Category     string         `json:"category,omitempty"`
	Type         string         `json:"type"`
	CurrentValue string         `json:"currentValue"`
	Options      []configChoice `json:"options"`
}

type configChoice struct {
	Value       string `json:"value"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}

type setConfigOptionResult struct {
	ConfigOptions []configOption `json:"configOptions"`
}

type promptResult struct {
	StopReason string          `json:"stopReason"`
	Meta       json.RawMessage `json:"_meta,omitempty"`
}

// sessionNotification is the params of session/update.
type sessionNotification struct {
	SessionID string          `json:"sessionId"`
	Update    json.RawMessage `json:"update"`
}

// Session update variants. Each starts with the sessionUpdate discriminator,
// the order real agents use.
type (
	contentChunk struct {
		SessionUpdate string          `json:"sessionUpdate"`
		Content       json.RawMessage `json:"content"`
		MessageID     string          `json:"messageId,omitempty"`
	}
	// toolCall is both the tool_call / tool_call_update update and, with
	// SessionUpdate empty, the ToolCallUpdate in a permission request.
	toolCall struct {
		SessionUpdate string            `json:"sessionUpdate,omitempty"`
		ToolCallID    string            `json:"toolCallId"`
		Title         string            `json:"title,omitempty"`
		Kind          string            `json:"kind,omitempty"`
		Status        string            `json:"status,omitempty"`
		Content       []toolCallContent `json:"content,omitempty"`
		RawInput      any               `json:"rawInput,omitempty"`
		RawOutput     any               `json:"rawOutput,omitempty"`
	}
	planUpdate struct {
		SessionUpdate string      `json:"sessionUpdate"`
		Entries       []planEntry `json:"entries"`
	}
	currentModeUpdate struct {
		SessionUpdate string `json:"sessionUpdate"`
		CurrentModeID string `json:"currentModeId"`
	}
	configOptionUpdate struct {
		SessionUpdate string         `json:"sessionUpdate"`
		ConfigOptions []configOption `json:"configOptions"`
	}
	sessionInfoUpdate struct {
		SessionUpdate string `json:"sessionUpdate"`
		Title         string `json:"title"`
	}
	usageUpdate struct {
		SessionUpdate string `json:"sessionUpdate"`
		Used          uint64 `json:"used"`
		Size          uint64 `json:"size"`
	}
	availableCommandsUpdate struct {
		SessionUpdate     string             `json:"sessionUpdate"`
		AvailableCommands []availableCommand `json:"availableCommands"`
	}
)

type toolCallContent struct {
	Type    string    `json:"type"`
	Content textBlock `json:"content"`
}

type textBlock struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type planEntry struct {
	Content  string `json:"content"`
	Priority string `json:"priority"`
	Status   string `json:"status"`
}

type availableCommand struct {
	Name        string        `json:"name"`
	Description string        `json:"description"`
	Input       *commandInput `json:"input"`
}

type commandInput struct {
	Hint string `json:"hint"`
}

// permissionRequest is the params of session/request_permission.
type permissionRequest struct {
	SessionID string             `json:"sessionId"`
	ToolCall  toolCall           `json:"toolCall"`
	Options   []permissionOption `json:"options"`
}

type permissionOption struct {
	OptionID string `json:"optionId"`
	Name     string `json:"name"`
	Kind     string `json:"kind"`
}

// permissionResponse is the client's answer to session/request_permission.
type permissionResponse struct {
	Outcome struct {
		Outcome  string `json:"outcome"`
		OptionID string `json:"optionId"`
	} `json:"outcome"`
}

// availableCommands is what --commands advertises. The names are script
// commands, so "/sleep 500" typed in a client runs the sleep command.
var availableCommands = []availableCommand{
	{Name: "say", Description: "Reply with the given text", Input: &commandInput{Hint: "text"}},
	{Name: "think", Description: "Send the text as a thought", Input: &commandInput{Hint: "text"}},
	{Name: "tool", Description: "Run a fake tool call", Input: &commandInput{Hint: "id [title]"}},
	{Name: "plan", Description: "Show a plan", Input: &commandInput{Hint: "step | step | ..."}},
	{Name: "permission", Description: "Ask for permission", Input: &commandInput{Hint: "toolCallId [kind=optionId,...]"}},
	{Name: "sleep", Description: "Wait before answering", Input: &commandInput{Hint: "milliseconds"}},
	{Name: "stop", Description: "End the turn with a stop reason", Input: &commandInput{Hint: "reason"}},
}

// authMethod is one entry of initialize's authMethods.
type authMethod struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
}
