package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/tenurehq/tenure/internal/wire"
	"github.com/vmihailenco/msgpack/v5"
)

// watchSeq is the seq of the one request a watch connection sends.
const watchSeq = 1

// Watcher receives a watch stream. Create it with Client.Watch, or with
// Client.WatchAsRunner for a runner. Next, Stopped and Close may be called
// from different goroutines.
type Watcher struct {
	cc     *clientConn
	runner bool          // registered as a runner: Stopped may be used
	items  chan Event    // from the reader goroutine
	done   chan struct{} // closed by Close
	exited chan struct{} // closed when the reader goroutine returns
	end    error         // why the stream ended; written before items is closed
	once   sync.Once

	mu    sync.Mutex
	first *Event // the event Watch read to confirm the subscription

	writeMu sync.Mutex // serialises Stopped; guards seq
	seq     uint64     // the last seq sent
}

// Watch opens a new connection (so the Client stays usable for calls) and
// subscribes to events. It returns once the agent has sent the first event,
// which describes the current state and is the first Next returns.
func (c *Client) Watch(ctx context.Context) (*Watcher, error) {
	return c.watch(ctx, nil)
}

// WatchAsRunner is Watch for a runner: a process that runs work only while
// this node leads, and stops it within grace (from SIGTERM to SIGKILL, at
// most MaxRunnerGrace) when told to. For as long as the Watcher is open,
// when a term this node led ends, the agent releases the term's lease only
// once this runner has reported with Stopped that its work for the term is
// not running, or has closed the Watcher, or the lease has run out. A
// runner must therefore call Stopped for every term its stream said this
// node leads (a leader-changed or became-leader event naming this node),
// once the stream has said the term ended and its work for the term is
// gone, whether or not it ran any. The agent refuses a grace it will not
// wait for (longer than its lease TTL) with an error wrapping ErrInvalidArgument.
func (c *Client) WatchAsRunner(ctx context.Context, grace time.Duration) (*Watcher, error) {
	ms := grace.Milliseconds()
	if ms < 1 || grace > MaxRunnerGrace {
		return nil, fmt.Errorf("rpc: watch as runner: grace %v is not between 1ms and %v", grace, MaxRunnerGrace)
	}
	body, err := wire.Marshal(WatchRequest{Runner: &RunnerRequest{GraceMS: uint64(ms)}})
	if err != nil {
		return nil, fmt.Errorf("rpc: watch as runner: %w", err)
	}
	return c.watch(ctx, body)
}

// watch opens a watching connection with the request body (nil: a plain
// watch).
func (c *Client) watch(ctx context.Context, body msgpack.RawMessage) (*Watcher, error) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, errClientClosed
	}
	cc, err := dial(ctx, c.path, ProtocolVersion)
	if err != nil {
		return nil, err
	}
	err = cc.within(ctx, func() error { return cc.writeMsg(Request{Seq: watchSeq, Op: OpWatch, Body: body}) })
	if err == nil && cc.broken {
		err = errors.New("interrupted as ctx ended")
	}
	if err == nil {
		err = cc.nc.SetDeadline(time.Time{}) // the stream has no deadline; Next has its own ctx
	}
	if err != nil {
		cc.nc.Close()
		return nil, callError(OpWatch, err)
	}
	return startWatcher(ctx, cc, body != nil)
}

// startWatcher starts the reader goroutine and waits for the first event.
func startWatcher(ctx context.Context, cc *clientConn, runner bool) (*Watcher, error) {
	w := &Watcher{cc: cc, runner: runner, seq: watchSeq,
		items: make(chan Event), done: make(chan struct{}), exited: make(chan struct{})}
	go w.readLoop()
	ev, err := w.Next(ctx)
	if err != nil {
		w.Close()
		return nil, err
	}
	w.first = &ev
	return w, nil
}

// Next blocks until the next event, ctx's end, or the end of the stream.
// When the agent stops, the error wraps ErrShuttingDown; when the
// connection closes, it wraps io.EOF. Once the stream has ended, every call
// returns the same error. A ctx that ends leaves the stream intact.
func (w *Watcher) Next(ctx context.Context) (Event, error) {
	select {
	case <-w.done:
		return Event{}, errClientClosed
	default:
	}
	w.mu.Lock()
	first := w.first
	w.first = nil
	w.mu.Unlock()
	if first != nil {
		return *first, nil
	}
	select {
	case ev, ok := <-w.items:
		if !ok {
			return Event{}, w.end
		}
		return ev, nil
	case <-ctx.Done():
		return Event{}, fmt.Errorf("rpc: watch: %w", ctx.Err())
	}
}

// Stopped tells the agent, on a runner's Watcher, that this runner's work
// for term epoch is not running: it has stopped, or never started. The
// agent sends no answer; it has the report once the frame is written. A
// Stopped that fails (ctx ended, or the connection did) closes the
// connection, since a frame cut short would put the stream out of step:
// the stream then ends, and Next says why.
func (w *Watcher) Stopped(ctx context.Context, epoch uint64) error {
	if epoch == 0 {
		return errors.New("rpc: stopped: epoch 0 is no term")
	}
	return w.runnerFrame(ctx, OpStopped, StoppedRequest{Epoch: epoch})
}

// Running tells the agent, on a runner's Watcher, that this runner's work
// for term epoch runs in process group pgid (above 1): the group's leader
// must be a child of this process, with this process's user. Should the
// connection close while the group is registered and not reported
// stopped, or the term end without a Stopped within the runner's grace,
// the agent stops the group itself (SIGTERM, SIGKILL after the grace). A
// group the agent cannot attribute to this process is not registered; the
// agent only logs that. Like Stopped, it has no answer, and a failure
// closes the connection.
func (w *Watcher) Running(ctx context.Context, epoch uint64, pgid int) error {
	if epoch == 0 || pgid <= 1 {
		return fmt.Errorf("rpc: running: epoch %d and pgid %d: want an epoch of at least 1 and a pgid above 1", epoch, pgid)
	}
	return w.runnerFrame(ctx, OpRunning, RunningRequest{Epoch: epoch, PGID: int64(pgid)})
}

// runnerFrame writes a runner's frame with body v.
func (w *Watcher) runnerFrame(ctx context.Context, op string, v any) error {
	if !w.runner {
		return fmt.Errorf("rpc: %s: this watch did not register as a runner (use WatchAsRunner)", op)
	}
	body, err := wire.Marshal(v)
	if err != nil {
		return fmt.Errorf("rpc: %s: %w", op, err)
	}
	w.writeMu.Lock()
	defer w.writeMu.Unlock()
	w.seq++
	if err := w.write(ctx, Request{Seq: w.seq, Op: op, Body: body}); err != nil {
		w.cc.nc.Close()
		return callError(op, err)
	}
	return nil
}

// write writes one frame within ctx, leaving the reads undisturbed.
func (w *Watcher) write(ctx context.Context, req Request) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	deadline, _ := ctx.Deadline()
	_ = w.cc.nc.SetWriteDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = w.cc.nc.SetWriteDeadline(time.Unix(1, 0)) })
	defer stop()
	err := w.cc.writeMsg(req)
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// Close ends the watch and closes its connection; it waits for the
// Watcher's goroutine and is idempotent.
func (w *Watcher) Close() error {
	var err error
	w.once.Do(func() {
		close(w.done)
		err = w.cc.nc.Close()
		<-w.exited
	})
	return err
}

// readLoop reads events and hands them to Next until the stream ends.
func (w *Watcher) readLoop() {
	defer close(w.exited)
	for {
		ev, err := w.readEvent()
		if err != nil {
			w.end = err
			close(w.items)
			return
		}
		select {
		case w.items <- ev:
		case <-w.done:
			w.end = errClientClosed
			close(w.items)
			return
		}
	}
}

// readEvent reads one stream frame.
func (w *Watcher) readEvent() (Event, error) {
	var resp Response
	if err := w.cc.readMsg(&resp); err != nil {
		select {
		case <-w.done:
			return Event{}, errClientClosed
		default:
		}
		return Event{}, callError(OpWatch, err)
	}
	switch {
	case resp.Seq != watchSeq:
		return Event{}, fmt.Errorf("rpc: watch: frame seq %d, want %d", resp.Seq, watchSeq)
	case resp.Error != nil:
		return Event{}, resp.Error
	case !resp.Stream:
		return Event{}, fmt.Errorf("rpc: watch: the agent ended the stream: %w", io.EOF)
	}
	var ev Event
	if err := w.cc.dec.Unmarshal(resp.Body, &ev); err != nil { // on the reader goroutine, as readMsg
		return Event{}, fmt.Errorf("rpc: watch: bad event: %w", err)
	}
	return ev, nil
}
