package leasing

import (
	"fmt"
	"time"
)

// Timing holds a lease's durations. The relations Validate checks are what
// make I1 and I3 hold: the leader's own deadline ends before any voter's
// promise can, even when clock rates differ by up to MaxDrift.
type Timing struct {
	// TTL is how long a voter's promise lasts, from when the voter receives
	// the request, on the voter's own monotonic clock. Default 10s.
	TTL time.Duration
	// MaxDrift bounds how much two nodes' clock rates may differ, as a
	// fraction (0.01 = 1%). Default 0.01.
	MaxDrift float64
	// AcquireBudget is how long a candidate waits for a majority before it
	// gives up the round. Default TTL/10.
	AcquireBudget time.Duration
}

// DefaultTiming returns a 10s TTL with a 1% drift bound.
func DefaultTiming() Timing {
	return Timing{TTL: 10 * time.Second, MaxDrift: 0.01, AcquireBudget: time.Second}
}

// WithTTL returns t with a new TTL and the acquire budget scaled to TTL/10.
func (t Timing) WithTTL(ttl time.Duration) Timing {
	t.TTL, t.AcquireBudget = ttl, ttl/10
	return t
}

// RenewInterval is how often a leader renews: TTL/3.
func (t Timing) RenewInterval() time.Duration { return t.TTL / 3 }

// Validity is how long a lease lasts on the leader's clock after it sent the
// request: TTL × (1 − MaxDrift).
func (t Timing) Validity() time.Duration {
	return time.Duration(float64(t.TTL) * (1 - t.MaxDrift))
}

// LeaderDeadline is the instant, on the leader's clock, when a lease whose
// requests were sent at sent stops being valid.
func (t Timing) LeaderDeadline(sent time.Time) time.Time { return sent.Add(t.Validity()) }

// PromiseExpiry is the instant, on the voter's clock, when a promise made on
// receiving a request at received ends.
func (t Timing) PromiseExpiry(received time.Time) time.Time { return received.Add(t.TTL) }

// Validate reports a timing that cannot be safe or live: the drift bound
// must be in [0, 0.5), and the leader must be able to try a renewal (an
// interval plus a whole acquire budget) before its deadline, twice.
func (t Timing) Validate() error {
	switch {
	case t.TTL <= 0:
		return fmt.Errorf("leasing: lease TTL must be positive, got %v", t.TTL)
	case t.MaxDrift < 0 || t.MaxDrift >= 0.5:
		return fmt.Errorf("leasing: max drift must be in [0, 0.5), got %v", t.MaxDrift)
	case t.AcquireBudget <= 0:
		return fmt.Errorf("leasing: acquire budget must be positive, got %v", t.AcquireBudget)
	case t.RenewInterval()+2*t.AcquireBudget >= t.Validity():
		return fmt.Errorf("leasing: lease TTL %v too short: renew interval %v plus two acquire budgets of %v must fit in the validity %v (TTL less %.1f%% drift)",
			t.TTL, t.RenewInterval(), t.AcquireBudget, t.Validity(), t.MaxDrift*100)
	}
	return nil
}
