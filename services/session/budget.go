package session

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"skein.dev/pkg/acp"
	"skein.dev/pkg/events"
	"skein.dev/pkg/events/eventlog"
)

// Spending caps (issue 32 §4). A session may have a cap, events.Budget's
// MaxCost: given at open (or the namespace's default,
// Config.BudgetDefault), changed by renameSession (PATCH). What it spent
// is counted from its agent's usage_update costs, which ACP makes the
// session's cumulative cost: each report adds its increase over the one
// before. A report lower than the one before is an agent counting from
// zero again (a restored adapter, a new agent session after a fallback
// restore): all of it is added. Costs are counted in one currency, the
// cap's (or, with no cap, the first one reported); a cost in another is
// not counted, only shown (the session's usage) and counted in
// acp_session_budget_foreign_costs_total. Skein converts no currency.
//
// Every change of the cap or the spend is a BudgetChanged record on the
// session's BudgetSubject, appended with what caused it (the usage update
// it counts, the open, the PATCH), so a new owner reads both back with one
// direct get. An update that brings the spend to the cap ends the running
// turn as a cancel does (the agent is sent session/cancel), with the
// outcome budget_exhausted and the error budget_exhausted in its
// TurnFinished; until the cap is raised, prompts are refused with it
// before anything is recorded.

// Caps, the label values of acp_session_budget_exhausted_total.
const (
	budgetCapSession = "session"
	budgetCapDaily   = "daily"
)

// budgetEntry is the log entry that records b as the session's budget.
func budgetEntry(ns events.Namespace, sid events.SessionID, b events.BudgetChanged) eventlog.Entry {
	return eventlog.Entry{Kind: events.LogControl, Subject: events.BudgetSubject(ns, sid), Value: &b}
}

// withCap returns b with the cap maxCost (nil: none). The spend is counted
// in the cap's currency: a cap in another currency than a spend already
// counted is invalid_request, since no cost counted so far could reach it.
func withCap(b events.BudgetChanged, maxCost *events.Money) (events.BudgetChanged, error) {
	b.MaxCost = maxCost
	if maxCost == nil {
		return b, nil
	}
	if c := b.Spent.Currency; c != "" && c != maxCost.Currency && (b.Spent.Amount != 0 || b.Reported != 0) {
		return b, events.Errorf(events.CodeInvalidRequest, "the session's spend is counted in %s (%s so far); a cap in %s cannot apply to it", c, formatAmount(b.Spent.Amount), maxCost.Currency)
	}
	if b.Spent.Currency != maxCost.Currency {
		b.Spent = events.Money{Currency: maxCost.Currency}
		b.Reported = 0
	}
	return b, nil
}

// sameCap reports whether a and b are the same cap (nil: none).
func sameCap(a, b *events.Money) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// exhaustedError is the error of a turn ended, or a prompt refused, at the
// session's cap.
func exhaustedError(sid events.SessionID, b events.BudgetChanged) *events.Error {
	return events.Errorf(events.CodeBudgetExhausted, "session %s spent %s %s of its cap of %s %s; raise the cap (PATCH budget) to prompt again",
		sid, formatAmount(b.Spent.Amount), b.Spent.Currency, formatAmount(b.MaxCost.Amount), b.MaxCost.Currency)
}

func formatAmount(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// checkBudget refuses a prompt of a session whose spend reached its cap,
// or whose namespace's spend today reached its daily cap (daily.go),
// before anything is recorded. The caller holds sess.mu.
func checkBudget(ctx context.Context, sess *session) error {
	if sess.budget.Exhausted() {
		sess.svc.m.budgetExhausted.WithLabelValues(budgetCapSession, "prompt").Inc()
		return exhaustedError(sess.sid, sess.budget)
	}
	return sess.svc.checkDaily(ctx, sess.ns)
}

// usageCost reads the cost of a usage_update: ok is false without one (or
// with one whose amount is not a finite number).
func usageCost(update []byte) (events.Money, bool) {
	u, ok := parseUsage(update)
	if !ok || u.Cost == nil {
		return events.Money{}, false
	}
	var amount, currency []byte
	if acp.Lookup(u.Cost, acp.Field{Name: "amount", Value: &amount}, acp.Field{Name: "currency", Value: &currency}) != nil {
		return events.Money{}, false
	}
	a, err := strconv.ParseFloat(string(amount), 64)
	c, ok := acp.StringValue(currency)
	if err != nil || !ok || math.IsNaN(a) || math.IsInf(a, 0) {
		return events.Money{}, false
	}
	return events.Money{Amount: a, Currency: c}, true
}

// counted returns b after the agent reported the cumulative cost: the
// report's increase over the last one added to the spend, or all of it
// when it is lower (the agent counts from zero again). ok is false when it
// changes nothing, or is in another currency than the spend's.
func counted(b events.BudgetChanged, cost events.Money) (next events.BudgetChanged, foreign, ok bool) {
	if b.Spent.Currency == "" {
		b.Spent.Currency = cost.Currency
	}
	if cost.Currency != b.Spent.Currency {
		return b, true, false
	}
	amount := max(cost.Amount, 0)
	delta := amount - b.Reported
	if amount < b.Reported {
		delta = amount
	}
	if delta == 0 && amount == b.Reported {
		return b, false, false
	}
	b.Spent.Amount = min(b.Spent.Amount+delta, math.MaxFloat64) // finite, so JSON shows it
	b.Reported = amount
	return b, false, true
}

// onCost counts the cost of the agent's usage_update, already queued for
// the log at at, toward the session's spend, and ends the running turn
// budget_exhausted when the spend reaches the cap. The caller holds
// sess.mu.
func (r *route) onCost(ctx context.Context, at ioPos, update []byte) {
	sess := r.sess
	cost, ok := usageCost(update)
	if !ok || sess.adapter != r {
		return
	}
	b, foreign, ok := counted(sess.budget, cost)
	if foreign {
		sess.svc.m.budgetForeign.Inc()
	}
	if !ok {
		return
	}
	if _, err := sess.append(ctx, at, budgetEntry(sess.ns, sess.sid, b)); err != nil {
		sess.svc.m.lostRecords.WithLabelValues(events.RecordBudgetChanged).Inc()
		sess.lg.Warn("record the session's spend", events.LogKeyErr, err)
		return
	}
	delta := b.Spent.Amount - sess.budget.Spent.Amount
	sess.budget = b
	exhausted, capName := (*events.Error)(nil), budgetCapSession
	if b.Exhausted() {
		exhausted = exhaustedError(sess.sid, b)
	}
	if daily := sess.svc.countDaily(ctx, sess, delta, b.Spent.Currency); exhausted == nil && daily != nil {
		exhausted, capName = daily, budgetCapDaily
	}
	if t := sess.turn; t != nil && exhausted != nil && sess.adapter == r {
		sess.svc.m.budgetExhausted.WithLabelValues(capName, "turn").Inc()
		sess.lg.Info("a spending cap is reached: cancelling the turn", events.LogKeyTurn, t.id, "cap", capName, events.LogKeyErr, exhausted.Message)
		t.endReason = events.ReasonPromptCancelled
		sess.abortTurn(ctx, at, events.OutcomeBudgetExhausted, exhausted)
		return
	}
	sess.project(ctx)
}

// NamespaceBudgets is an amount per namespace, "*" for every namespace
// without its own: the flags session.budget-default and
// session.budget-daily, each "ns=AMOUNT CUR" (a comma-separated list, or
// the flag repeated).
type NamespaceBudgets map[string]events.Money

// String returns b as Set reads it, sorted by namespace.
func (b *NamespaceBudgets) String() string {
	if b == nil {
		return ""
	}
	var parts []string
	for _, ns := range slices.Sorted(maps.Keys(*b)) {
		m := (*b)[ns]
		parts = append(parts, ns+"="+formatAmount(m.Amount)+" "+m.Currency)
	}
	return strings.Join(parts, ",")
}

// Set adds "ns=AMOUNT CUR" entries, comma-separated. A namespace named
// twice is an error, as is an amount that is no cap (events.Budget's
// rules: a finite amount, 0 or more, in three capital letters).
func (b *NamespaceBudgets) Set(s string) error {
	if *b == nil {
		*b = NamespaceBudgets{}
	}
	for entry := range strings.SplitSeq(s, ",") {
		entry = strings.TrimSpace(entry)
		if entry == "" {
			continue
		}
		ns, value, ok := strings.Cut(entry, "=")
		amount, currency, ok2 := strings.Cut(strings.TrimSpace(value), " ")
		ns = strings.TrimSpace(ns)
		if !ok || !ok2 {
			return fmt.Errorf("%q: want namespace=AMOUNT CURRENCY, like team-a=25 USD", entry)
		}
		if _, err := events.ParseNamespace(ns); err != nil && ns != "*" {
			return fmt.Errorf("%q: %q is not a namespace (or * for every other)", entry, ns)
		}
		a, err := strconv.ParseFloat(amount, 64)
		if err != nil {
			return fmt.Errorf("%q: amount %q is not a number", entry, amount)
		}
		m := events.Money{Amount: a, Currency: strings.TrimSpace(currency)}
		if err := (&events.Budget{MaxCost: &m}).Validate(); err != nil {
			return fmt.Errorf("%q: %s", entry, strings.TrimPrefix(events.AsError(err).Message, "budget.maxCost."))
		}
		if _, dup := (*b)[ns]; dup {
			return fmt.Errorf("%q: namespace %s named twice", entry, ns)
		}
		(*b)[ns] = m
	}
	return nil
}

// validate checks b as Set does, for a Config built in code.
func (b NamespaceBudgets) validate() error {
	var errs []error
	for _, ns := range slices.Sorted(maps.Keys(b)) {
		m := b[ns]
		if _, err := events.ParseNamespace(ns); err != nil && ns != "*" {
			errs = append(errs, fmt.Errorf("%q is not a namespace (or * for every other)", ns))
		}
		if err := (&events.Budget{MaxCost: &m}).Validate(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %s", ns, strings.TrimPrefix(events.AsError(err).Message, "budget.maxCost.")))
		}
	}
	return errors.Join(errs...)
}

// For returns ns's amount: its own, else "*"'s, else nil.
func (b NamespaceBudgets) For(ns events.Namespace) *events.Money {
	if m, ok := b[string(ns)]; ok {
		return &m
	}
	if m, ok := b["*"]; ok {
		return &m
	}
	return nil
}
