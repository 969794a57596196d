package session

import (
	"skein.dev/pkg/events"
)

// normalizeOpen applies the defaults to a validated open request
// (AcpOpenSessionRequest.Validate), giving the immutable options recorded
// in SessionOpened. ACP values are kept byte for byte.
func (s *Service) normalizeOpen(req *events.AcpOpenSessionRequest) *events.SessionOpened {
	o := &events.SessionOpened{
		Agent:                  req.Agent,
		Cwd:                    s.cfg.DefaultCwd,
		PermissionPolicy:       events.PolicyAllowAll,
		AdditionalInstructions: req.AdditionalInstructions,
		AdditionalDirectories:  req.AdditionalDirectories,
		Env:                    req.Env,
		McpServers:             req.McpServers,
	}
	if req.Cwd != nil {
		o.Cwd = *req.Cwd
	}
	if req.SkipOsInstructions != nil {
		o.SkipOsInstructions = *req.SkipOsInstructions
	}
	if req.PermissionPolicy != nil {
		o.PermissionPolicy = *req.PermissionPolicy
	}
	return o
}
