package test

import (
	"testing"

	"github.com/anishathalye/porcupine"
)

// TestSessionModel checks the model itself: the histories of a healthy
// session linearize, and each defect the checked histories exist to catch
// does not. Each history is of one session, s; an operation is
// {client, call, return, op, result}.
func TestSessionModel(t *testing.T) {
	type o struct {
		client    int
		call, ret int64
		op        sessionOp
		res       sessionResult
	}
	open := func(c int, call, ret int64) o {
		return o{c, call, ret, sessionOp{Kind: "open"}, sessionResult{Status: "ok"}}
	}
	// prompt is a blocking prompt: accepted as turn, ended with outcome.
	prompt := func(c int, call, ret int64, key, turn, outcome string) []o {
		return []o{
			{c, call, ret, sessionOp{Kind: "prompt", Key: key}, sessionResult{Status: "accepted", Turn: turn}},
			{c, call, ret, sessionOp{Kind: "await", Turn: turn}, sessionResult{Outcome: outcome}},
		}
	}
	refused := func(c int, call, ret int64, key, status string) o {
		return o{c, call, ret, sessionOp{Kind: "prompt", Key: key}, sessionResult{Status: status}}
	}
	get := func(c int, call, ret int64, status string) o {
		return o{c, call, ret, sessionOp{Kind: "get"}, sessionResult{Status: status}}
	}
	cancel := func(c int, call, ret int64, status, outcome string) o {
		return o{c, call, ret, sessionOp{Kind: "cancel"}, sessionResult{Status: status, Outcome: outcome}}
	}
	respond := func(c int, call, ret int64, req, status string) o {
		return o{c, call, ret, sessionOp{Kind: "respond", Request: req}, sessionResult{Status: status}}
	}
	del := func(c int, call, ret int64) o {
		return o{c, call, ret, sessionOp{Kind: "delete"}, sessionResult{Status: "ok"}}
	}
	join := func(parts ...any) []o {
		var out []o
		for _, p := range parts {
			switch p := p.(type) {
			case o:
				out = append(out, p)
			case []o:
				out = append(out, p...)
			}
		}
		return out
	}
	tests := []struct {
		name string
		ops  []o
		ok   bool
	}{
		{"a turn, gets around it", join(open(0, 0, 1), prompt(0, 2, 10, "k1", "t1", "completed"),
			get(1, 3, 4, "busy"), get(1, 11, 12, "idle"), prompt(0, 13, 20, "k2", "t2", "completed")), true},
		{"a get concurrent with the end sees either", join(open(0, 0, 1), prompt(0, 2, 10, "k1", "t1", "completed"),
			get(1, 9, 11, "busy"), get(2, 9, 11, "idle")), true},
		{"a keyed retry joins its turn", join(open(0, 0, 1), prompt(0, 2, 10, "k1", "t1", "completed"),
			prompt(1, 5, 10, "k1", "t1", "completed"), prompt(2, 12, 13, "k1", "t1", "completed")), true},
		{"another key while a turn runs is busy", join(open(0, 0, 1), prompt(0, 2, 10, "k1", "t1", "completed"),
			refused(1, 3, 4, "k2", "busy")), true},
		// A blocking prompt's acceptance is not seen, so two concurrent
		// prompts may have run one after the other; a get that sees a
		// turn run on each side of another's whole prompt shows the
		// overlap.
		{"two turns at once", join(open(0, 0, 1), prompt(0, 2, 20, "k1", "t1", "completed"), get(1, 3, 4, "busy"),
			prompt(2, 5, 8, "k2", "t2", "completed"), get(1, 9, 10, "busy")), false},
		{"busy with no turn running", join(open(0, 0, 1), prompt(0, 2, 5, "k1", "t1", "completed"),
			refused(1, 6, 7, "k2", "busy")), false},
		{"a get names the running turn", join(open(0, 0, 1), prompt(0, 2, 10, "k1", "t1", "completed"),
			o{1, 3, 4, sessionOp{Kind: "get"}, sessionResult{Status: "busy", Turn: "t1"}}), true},
		{"a get names another turn", join(open(0, 0, 1), prompt(0, 2, 10, "k1", "t1", "completed"),
			o{1, 3, 4, sessionOp{Kind: "get"}, sessionResult{Status: "busy", Turn: "t2"}}), false},
		{"a get sees idle mid-turn", join(open(0, 0, 1), prompt(0, 2, 10, "k1", "t1", "completed"),
			get(1, 3, 4, "busy"), get(1, 5, 6, "idle"), get(1, 7, 8, "busy")), false},
		{"a keyed retry answers another turn", join(open(0, 0, 1), prompt(0, 2, 10, "k1", "t1", "completed"),
			prompt(1, 11, 12, "k1", "t9", "completed")), false},
		{"cancel wins: the turn is cancelled", join(open(0, 0, 1), prompt(0, 2, 10, "k1", "t1", "cancelled"),
			cancel(1, 4, 9, "cancelled", "")), true},
		{"completion wins: the cancel finds the turn ended", join(open(0, 0, 1), prompt(0, 2, 10, "k1", "t1", "completed"),
			cancel(1, 4, 11, "ended", "completed")), true},
		{"completion wins: the cancel finds nothing", join(open(0, 0, 1), prompt(0, 2, 10, "k1", "t1", "completed"),
			cancel(1, 4, 11, "no_active_prompt", "")), true},
		{"both win: cancelled, yet the turn completed", join(open(0, 0, 1), prompt(0, 2, 10, "k1", "t1", "completed"),
			cancel(1, 4, 9, "cancelled", "")), false},
		{"nothing to cancel mid-turn", join(open(0, 0, 1), prompt(0, 2, 10, "k1", "t1", "completed"),
			get(1, 3, 4, "busy"), cancel(1, 5, 6, "no_active_prompt", ""), get(1, 7, 8, "busy")), false},
		{"one answer, a late one not pending", join(open(0, 0, 1), prompt(0, 2, 10, "k1", "t1", "completed"),
			respond(1, 3, 4, "r1", "accepted"), respond(2, 3, 5, "r1", "not_pending")), true},
		{"two answers to one request", join(open(0, 0, 1), prompt(0, 2, 10, "k1", "t1", "completed"),
			respond(1, 3, 4, "r1", "accepted"), respond(2, 3, 5, "r1", "accepted")), false},
		{"deleted stays deleted", join(open(0, 0, 1), prompt(0, 2, 5, "k1", "t1", "completed"), del(0, 6, 7),
			get(1, 8, 9, "not_found"), refused(1, 10, 11, "k2", "not_found")), true},
		{"a deletion ends the running turn", join(open(0, 0, 1), prompt(0, 2, 10, "k1", "t1", "failed"),
			del(1, 4, 5), get(1, 6, 7, "not_found")), true},
		{"resurrection after delete", join(open(0, 0, 1), del(0, 2, 3), get(1, 4, 5, "idle")), false},
		{"a prompt after delete runs", join(open(0, 0, 1), del(0, 2, 3), prompt(1, 4, 6, "k1", "t1", "completed")), false},
		{"reopened after delete", join(open(0, 0, 1), del(0, 2, 3), get(1, 4, 5, "not_found"), open(0, 6, 7),
			get(1, 8, 9, "idle")), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var history []porcupine.Operation
			for _, op := range tt.ops {
				op.op.Session = "s"
				history = append(history, porcupine.Operation{ClientId: op.client, Input: op.op, Call: op.call, Output: op.res, Return: op.ret})
			}
			if got := porcupine.CheckOperations(sessionModel, history); got != tt.ok {
				t.Errorf("linearizable = %v, want %v", got, tt.ok)
			}
		})
	}
}
