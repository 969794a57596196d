package events

import "math"

// Spending caps (issue 32 §4; the rules are services/session/budget.go's).

// Money is an amount in a currency: ISO 4217's three capital letters.
type Money struct {
	Amount   float64 `msgpack:"amount"`
	Currency string  `msgpack:"currency"`
}

// Budget is a session's cap as a request gives it; nil MaxCost is none.
type Budget struct {
	MaxCost *Money `msgpack:"maxCost,omitempty"`
}

// BudgetInfo is a session's cap and what it spent, as getSession shows it.
type BudgetInfo struct {
	MaxCost *Money `msgpack:"maxCost,omitempty"`
	Spent   Money  `msgpack:"spent"`
}

// BudgetChanged, on BudgetSubject, is a session's cap and spend now:
// Spent in Spent.Currency ("" until a cap or cost names one), Reported
// the agent's last cumulative cost in it.
type BudgetChanged struct {
	MaxCost  *Money  `msgpack:"maxCost,omitempty"`
	Spent    Money   `msgpack:"spent"`
	Reported float64 `msgpack:"reported,omitempty"`
}

// Exhausted reports whether the spend reached the cap.
func (b *BudgetChanged) Exhausted() bool {
	return b.MaxCost != nil && b.Spent.Amount >= b.MaxCost.Amount
}

// Info is b as getSession shows it: nil without a cap or a counted cost.
func (b *BudgetChanged) Info() *BudgetInfo {
	if b.MaxCost == nil && b.Spent.Currency == "" {
		return nil
	}
	return &BudgetInfo{MaxCost: b.MaxCost, Spent: b.Spent}
}

// Validate checks a cap: a finite amount, 0 or more, in three capital
// letters (ISO 4217's form: Skein converts nothing, so any is known).
func (b *Budget) Validate() error {
	m := b.MaxCost
	if m == nil {
		return nil
	}
	if math.IsNaN(m.Amount) || math.IsInf(m.Amount, 0) || m.Amount < 0 {
		return Errorf(CodeInvalidRequest, "budget.maxCost.amount must be a finite number, 0 or more")
	}
	for i := range 3 {
		if len(m.Currency) != 3 || m.Currency[i] < 'A' || m.Currency[i] > 'Z' {
			return Errorf(CodeInvalidRequest, "budget.maxCost.currency %q is not a currency: three capital letters (ISO 4217, like USD)", Truncate(m.Currency, 16))
		}
	}
	return nil
}

// RecordBudgetChanged is BudgetChanged's variant name.
const RecordBudgetChanged = "BudgetChanged"

func (BudgetChanged) VariantName() string { return RecordBudgetChanged }

func init() { register(func() Variant { return new(BudgetChanged) }) }
