package eventlog

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"
)

// A read nobody answers is asked again, each attempt given twice as long
// as the one before, until the caller's deadline; an answer, or an error
// other than an attempt's deadline, ends the attempts. On synctest's
// clock, so that the attempts' bounds are exact.
func TestTryAgain(t *testing.T) {
	// unanswered blocks until its attempt's deadline and records how long
	// each attempt was given.
	unanswered := func(attempts *[]time.Duration, answerAt int) func(ctx context.Context) (int, error) {
		return func(ctx context.Context) (int, error) {
			start := time.Now()
			if len(*attempts) == answerAt {
				*attempts = append(*attempts, 0)
				return 42, nil
			}
			<-ctx.Done()
			*attempts = append(*attempts, time.Since(start))
			return 0, ctx.Err()
		}
	}
	nc := &nats.Conn{Opts: nats.Options{Timeout: 5 * time.Second}}
	s := time.Second
	for _, tc := range []struct {
		name     string
		deadline time.Duration // 0: none, the connection's timeout bounds the reads
		answerAt int           // the attempt that answers; -1: none
		want     []time.Duration
		wantErr  error
	}{
		{"unanswered until the deadline", 10 * s, -1, []time.Duration{s, 2 * s, 4 * s, 3 * s}, context.DeadlineExceeded},
		{"answered at the third attempt", 10 * s, 2, []time.Duration{s, 2 * s, 0}, nil},
		{"no deadline: the connection's timeout", 0, -1, []time.Duration{s, 2 * s, 2 * s}, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := t.Context()
				if tc.deadline > 0 {
					var cancel context.CancelFunc
					ctx, cancel = context.WithTimeout(ctx, tc.deadline)
					defer cancel()
				}
				var attempts []time.Duration
				v, err := tryAgain(ctx, nc, unanswered(&attempts, tc.answerAt))
				if !errors.Is(err, tc.wantErr) || (err == nil && v != 42) {
					t.Errorf("tryAgain = %d, %v; want 42 or %v", v, err, tc.wantErr)
				}
				if !slices.Equal(attempts, tc.want) {
					t.Errorf("attempts given %v, want %v", attempts, tc.want)
				}
			})
		})
	}

	// Another error ends the attempts at once.
	synctest.Test(t, func(t *testing.T) {
		refused := errors.New("refused")
		n := 0
		_, err := tryAgain(t.Context(), nc, func(context.Context) (int, error) { n++; return 0, refused })
		if !errors.Is(err, refused) || n != 1 {
			t.Errorf("tryAgain with a refusal = %v after %d attempts, want it after 1", err, n)
		}
	})
}
