package supervise

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tenurehq/tenure/rpc"
)

// observation is one piece of news from the observer.
type observation struct {
	kind   obsKind
	status rpc.Status   // obsStatus
	sentAt time.Time    // obsStatus: when the status was asked for
	event  rpc.Event    // obsEvent
	err    error        // obsDown
	watch  *rpc.Watcher // obsWatch
}

type obsKind int

const (
	obsStatus  obsKind = iota // a status answer
	obsEvent                  // a watch event
	obsDown                   // the connection failed; everything before is stale
	obsWatch                  // a new connection's runner watch; its events follow
	obsRefused                // the agent refuses this runner for good (err says why)
)

// observer keeps a connection to the agent and reports what it learns, in
// order, on out. It forwards the events it has received before it asks for
// a status, so a status it reports is never older than an event it reported
// before.
type observer struct {
	cfg Config
	out chan<- observation

	graceChecked bool // the grace was compared with the lease TTL
}

// run connects, reports, and reconnects every RetryInterval after a
// failure, until ctx ends.
func (o *observer) run(ctx context.Context) {
	for {
		err := o.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, rpc.ErrInvalidArgument) {
			o.send(ctx, observation{kind: obsRefused, err: err})
			return // retrying would be refused the same way
		}
		o.send(ctx, observation{kind: obsDown, err: err})
		t := time.NewTimer(o.cfg.RetryInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// session serves one connection until it fails; it returns why. The watch
// registers Run as a runner: the agent waits for its stopped reports (sent
// by the supervisor on the Watcher reported as obsWatch) before it releases
// the lease of a term that ended.
func (o *observer) session(ctx context.Context) error {
	dctx, cancel := context.WithTimeout(ctx, o.cfg.callTimeout())
	defer cancel()
	c, err := o.cfg.Dial(dctx, o.cfg.Socket)
	if err != nil {
		return err
	}
	defer c.Close()
	o.checkGrace(dctx, c)
	w, err := c.WatchAsRunner(dctx, o.cfg.Grace)
	if err != nil {
		return err
	}
	events, stop := pump(w)
	defer stop()
	o.send(ctx, observation{kind: obsWatch, watch: w})
	return o.serve(ctx, c, events)
}

// checkGrace warns, once, when the grace is not well under the lease left
// just before a renewal (two thirds of the TTL): the command would then be
// stopped at every renewal, or never start.
func (o *observer) checkGrace(ctx context.Context, c *rpc.Client) {
	if o.graceChecked {
		return
	}
	st, err := c.Status(ctx)
	if err != nil || st.LeaseTTLMS <= 0 {
		return
	}
	o.graceChecked = true
	ttl := time.Duration(st.LeaseTTLMS) * time.Millisecond
	if o.cfg.Grace >= ttl*2/3 {
		o.cfg.Logger.Warn("supervise: --grace is too long for the agent's lease: the command will be stopped at every renewal, or never start; keep it well under two thirds of the lease TTL",
			"grace", o.cfg.Grace, "lease_ttl", ttl)
	}
}

// serve reports events as they come and a status after each batch of
// events and every poll interval.
func (o *observer) serve(ctx context.Context, c *rpc.Client, events <-chan streamItem) error {
	t := time.NewTicker(o.cfg.pollInterval())
	defer t.Stop()
	for {
		if err := o.forward(ctx, events); err != nil {
			return err
		}
		if err := o.poll(ctx, c); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case it := <-events:
			if err := o.report(ctx, it); err != nil {
				return err
			}
		case <-t.C:
		}
	}
}

// forward reports the events already received, without waiting.
func (o *observer) forward(ctx context.Context, events <-chan streamItem) error {
	for {
		select {
		case it := <-events:
			if err := o.report(ctx, it); err != nil {
				return err
			}
		default:
			return nil
		}
	}
}

// report sends one stream item on, or returns the error that ended the
// stream.
func (o *observer) report(ctx context.Context, it streamItem) error {
	if it.err != nil {
		return fmt.Errorf("supervise: the agent's event stream ended: %w", it.err)
	}
	o.send(ctx, observation{kind: obsEvent, event: it.ev})
	return nil
}

// poll asks for the status and reports it.
func (o *observer) poll(ctx context.Context, c *rpc.Client) error {
	pctx, cancel := context.WithTimeout(ctx, o.cfg.callTimeout())
	defer cancel()
	sent := time.Now()
	st, err := c.Status(pctx)
	if err != nil {
		return fmt.Errorf("supervise: status: %w", err)
	}
	o.send(ctx, observation{kind: obsStatus, status: st, sentAt: sent})
	return nil
}

func (o *observer) send(ctx context.Context, ob observation) {
	select {
	case o.out <- ob:
	case <-ctx.Done():
	}
}

// streamItem is an event, or the error that ended the stream.
type streamItem struct {
	ev  rpc.Event
	err error
}

// pump reads w on a goroutine of its own. stop closes w and waits for the
// goroutine.
func pump(w *rpc.Watcher) (items <-chan streamItem, stop func()) {
	ch := make(chan streamItem)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			ev, err := w.Next(ctx)
			select {
			case ch <- streamItem{ev: ev, err: err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return ch, func() {
		cancel()
		w.Close()
		<-done
	}
}
