package agent

import (
	"context"
	"sync"
	"time"

	"github.com/tenurehq/tenure/bully"
	"github.com/tenurehq/tenure/gossip"
)

// loop is the driver goroutine: it alone touches a.machine.
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
				a.log.Error("gossip membership ended; stopping the agent")
				go a.Halt()
				return
			}
			a.publishMember(ev)
			a.syncMembers()
		case f := <-a.inbox:
			f()
		case <-ticker.C:
			a.machine.Tick(a.cfg.Clock.Now())
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

// syncMembers gives the machine the live members gossip knows.
func (a *Agent) syncMembers() {
	var live []bully.Member
	for _, m := range a.members.Members() {
		if m.Status == gossip.StatusAlive {
			live = append(live, bully.Member{Node: bully.Node{ID: m.ID, Name: m.Name}, Eligible: m.Eligible})
		}
	}
	a.machine.SetMembers(a.cfg.Clock.Now(), live)
	a.mu.Lock()
	a.snap.members = len(live)
	a.mu.Unlock()
	a.flush()
}

// flush carries out what the machine asks, in the order that keeps epochs
// safe: persist the highest epoch, then send, then run the lease round. The
// returned group is done when the messages it sent are delivered or failed.
func (a *Agent) flush() *sync.WaitGroup {
	var sent sync.WaitGroup
	for {
		rd := a.machine.Ready()
		if err := a.epochs.Raise(rd.Epoch); err != nil {
			a.fail(err)
			return &sent
		}
		for _, msg := range rd.Messages {
			a.send(msg, &sent)
		}
		if rd.Acquire == 0 {
			break
		}
		// Available mode: no voters to ask, the lease round succeeds at once.
		a.machine.Acquired(a.cfg.Clock.Now(), rd.Acquire)
	}
	a.publishStatus(a.machine.Status())
	return &sent
}

// fail stops the agent after an error it cannot act safely past (the epoch
// could not be persisted, so no message may be sent and no term started).
func (a *Agent) fail(err error) {
	a.log.Error("stopping: cannot persist epoch", "err", err)
	go a.Halt()
	<-a.ctx.Done()
}
