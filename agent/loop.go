package agent

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/tenurehq/tenure/bully"
	"github.com/tenurehq/tenure/gossip"
	"github.com/tenurehq/tenure/leasing"
)

// The gossip tags that advertise a node's roster: its cluster ID and version.
const (
	clusterTag       = "c"
	rosterVersionTag = "rv"
	// expectTag advertises --expect, so only nodes bootstrapping together
	// count each other.
	expectTag = "x"
)

// loop is the driver goroutine: it alone touches a.core.
func (a *Agent) loop() {
	defer close(a.loopDone)
	ticker := time.NewTicker(a.cfg.TickInterval)
	defer ticker.Stop()
	a.syncMembers()
	events := a.members.Events()
	for {
		select {
		case <-a.ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				// Serf shut itself down (for example after losing a name
				// conflict): without membership the agent cannot take part.
				a.abort(errors.New("agent: gossip membership ended (was this node's name taken by another node?)"))
				return
			}
			a.counts.add("gossip." + ev.Type.String())
			a.publishMember(ev)
			a.syncMembers()
		case f := <-a.inbox:
			f()
		case <-ticker.C:
			a.core.tick(a.cfg.Clock.Now())
			a.flush()
		}
	}
}

// do runs f on the driver goroutine and waits for it, or for ctx or the
// agent to end.
func (a *Agent) do(ctx context.Context, f func()) error {
	done := make(chan struct{})
	select {
	case a.inbox <- func() { f(); close(done) }:
	case <-ctx.Done():
		return ctx.Err()
	case <-a.ctx.Done():
		return errStopped
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-a.loopDone:
		return errStopped
	}
}

// syncMembers gives the core the live members gossip knows.
func (a *Agent) syncMembers() {
	a.counts.add("sync_members")
	var views []memberView
	alive := 0
	for _, m := range a.members.Members() {
		if m.Status != gossip.StatusAlive && m.Status != gossip.StatusLeft {
			continue
		}
		rv, _ := strconv.ParseUint(m.Tags[rosterVersionTag], 10, 64)
		expect, _ := strconv.Atoi(m.Tags[expectTag])
		views = append(views, memberView{
			Member:        bully.Member{Node: bully.Node{ID: m.ID, Name: m.Name}, Eligible: m.Eligible},
			Voter:         m.Voter,
			Cluster:       m.Tags[clusterTag],
			RosterVersion: rv,
			Expect:        expect,
			Left:          m.Status == gossip.StatusLeft,
		})
		if m.Status == gossip.StatusAlive {
			alive++
		}
	}
	a.core.setMembers(a.cfg.Clock.Now(), views)
	a.mu.Lock()
	a.snap.members = alive
	a.mu.Unlock()
	a.flush()
}

// flush publishes the core's status, lets the release of an ended term go
// once its local work has stopped (stopwait.go), sends what the core
// queued, and advertises a new cluster ID. The returned group is done when
// the messages it sent are delivered or failed.
func (a *Agent) flush() *sync.WaitGroup {
	var sent sync.WaitGroup
	a.counts.add("flush")
	if err := a.core.failed; err != nil {
		a.fail(err)
		return &sent
	}
	now := a.cfg.Clock.Now()
	deadline := a.publishedDeadline()
	a.publishStatus(now)
	a.settleStop(now, deadline)
	for _, msg := range a.core.ready() {
		a.send(msg, &sent)
	}
	a.advertiseCluster()
	return &sent
}

// publishedDeadline is the lease deadline of the status last published:
// when a term ends, the deadline it had.
func (a *Agent) publishedDeadline() time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.snap.deadline
}

// advertiseCluster puts the roster's cluster ID and version into this
// node's gossip tags when they change.
func (a *Agent) advertiseCluster() {
	r := a.core.roster()
	if r.IsZero() || (r.ClusterID == a.advertised.ClusterID && r.Version == a.advertised.Version) {
		return
	}
	a.counts.add("set_tags")
	if err := a.members.SetTags(a.gossipTags(r)); err != nil {
		a.log.Warn("advertise roster", "err", err)
		return
	}
	a.advertised = r
}

// gossipTags are this node's extra gossip tags: its --expect, and its
// roster's cluster ID and version once it has one.
func (a *Agent) gossipTags(r leasing.Roster) map[string]string {
	tags := map[string]string{}
	if a.cfg.Expect > 0 {
		tags[expectTag] = strconv.Itoa(a.cfg.Expect)
	}
	if !r.IsZero() {
		tags[clusterTag], tags[rosterVersionTag] = r.ClusterID, strconv.FormatUint(r.Version, 10)
	}
	return tags
}

// fail stops the agent after an error it cannot act safely past (state
// could not be persisted, so no message may be sent and no term started).
func (a *Agent) fail(err error) {
	a.abort(fmt.Errorf("agent: cannot persist state: %w", err))
	<-a.ctx.Done()
}

// RefusedPeers counts the peer connections refused since start because
// their handshake did not prove the cluster key: another key, no key, or
// no TLS at all.
func (a *Agent) RefusedPeers() uint64 {
	if a.peerTLS == nil {
		return 0
	}
	return a.peerTLS.Failed()
}
