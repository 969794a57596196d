// Union membership and variant registration for the types of protocol.go.

package events

// Union membership. Each protocol type is a Variant named after its schema type.
func (AcpOpenSessionRequest) isAcpRequest()                   {}
func (AcpGetDurableSessionRequest) isAcpRequest()             {}
func (AcpListDurableSessionsRequest) isAcpRequest()           {}
func (AcpDeleteSessionRequest) isAcpRequest()                 {}
func (AcpUnloadSessionRequest) isAcpRequest()                 {}
func (AcpPromptRequest) isAcpRequest()                        {}
func (AcpCancelPromptRequest) isAcpRequest()                  {}
func (AcpRespondPermissionRequest) isAcpRequest()             {}
func (AcpReadHistoryRequest) isAcpRequest()                   {}
func (AcpGetSessionConfigRequest) isAcpRequest()              {}
func (AcpSetSessionConfigOptionRequest) isAcpRequest()        {}
func (AcpGetSessionCapabilitiesRequest) isAcpRequest()        {}
func (AcpGetSessionAgentInfoRequest) isAcpRequest()           {}
func (AcpCreateSessionRequest) isAcpRequest()                 {}
func (AcpSessionRequest) isAcpRequest()                       {}
func (AcpGetSessionStateRequest) isAcpRequest()               {}
func (AcpCloseSessionRequest) isAcpRequest()                  {}
func (AcpResumeSessionRequest) isAcpRequest()                 {}
func (AcpDeliverAgentOutputRequest) isAcpRequest()            {}
func (AcpListAgentsRequest) isAcpRequest()                    {}
func (AcpOpenSessionResponse) isAcpResponse()                 {}
func (AcpGetDurableSessionResponse) isAcpResponse()           {}
func (AcpListDurableSessionsResponse) isAcpResponse()         {}
func (AcpDeleteSessionResponse) isAcpResponse()               {}
func (AcpUnloadSessionResponse) isAcpResponse()               {}
func (AcpPromptResponse) isAcpResponse()                      {}
func (AcpCancelPromptResponse) isAcpResponse()                {}
func (AcpRespondPermissionResponse) isAcpResponse()           {}
func (AcpHistoryPageResponse) isAcpResponse()                 {}
func (AcpSessionConfigResponse) isAcpResponse()               {}
func (AcpSessionCapabilitiesResponse) isAcpResponse()         {}
func (AcpSessionAgentInfoResponse) isAcpResponse()            {}
func (AcpSessionCreatedResponse) isAcpResponse()              {}
func (AcpSessionRpcResponse) isAcpResponse()                  {}
func (AcpSessionStateResponse) isAcpResponse()                {}
func (AcpSessionClosedResponse) isAcpResponse()               {}
func (AcpSessionResumedResponse) isAcpResponse()              {}
func (AcpErrorResponse) isAcpResponse()                       {}
func (AcpPendingResponse) isAcpResponse()                     {}
func (AcpListAgentsResponse) isAcpResponse()                  {}
func (AcpDurableSessionUpdate) isAcpDurableEvent()            {}
func (AcpDurablePermissionRequest) isAcpDurableEvent()        {}
func (AcpDurablePermissionResponse) isAcpDurableEvent()       {}
func (AcpDurableSessionEvent) isAcpEvent()                    {}
func (AcpEphemeralSessionUpdateEvent) isAcpEvent()            {}
func (AcpSessionEvent) isAcpEvent()                           {}
func (AcpAgentStderrEvent) isAcpEvent()                       {}
func (AcpAgentExitedEvent) isAcpEvent()                       {}
func (AcpHostRequestCallback) isAcpCallback()                 {}
func (AcpHostRequestCallbackResponse) isAcpCallbackResponse() {}

func (AcpOpenSessionRequest) VariantName() string         { return "AcpOpenSessionRequest" }
func (AcpGetDurableSessionRequest) VariantName() string   { return "AcpGetDurableSessionRequest" }
func (AcpListDurableSessionsRequest) VariantName() string { return "AcpListDurableSessionsRequest" }
func (AcpDeleteSessionRequest) VariantName() string       { return "AcpDeleteSessionRequest" }
func (AcpUnloadSessionRequest) VariantName() string       { return "AcpUnloadSessionRequest" }
func (AcpPromptRequest) VariantName() string              { return "AcpPromptRequest" }
func (AcpCancelPromptRequest) VariantName() string        { return "AcpCancelPromptRequest" }
func (AcpRespondPermissionRequest) VariantName() string   { return "AcpRespondPermissionRequest" }
func (AcpReadHistoryRequest) VariantName() string         { return "AcpReadHistoryRequest" }
func (AcpGetSessionConfigRequest) VariantName() string    { return "AcpGetSessionConfigRequest" }
func (AcpSetSessionConfigOptionRequest) VariantName() string {
	return "AcpSetSessionConfigOptionRequest"
}
func (AcpGetSessionCapabilitiesRequest) VariantName() string {
	return "AcpGetSessionCapabilitiesRequest"
}
func (AcpGetSessionAgentInfoRequest) VariantName() string  { return "AcpGetSessionAgentInfoRequest" }
func (AcpCreateSessionRequest) VariantName() string        { return "AcpCreateSessionRequest" }
func (AcpSessionRequest) VariantName() string              { return "AcpSessionRequest" }
func (AcpGetSessionStateRequest) VariantName() string      { return "AcpGetSessionStateRequest" }
func (AcpCloseSessionRequest) VariantName() string         { return "AcpCloseSessionRequest" }
func (AcpResumeSessionRequest) VariantName() string        { return "AcpResumeSessionRequest" }
func (AcpDeliverAgentOutputRequest) VariantName() string   { return "AcpDeliverAgentOutputRequest" }
func (AcpListAgentsRequest) VariantName() string           { return "AcpListAgentsRequest" }
func (AcpOpenSessionResponse) VariantName() string         { return "AcpOpenSessionResponse" }
func (AcpGetDurableSessionResponse) VariantName() string   { return "AcpGetDurableSessionResponse" }
func (AcpListDurableSessionsResponse) VariantName() string { return "AcpListDurableSessionsResponse" }
func (AcpDeleteSessionResponse) VariantName() string       { return "AcpDeleteSessionResponse" }
func (AcpUnloadSessionResponse) VariantName() string       { return "AcpUnloadSessionResponse" }
func (AcpPromptResponse) VariantName() string              { return "AcpPromptResponse" }
func (AcpCancelPromptResponse) VariantName() string        { return "AcpCancelPromptResponse" }
func (AcpRespondPermissionResponse) VariantName() string   { return "AcpRespondPermissionResponse" }
func (AcpHistoryPageResponse) VariantName() string         { return "AcpHistoryPageResponse" }
func (AcpSessionConfigResponse) VariantName() string       { return "AcpSessionConfigResponse" }
func (AcpSessionCapabilitiesResponse) VariantName() string { return "AcpSessionCapabilitiesResponse" }
func (AcpSessionAgentInfoResponse) VariantName() string    { return "AcpSessionAgentInfoResponse" }
func (AcpSessionCreatedResponse) VariantName() string      { return "AcpSessionCreatedResponse" }
func (AcpSessionRpcResponse) VariantName() string          { return "AcpSessionRpcResponse" }
func (AcpSessionStateResponse) VariantName() string        { return "AcpSessionStateResponse" }
func (AcpSessionClosedResponse) VariantName() string       { return "AcpSessionClosedResponse" }
func (AcpSessionResumedResponse) VariantName() string      { return "AcpSessionResumedResponse" }
func (AcpErrorResponse) VariantName() string               { return "AcpErrorResponse" }
func (AcpPendingResponse) VariantName() string             { return "AcpPendingResponse" }
func (AcpListAgentsResponse) VariantName() string          { return "AcpListAgentsResponse" }
func (AcpDurableSessionUpdate) VariantName() string        { return "AcpDurableSessionUpdate" }
func (AcpDurablePermissionRequest) VariantName() string    { return "AcpDurablePermissionRequest" }
func (AcpDurablePermissionResponse) VariantName() string   { return "AcpDurablePermissionResponse" }
func (AcpDurableSessionEvent) VariantName() string         { return "AcpDurableSessionEvent" }
func (AcpEphemeralSessionUpdateEvent) VariantName() string { return "AcpEphemeralSessionUpdateEvent" }
func (AcpSessionEvent) VariantName() string                { return "AcpSessionEvent" }
func (AcpAgentStderrEvent) VariantName() string            { return "AcpAgentStderrEvent" }
func (AcpAgentExitedEvent) VariantName() string            { return "AcpAgentExitedEvent" }
func (AcpHostRequestCallback) VariantName() string         { return "AcpHostRequestCallback" }
func (AcpHostRequestCallbackResponse) VariantName() string { return "AcpHostRequestCallbackResponse" }
func (AcpAgentEntry) VariantName() string                  { return "AcpAgentEntry" }
func (AcpDurableSessionInfo) VariantName() string          { return "AcpDurableSessionInfo" }
func (AcpDurableHistoryEntry) VariantName() string         { return "AcpDurableHistoryEntry" }

func init() {
	register(func() Variant { return new(AcpOpenSessionRequest) })
	register(func() Variant { return new(AcpGetDurableSessionRequest) })
	register(func() Variant { return new(AcpListDurableSessionsRequest) })
	register(func() Variant { return new(AcpDeleteSessionRequest) })
	register(func() Variant { return new(AcpUnloadSessionRequest) })
	register(func() Variant { return new(AcpPromptRequest) })
	register(func() Variant { return new(AcpCancelPromptRequest) })
	register(func() Variant { return new(AcpRespondPermissionRequest) })
	register(func() Variant { return new(AcpReadHistoryRequest) })
	register(func() Variant { return new(AcpGetSessionConfigRequest) })
	register(func() Variant { return new(AcpSetSessionConfigOptionRequest) })
	register(func() Variant { return new(AcpGetSessionCapabilitiesRequest) })
	register(func() Variant { return new(AcpGetSessionAgentInfoRequest) })
	register(func() Variant { return new(AcpCreateSessionRequest) })
	register(func() Variant { return new(AcpSessionRequest) })
	register(func() Variant { return new(AcpGetSessionStateRequest) })
	register(func() Variant { return new(AcpCloseSessionRequest) })
	register(func() Variant { return new(AcpResumeSessionRequest) })
	register(func() Variant { return new(AcpDeliverAgentOutputRequest) })
	register(func() Variant { return new(AcpListAgentsRequest) })
	register(func() Variant { return new(AcpOpenSessionResponse) })
	register(func() Variant { return new(AcpGetDurableSessionResponse) })
	register(func() Variant { return new(AcpListDurableSessionsResponse) })
	register(func() Variant { return new(AcpDeleteSessionResponse) })
	register(func() Variant { return new(AcpUnloadSessionResponse) })
	register(func() Variant { return new(AcpPromptResponse) })
	register(func() Variant { return new(AcpCancelPromptResponse) })
	register(func() Variant { return new(AcpRespondPermissionResponse) })
	register(func() Variant { return new(AcpHistoryPageResponse) })
	register(func() Variant { return new(AcpSessionConfigResponse) })
	register(func() Variant { return new(AcpSessionCapabilitiesResponse) })
	register(func() Variant { return new(AcpSessionAgentInfoResponse) })
	register(func() Variant { return new(AcpSessionCreatedResponse) })
	register(func() Variant { return new(AcpSessionRpcResponse) })
	register(func() Variant { return new(AcpSessionStateResponse) })
	register(func() Variant { return new(AcpSessionClosedResponse) })
	register(func() Variant { return new(AcpSessionResumedResponse) })
	register(func() Variant { return new(AcpErrorResponse) })
	register(func() Variant { return new(AcpPendingResponse) })
	register(func() Variant { return new(AcpListAgentsResponse) })
	register(func() Variant { return new(AcpDurableSessionUpdate) })
	register(func() Variant { return new(AcpDurablePermissionRequest) })
	register(func() Variant { return new(AcpDurablePermissionResponse) })
	register(func() Variant { return new(AcpDurableSessionEvent) })
	register(func() Variant { return new(AcpEphemeralSessionUpdateEvent) })
	register(func() Variant { return new(AcpSessionEvent) })
	register(func() Variant { return new(AcpAgentStderrEvent) })
	register(func() Variant { return new(AcpAgentExitedEvent) })
	register(func() Variant { return new(AcpHostRequestCallback) })
	register(func() Variant { return new(AcpHostRequestCallbackResponse) })
	register(func() Variant { return new(AcpAgentEntry) })
	register(func() Variant { return new(AcpDurableSessionInfo) })
	register(func() Variant { return new(AcpDurableHistoryEntry) })
}

// UnionMembers lists the schema's unions and their members in schema order.
var UnionMembers = map[string][]string{
	"AcpRequest":          {"AcpOpenSessionRequest", "AcpGetDurableSessionRequest", "AcpListDurableSessionsRequest", "AcpDeleteSessionRequest", "AcpUnloadSessionRequest", "AcpPromptRequest", "AcpCancelPromptRequest", "AcpRespondPermissionRequest", "AcpReadHistoryRequest", "AcpGetSessionConfigRequest", "AcpSetSessionConfigOptionRequest", "AcpGetSessionCapabilitiesRequest", "AcpGetSessionAgentInfoRequest", "AcpCreateSessionRequest", "AcpSessionRequest", "AcpGetSessionStateRequest", "AcpCloseSessionRequest", "AcpResumeSessionRequest", "AcpDeliverAgentOutputRequest", "AcpListAgentsRequest"},
	"AcpResponse":         {"AcpOpenSessionResponse", "AcpGetDurableSessionResponse", "AcpListDurableSessionsResponse", "AcpDeleteSessionResponse", "AcpUnloadSessionResponse", "AcpPromptResponse", "AcpCancelPromptResponse", "AcpRespondPermissionResponse", "AcpHistoryPageResponse", "AcpSessionConfigResponse", "AcpSessionCapabilitiesResponse", "AcpSessionAgentInfoResponse", "AcpSessionCreatedResponse", "AcpSessionRpcResponse", "AcpSessionStateResponse", "AcpSessionClosedResponse", "AcpSessionResumedResponse", "AcpErrorResponse", "AcpPendingResponse", "AcpListAgentsResponse"},
	"AcpDurableEvent":     {"AcpDurableSessionUpdate", "AcpDurablePermissionRequest", "AcpDurablePermissionResponse"},
	"AcpEvent":            {"AcpDurableSessionEvent", "AcpEphemeralSessionUpdateEvent", "AcpSessionEvent", "AcpAgentStderrEvent", "AcpAgentExitedEvent"},
	"AcpCallback":         {"AcpHostRequestCallback"},
	"AcpCallbackResponse": {"AcpHostRequestCallbackResponse"},
}
