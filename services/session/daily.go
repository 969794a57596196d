package session

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"skein.dev/pkg/events"
)

// Daily caps (issue 32 §4): Config.BudgetDaily caps what a namespace's
// sessions spend together in one UTC day. The namespace's spend that day
// is one key of BucketBudgets, "<ns>.<YYYYMMDD>", whose value is
// "AMOUNT CURRENCY"; every owner adds its sessions' counted costs to it
// with a compare-and-set, so replicas share it. A cost counts toward it
// when the session counts it (budget.go) in the daily cap's currency. A
// session whose cost brings the day's spend to the cap ends its running
// turn budget_exhausted, as its own cap would; any other session of the
// namespace ends its turn at its agent's next cost, and every prompt of
// the namespace is refused budget_exhausted until the UTC day ends or the
// operator raises the cap.
//
// The add follows the session's BudgetChanged, and is not retried past
// its compare-and-set attempts: a fault between the two, or a bucket that
// does not answer, loses that one cost from the day's spend (logged, and
// counted in acp_session_unrecorded_total{record="DailySpend"}); no cost is
// ever added twice.

// recordDailySpend is the acp_session_unrecorded_total label of a cost
// not added to its namespace's daily spend.
const recordDailySpend = "DailySpend"

// dailyAttempts bounds the compare-and-set attempts of one add: each
// conflict is another owner's add of the same namespace, which succeeded.
const dailyAttempts = 16

// dailyKey is ns's key in BucketBudgets for the UTC day of now.
func dailyKey(ns events.Namespace, now time.Time) string {
	return string(ns) + "." + now.UTC().Format("20060102")
}

// readDaily returns ns's spend in currency on the UTC day of now, and the
// entry's revision (0: none yet). A spend recorded in another currency
// (the cap's currency changed that day) counts as none.
func (s *Service) readDaily(ctx context.Context, ns events.Namespace, currency string, now time.Time) (float64, uint64, error) {
	e, err := s.budgets.Get(ctx, dailyKey(ns, now))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, events.Errorf(events.CodeUnavailable, "read namespace %s's spend today: %v", ns, err)
	}
	amount, cur, _ := strings.Cut(string(e.Value()), " ")
	v, err := strconv.ParseFloat(amount, 64)
	if err != nil || cur != currency {
		return 0, e.Revision(), nil
	}
	return v, e.Revision(), nil
}

// addDaily adds delta, in currency, to ns's spend on the UTC day of now,
// and returns the new total.
func (s *Service) addDaily(ctx context.Context, ns events.Namespace, delta float64, currency string, now time.Time) (float64, error) {
	key := dailyKey(ns, now)
	var err error
	for range dailyAttempts {
		var total float64
		var rev uint64
		if total, rev, err = s.readDaily(ctx, ns, currency, now); err != nil {
			return 0, err
		}
		total = min(total+delta, math.MaxFloat64)
		value := []byte(formatAmount(total) + " " + currency)
		if rev == 0 {
			_, err = s.budgets.Create(ctx, key, value)
		} else {
			_, err = s.budgets.Update(ctx, key, value, rev)
		}
		if err == nil {
			return total, nil
		}
	}
	return 0, events.Errorf(events.CodeUnavailable, "add to namespace %s's spend today: %v", ns, err)
}

// dailyExhausted is the error of a turn ended, or a prompt refused, at the
// namespace's daily cap.
func dailyExhausted(ns events.Namespace, spent float64, limit events.Money) *events.Error {
	return events.Errorf(events.CodeBudgetExhausted, "namespace %s spent %s %s today (UTC) of its daily cap of %s %s; prompts run again when the UTC day ends or the operator raises session.budget-daily",
		ns, formatAmount(spent), limit.Currency, formatAmount(limit.Amount), limit.Currency)
}

// checkDaily refuses a prompt of a namespace whose spend today reached its
// daily cap.
func (s *Service) checkDaily(ctx context.Context, ns events.Namespace) error {
	limit := s.cfg.BudgetDaily.For(ns)
	if limit == nil {
		return nil
	}
	spent, _, err := s.readDaily(ctx, ns, limit.Currency, time.Now())
	if err != nil {
		return err
	}
	if spent < limit.Amount {
		return nil
	}
	s.m.budgetExhausted.WithLabelValues(budgetCapDaily, "prompt").Inc()
	return dailyExhausted(ns, spent, *limit)
}

// countDaily adds a session's counted cost, delta in currency, to its
// namespace's spend today, and returns the error a running turn ends with
// when that reaches the daily cap (nil: it does not, or the namespace has
// none).
func (s *Service) countDaily(ctx context.Context, sess *session, delta float64, currency string) *events.Error {
	limit := s.cfg.BudgetDaily.For(sess.ns)
	if limit == nil || limit.Currency != currency || delta <= 0 {
		return nil
	}
	total, err := s.addDaily(ctx, sess.ns, delta, currency, time.Now())
	if err != nil {
		s.m.lostRecords.WithLabelValues(recordDailySpend).Inc()
		sess.lg.Warn("add a cost to the namespace's spend today", events.LogKeyErr, err)
		return nil
	}
	if total < limit.Amount {
		return nil
	}
	return dailyExhausted(sess.ns, total, *limit)
}
