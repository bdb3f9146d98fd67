package gossip

import (
	"context"
	"strings"
	"time"
)

// startJoinLoop starts joining addrs in the background.
func (m *Membership) startJoinLoop(addrs []string) {
	ctx, cancel := context.WithCancel(m.ctx)
	done := make(chan struct{})
	m.joinMu.Lock()
	m.stopJoin, m.joinDone = cancel, done
	m.joinMu.Unlock()
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer close(done)
		defer cancel()
		m.joinLoop(ctx, addrs)
	}()
}

// stopJoinLoop stops the join loop, if any, and waits for it to exit. A join
// attempt in flight finishes first; it is bounded by Timing.TCPTimeout per
// address.
func (m *Membership) stopJoinLoop() {
	m.joinMu.Lock()
	stop, done := m.stopJoin, m.joinDone
	m.joinMu.Unlock()
	if stop == nil {
		return
	}
	stop()
	<-done
}

// joinLoop tries to join addrs until one join succeeds or ctx ends, waiting
// JoinRetryInterval after the first failure and doubling the wait up to
// JoinRetryMax.
func (m *Membership) joinLoop(ctx context.Context, addrs []string) {
	list := strings.Join(addrs, ",")
	delay := m.cfg.JoinRetryInterval
	for attempt := 1; ; attempt++ {
		r, err := m.join(addrs)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			m.logger.Info("gossip: joined the cluster", "addrs", list, "exchanged", r.exchanged,
				"already_members", r.listed, "second_view", r.second, "attempt", attempt)
			return
		}
		m.logger.Warn("gossip: join failed; will retry", "addrs", list, "attempt", attempt, "retry_in", delay, "err", err)
		if !sleepCtx(ctx, delay) {
			return
		}
		delay = nextBackoff(delay, m.cfg.JoinRetryMax)
	}
}

// nextBackoff doubles d, capped at max.
func nextBackoff(d, max time.Duration) time.Duration {
	if d >= max/2 {
		return max
	}
	return 2 * d
}

// sleepCtx waits for d and reports whether ctx is still live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
