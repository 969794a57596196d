package session

import (
	"context"
	"encoding/json"

	"skein.dev/internal/workspace"
	"skein.dev/pkg/events"
)

// normalizeOpen applies the defaults to a validated open request
// (AcpOpenSessionRequest.Validate), giving the immutable options recorded
// in SessionOpened. ACP values are kept byte for byte. A session opened
// without a cwd gets session.default-cwd if set, else its own directory
// under the first workspace root, <root>/<namespace>/<session ID>, which
// the runner creates when it launches the adapter.
func (s *Service) normalizeOpen(req *events.AcpOpenSessionRequest, ns events.Namespace, sid events.SessionID) *events.SessionOpened {
	o := &events.SessionOpened{
		Agent:                  req.Agent,
		Cwd:                    s.cfg.DefaultCwd,
		PermissionPolicy:       events.PolicyAllowAll,
		AdditionalInstructions: req.AdditionalInstructions,
		AdditionalDirectories:  req.AdditionalDirectories,
		Env:                    req.Env,
		McpServers:             req.McpServers,
	}
	if o.Cwd == "" {
		o.Cwd = s.cfg.WorkspaceRoots.Default(ns, sid)
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
	if req.InputPolicy != nil && *req.InputPolicy == events.InputPolicyDecline {
		// The default (ask) is recorded as nothing, as before inputPolicy.
		o.InputPolicy = events.InputPolicyDecline
	}
	if p := req.Placement; p != nil {
		// Labels choose the runner when the session is recorded (open).
		if p.Runner != nil {
			o.Runner = *p.Runner
		}
		o.Labels = p.Labels
	}
	return o
}

// checkOpen refuses, before anything is recorded, the options of an open
// in namespace ns the runner would refuse at launch (package workspace): a
// cwd or an additional directory outside ns's own directory under the
// workspace roots, and what session.workspace-grants give ns, symlinks
// resolved; an env no process can be given; and env variables the agent's
// allowEnv does not name, by the runners' heartbeats. With no roots
// configured the paths are left to the runner; an agent no runner has is
// left to placement (unknown_agent), its env names to the runner.
func (s *Service) checkOpen(ctx context.Context, ns events.Namespace, o *events.SessionOpened) error {
	if roots := s.cfg.WorkspaceRoots; len(roots) > 0 {
		grants := s.cfg.WorkspaceGrants
		if o.Cwd != "" {
			if _, err := roots.Check(ns, grants, "cwd", o.Cwd); err != nil {
				return err
			}
		}
		var dirs []string
		if len(o.AdditionalDirectories) > 0 {
			_ = json.Unmarshal(o.AdditionalDirectories, &dirs) // Validate checked its shape
		}
		for _, d := range dirs {
			if _, err := roots.Check(ns, grants, "additionalDirectories entry", d); err != nil {
				return err
			}
		}
	}
	if len(o.Env) == 0 {
		return nil
	}
	var env map[string]string
	_ = json.Unmarshal(o.Env, &env) // Validate checked its shape
	if len(env) == 0 {
		return nil
	}
	// Checked whatever the agent: a NUL recorded in the env would fail
	// every launch of the session's adapter, for good.
	if err := workspace.ValidEnv(env); err != nil {
		return err
	}
	allow, known := s.runners.allowEnv(o.Agent)
	if !known {
		if err := s.runners.refresh(ctx); err == nil {
			allow, known = s.runners.allowEnv(o.Agent)
		}
	}
	if !known {
		return nil
	}
	return workspace.CheckEnv(o.Agent, allow, env)
}
