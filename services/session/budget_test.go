package session_test

import (
	"flag"
	"strings"
	"testing"
	"time"

	"skein.dev/internal/testutil"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/rpc"
	"skein.dev/services/session"
)

// setBudget sets sid's cap with renameSession (PATCH's budget); nil
// removes it.
func (h *harness) setBudget(t *testing.T, sid string, maxCost *events.Money) (*events.RenameSessionResponse, error) {
	t.Helper()
	return rpc.Call[events.RenameSessionResponse](t.Context(), h.nc, events.APISubject("default", events.OpRenameSession),
		&events.RenameSessionRequest{SessionID: &sid, Budget: &events.Budget{MaxCost: maxCost}}, nil)
}

// wantBudget checks sid's budget as getSession shows it.
func (h *harness) wantBudget(t *testing.T, sid string, maxCost *events.Money, spent float64) {
	t.Helper()
	b := h.getSession(t, sid).Budget
	if b == nil {
		t.Fatalf("%s shows no budget; want cap %v, spent %v", sid, maxCost, spent)
	}
	if (b.MaxCost == nil) != (maxCost == nil) || maxCost != nil && *b.MaxCost != *maxCost || b.Spent.Amount != spent {
		t.Fatalf("%s budget = cap %v, spent %v %s; want cap %v, spent %v", sid, b.MaxCost, b.Spent.Amount, b.Spent.Currency, maxCost, spent)
	}
}

func usd(v float64) *events.Money { return &events.Money{Amount: v, Currency: "USD"} }

// A session's spending cap (issue 32 §4): the agent's cumulative cost
// reaching it cancels the running turn at the agent, which ends
// budget_exhausted in the log; later prompts are refused before anything
// is recorded, until PATCH raises the cap. Costs in another currency are
// not counted. A restored agent that counts from zero again adds to the
// spend, and a new owner reads cap and spend back from the log.
func TestBudgetCapsSpend(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	const sid = "capped"
	if err := h.open(t, sid, events.AcpOpenSessionRequest{Budget: &events.Budget{MaxCost: usd(1)}}); err != nil {
		t.Fatal(err)
	}
	h.wantBudget(t, sid, usd(1), 0)

	// Under the cap, and a cost in euros, which is not counted.
	h.mustPrompt(t, sid, "cost 1 2 0.4 USD\ncost 1 2 9 EUR\nsay under")
	h.wantBudget(t, sid, usd(1), 0.4)
	if n := testutil.Metric(t, h.reg, "acp_session_budget_foreign_costs_total"); n != 1 {
		t.Errorf("foreign costs %v, want 1", n)
	}

	// Crossing it: the agent, paused after the cost, is cancelled.
	_, err := h.prompt(ctx, sid, "", "cost 1 2 1.2 USD\npause spend\nsay never")
	if code(err) != events.CodeBudgetExhausted {
		t.Fatalf("the turn that crossed the cap answered %v, want budget_exhausted", err)
	}
	f := h.lastFinish(t, sid)
	if f.Outcome != events.OutcomeBudgetExhausted || f.Error == nil || f.Error.Code != string(events.CodeBudgetExhausted) {
		t.Fatalf("the turn ended %s (%v), want budget_exhausted with its error", f.Outcome, f.Error)
	}
	h.wantBudget(t, sid, usd(1), 1.2)
	if n := testutil.Metric(t, h.reg, "acp_session_budget_exhausted_total", "cap", "session", "event", "turn"); n != 1 {
		t.Errorf("exhausted turns %v, want 1", n)
	}

	// Refused, with nothing recorded.
	before, err := h.lastSeq(ctx, sid)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.prompt(ctx, sid, "", "say refused"); code(err) != events.CodeBudgetExhausted {
		t.Fatalf("a prompt over the cap answered %v, want budget_exhausted", err)
	}
	if after, err := h.lastSeq(ctx, sid); err != nil || after != before {
		t.Fatalf("the refused prompt moved the log from %d to %d (%v)", before, after, err)
	}

	// A cap in another currency than the spend is refused, and changes
	// nothing; raising it lets prompts run again.
	if _, err := h.setBudget(t, sid, &events.Money{Amount: 5, Currency: "EUR"}); code(err) != events.CodeInvalidRequest {
		t.Fatalf("a cap in EUR over a spend in USD answered %v, want invalid_request", err)
	}
	resp, err := h.setBudget(t, sid, usd(2))
	if err != nil {
		t.Fatal(err)
	}
	if b := resp.Session.Budget; b == nil || *b.MaxCost != *usd(2) || b.Spent.Amount != 1.2 {
		t.Fatalf("PATCH answered budget %+v, want cap 2 USD, spent 1.2", b)
	}
	h.mustPrompt(t, sid, "cost 1 2 1.5 USD\nsay again")
	h.wantBudget(t, sid, usd(2), 1.5)

	// A new agent process counts from zero: all of its report adds.
	if _, err := rpc.Call[events.AcpUnloadSessionResponse](ctx, h.nc, events.APISubject("default", events.OpUnloadSession),
		&events.AcpUnloadSessionRequest{SessionID: new(sid)}, nil); err != nil {
		t.Fatal(err)
	}
	h.mustPrompt(t, sid, "cost 1 2 0.25 USD\nsay restored")
	h.wantBudget(t, sid, usd(2), 1.75)

	// A new owner knows cap and spend from the log.
	h.stopSvc()
	h.startSession()
	acc, err := h.accept(ctx, sid, "", "cost 1 2 0.5 USD\npause owner\nsay never")
	if err != nil {
		t.Fatal(err)
	}
	f = (&ioScript{h: h, sid: sid, acc: acc}).await(t)
	if f.Outcome != events.OutcomeBudgetExhausted {
		t.Fatalf("under a new owner the turn ended %s (%v), want budget_exhausted", f.Outcome, f.Error)
	}
	h.wantBudget(t, sid, usd(2), 2)

	// Removing the cap lets it run; the spend is still counted.
	if _, err := h.setBudget(t, sid, nil); err != nil {
		t.Fatal(err)
	}
	h.mustPrompt(t, sid, "cost 1 2 0.75 USD\nsay free")
	h.wantBudget(t, sid, nil, 2.25)
	if _, _, err := h.audit(ctx, sid); err != nil {
		t.Fatal(err)
	}
}

// Bad budgets are invalid_request and record nothing: at open (an
// unknown currency, a negative amount, NaN, a budget without a cap) and
// with PATCH; a PATCH of a missing session is session_not_found. A
// reopen with another cap is session_conflict.
func TestBudgetRefusesBadInput(t *testing.T) {
	h := startRig(t, session.Config{})
	ctx := t.Context()
	nan := 0.0
	nan /= nan
	for _, b := range []*events.Budget{
		{MaxCost: &events.Money{Amount: 1, Currency: "usd"}},
		{MaxCost: &events.Money{Amount: 1, Currency: "DOLLARS"}},
		{MaxCost: &events.Money{Amount: -1, Currency: "USD"}},
		{MaxCost: &events.Money{Amount: nan, Currency: "USD"}},
		{},
	} {
		if err := h.open(t, "bad", events.AcpOpenSessionRequest{Budget: b}); code(err) != events.CodeInvalidRequest {
			t.Errorf("open with budget %+v answered %v, want invalid_request", b.MaxCost, err)
		}
	}
	if seq, err := h.lastSeq(ctx, "bad"); err != nil || seq != 0 {
		t.Fatalf("refused opens left the log at %d (%v), want nothing", seq, err)
	}
	if _, err := h.setBudget(t, "missing", usd(1)); code(err) != events.CodeSessionNotFound {
		t.Fatalf("PATCH of a missing session answered %v, want session_not_found", err)
	}
	if err := h.open(t, "ok", events.AcpOpenSessionRequest{Budget: &events.Budget{MaxCost: usd(3)}}); err != nil {
		t.Fatal(err)
	}
	before, _ := h.lastSeq(ctx, "ok")
	if _, err := h.setBudget(t, "ok", &events.Money{Amount: -2, Currency: "USD"}); code(err) != events.CodeInvalidRequest {
		t.Fatalf("PATCH with a negative cap answered %v, want invalid_request", err)
	}
	if after, _ := h.lastSeq(ctx, "ok"); after != before {
		t.Fatalf("a refused PATCH moved the log from %d to %d", before, after)
	}
	if err := h.open(t, "ok", events.AcpOpenSessionRequest{Budget: &events.Budget{MaxCost: usd(4)}}); code(err) != events.CodeSessionConflict {
		t.Fatalf("a reopen with another cap answered %v, want session_conflict", err)
	}
	if err := h.open(t, "ok", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatalf("a reopen without a budget: %v", err)
	}
	h.wantBudget(t, "ok", usd(3), 0)
}

// A namespace's default cap (session.budget-default) is the cap of a
// session opened without one; a budget at open replaces it. A fork has its
// source's cap, and nothing spent.
func TestBudgetNamespaceDefault(t *testing.T) {
	var def session.NamespaceBudgets
	if err := def.Set("default=0.5 USD,other=9 EUR"); err != nil {
		t.Fatal(err)
	}
	h := startRig(t, session.Config{BudgetDefault: def})
	if err := h.open(t, "d", events.AcpOpenSessionRequest{}); err != nil {
		t.Fatal(err)
	}
	h.wantBudget(t, "d", usd(0.5), 0)
	if err := h.open(t, "own", events.AcpOpenSessionRequest{Budget: &events.Budget{MaxCost: usd(7)}}); err != nil {
		t.Fatal(err)
	}
	h.wantBudget(t, "own", usd(7), 0)
	h.mustPrompt(t, "own", "cost 1 2 3 USD\nsay spent")
	h.wantBudget(t, "own", usd(7), 3)
	if _, err := rpc.Call[events.ForkSessionResponse](t.Context(), h.nc, events.APISubject("default", events.OpForkSession),
		&events.ForkSessionRequest{SessionID: new("own"), NewSessionID: "own-fork"}, nil); err != nil {
		t.Fatal(err)
	}
	h.wantBudget(t, "own-fork", usd(7), 0)
}

// The budget flags read "ns=AMOUNT CUR" lists, repeated or comma-separated,
// and refuse at start what is no cap: Set as the flag is parsed, Validate
// for a Config built in code, naming the flag.
func TestBudgetFlags(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	var c session.Config
	c.RegisterFlags(fs)
	if err := fs.Parse([]string{"-session.budget-default", "team-a=2.5 USD, * = 1 EUR", "-session.budget-daily", "team-a=100 USD", "-session.budget-daily", "team-b=7 GBP"}); err != nil {
		t.Fatal(err)
	}
	if got := c.BudgetDefault.String(); got != "*=1 EUR,team-a=2.5 USD" {
		t.Errorf("budget-default = %q", got)
	}
	if m := c.BudgetDefault.For("team-z"); m == nil || *m != (events.Money{Amount: 1, Currency: "EUR"}) {
		t.Errorf("team-z's default = %v, want *'s", m)
	}
	if got := c.BudgetDaily.String(); got != "team-a=100 USD,team-b=7 GBP" {
		t.Errorf("budget-daily = %q", got)
	}
	if c.BudgetDaily.For("team-z") != nil {
		t.Error("a namespace the daily caps do not name has one")
	}
	for _, bad := range []string{"team-a", "team-a=5", "team-a=five USD", "team-a=5 usd", "team-a=-1 USD", "team-a=NaN USD", "Team.A=5 USD", "a=1 USD,a=2 USD"} {
		var b session.NamespaceBudgets
		if err := b.Set(bad); err == nil {
			t.Errorf("Set(%q) accepted it", bad)
		}
	}
	c = session.DefaultConfig()
	c.BudgetDaily = session.NamespaceBudgets{"ok": {Amount: -1, Currency: "USD"}}
	c.BudgetDefault = session.NamespaceBudgets{"Bad!": {Amount: 1, Currency: "USD"}}
	err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "session.budget-daily") || !strings.Contains(err.Error(), "session.budget-default") {
		t.Errorf("Validate() = %v, want both budget flags named", err)
	}
}

// A namespace's daily cap (session.budget-daily) is shared by its
// sessions: the cost that brings the day's spend to it ends that turn
// budget_exhausted, and then every prompt of the namespace is refused,
// nothing recorded. Costs in another currency than the cap's, and other
// namespaces, are not counted.
func TestBudgetDailyCap(t *testing.T) {
	var daily session.NamespaceBudgets
	if err := daily.Set("default=1 USD"); err != nil {
		t.Fatal(err)
	}
	h := startRig(t, session.Config{BudgetDaily: daily})
	ctx := t.Context()
	for _, sid := range []string{"a", "b", "euros"} {
		if err := h.open(t, sid, events.AcpOpenSessionRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	h.mustPrompt(t, "euros", "cost 1 2 50 EUR\nsay not counted")
	h.mustPrompt(t, "a", "cost 1 2 0.6 USD\nsay a")
	_, err := h.prompt(ctx, "b", "", "cost 1 2 0.5 USD\npause daily\nsay never")
	if code(err) != events.CodeBudgetExhausted {
		t.Fatalf("the turn that reached the daily cap answered %v, want budget_exhausted", err)
	}
	if f := h.lastFinish(t, "b"); f.Outcome != events.OutcomeBudgetExhausted {
		t.Fatalf("the turn ended %s, want budget_exhausted", f.Outcome)
	}
	before, err := h.lastSeq(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.prompt(ctx, "a", "", "say refused"); code(err) != events.CodeBudgetExhausted || !strings.Contains(err.Error(), "daily cap") {
		t.Fatalf("a prompt over the daily cap answered %v, want budget_exhausted naming it", err)
	}
	if after, _ := h.lastSeq(ctx, "a"); after != before {
		t.Fatalf("the refused prompt moved the log from %d to %d", before, after)
	}
	if n := testutil.Metric(t, h.reg, "acp_session_budget_exhausted_total", "cap", "daily", "event", "prompt"); n != 1 {
		t.Errorf("daily refusals %v, want 1", n)
	}
	kv, err := h.js.KeyValue(ctx, events.BucketBudgets)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, "default."+time.Now().UTC().Format("20060102"))
	if err != nil || string(e.Value()) != "1.1 USD" {
		t.Fatalf("the day's spend = %v (%v), want 1.1 USD", e, err)
	}
	// The session's own spend is its own.
	h.wantBudget(t, "b", nil, 0.5)
}
