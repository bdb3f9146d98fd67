package agent

import (
	"context"
	"log/slog"
	"strings"
	"sync"

	"github.com/tenurehq/tenure/gossip"
)

// tagPublisher applies this node's gossip tags (eligibility and the extra
// tags: roster, --expect, --zone, drained) off the driver goroutine.
// serf's SetTags updates the local member at once but then waits until
// memberlist has sent the update, up to its broadcast timeout (5 s); on a
// loaded host the wait runs out, and a driver that waited, and retried on
// every tick, stopped answering peers for 5 s at a time: in a run of 100
// agents on one host, every node ended up cut off from the voters. Only
// the latest tags matter, so a newer set replaces one not yet applied.
type tagPublisher struct {
	members *gossip.Membership
	log     *slog.Logger

	mu      sync.Mutex
	pending *tagSet
	wake    chan struct{} // capacity 1
}

// tagSet is what a node advertises besides its identity.
type tagSet struct {
	eligible bool
	extra    map[string]string
}

func newTagPublisher(m *gossip.Membership, log *slog.Logger) *tagPublisher {
	return &tagPublisher{members: m, log: log, wake: make(chan struct{}, 1)}
}

// publish asks for ts to be advertised; it never blocks.
func (p *tagPublisher) publish(ts tagSet) {
	p.mu.Lock()
	p.pending = &ts
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// run applies the tags asked for until ctx ends.
func (p *tagPublisher) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.wake:
		}
		p.mu.Lock()
		ts := p.pending
		p.pending = nil
		p.mu.Unlock()
		if ts == nil {
			continue
		}
		err := p.members.SetEligible(ts.eligible, ts.extra)
		switch {
		case err == nil:
		case strings.Contains(err.Error(), "timeout waiting for update broadcast"):
			// The local member has the new tags and memberlist has queued
			// their broadcast; it only has not gone out yet.
			p.log.Debug("gossip tags set; their broadcast is still queued", "err", err)
		case ctx.Err() != nil:
			return
		default:
			p.log.Warn("advertise gossip tags", "err", err)
		}
	}
}
