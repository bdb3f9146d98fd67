package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/tenurehq/tenure/internal/wire"
)

// watchSeq is the seq of the one request a watch connection sends.
const watchSeq = 1

// Watcher receives a watch stream. Create it with Client.Watch. Next and
// Close may be called from different goroutines.
type Watcher struct {
	cc     *clientConn
	items  chan Event    // from the reader goroutine
	done   chan struct{} // closed by Close
	exited chan struct{} // closed when the reader goroutine returns
	end    error         // why the stream ended; written before items is closed
	once   sync.Once

	mu    sync.Mutex
	first *Event // the event Watch read to confirm the subscription
}

// Watch opens a new connection (so the Client stays usable for calls) and
// subscribes to events. It returns once the agent has sent the first event,
// which describes the current state and is the first Next returns.
func (c *Client) Watch(ctx context.Context) (*Watcher, error) {
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
	err = cc.within(ctx, func() error { return cc.writeMsg(Request{Seq: watchSeq, Op: OpWatch}) })
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
	return startWatcher(ctx, cc)
}

// startWatcher starts the reader goroutine and waits for the first event.
func startWatcher(ctx context.Context, cc *clientConn) (*Watcher, error) {
	w := &Watcher{cc: cc, items: make(chan Event), done: make(chan struct{}), exited: make(chan struct{})}
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
	if err := wire.Unmarshal(resp.Body, &ev); err != nil {
		return Event{}, fmt.Errorf("rpc: watch: bad event: %w", err)
	}
	return ev, nil
}
