package gossip

import (
	"context"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/serf/serf"
)

// announceWindow bounds how long a node with no join list waits for its
// snapshot's re-join to list another member it can announce itself to.
const announceWindow = 10 * time.Second

// startJoinLoop starts joining addrs in the background; with no addrs, it
// announces a return instead (announceReturn).
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
		if len(addrs) == 0 {
			m.announceReturn(ctx)
			return
		}
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

// announceReturn makes, for a node with no join list, the one exchange
// through serf's Join that announces it (see join): its snapshot's re-join
// brings a returning node back without that announcement. It waits up to
// announceWindow for the re-join to list another member and exchanges
// with the first that answers.
func (m *Membership) announceReturn(ctx context.Context) {
	end := time.Now().Add(announceWindow)
	for time.Now().Before(end) {
		for _, s := range m.serf.Members() {
			if s.Name == m.cfg.Name || s.Status != serf.StatusAlive {
				continue
			}
			addr := net.JoinHostPort(s.Addr.String(), strconv.Itoa(int(s.Port)))
			if n, err := m.serf.Join([]string{addr}, true); n > 0 {
				if err != nil {
					m.logger.Warn("gossip: announcing join", "err", err)
				}
				return
			}
		}
		if !sleepCtx(ctx, m.cfg.Timing.GossipInterval) {
			return
		}
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
