//go:build nemesis

package nemesis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	nfqueue "github.com/florianl/go-nfqueue/v2"
	"github.com/mdlayher/netlink"

	"github.com/tenurehq/tenure/internal/netns"
)

// delayQueue is the netfilter queue that delay rules (Rule.Delay) send
// packets to, in every node's namespace: queues are per namespace.
const delayQueue = 1

// queueFile is where the kernel lists the netfilter queues when it can
// make them (nfnetlink_queue, built in or loaded).
const queueFile = "/proc/net/netfilter/nfnetlink_queue"

// DelayAvailable reports why delay faults cannot be injected here (the
// kernel has no netfilter queues), or nil.
func DelayAvailable() error {
	if _, err := os.Stat(queueFile); err != nil {
		return fmt.Errorf("nemesis: delay faults need the kernel's netfilter queues (nfnetlink_queue): %w", err)
	}
	return nil
}

// delayer holds the packets that delay rules queue, each for a time drawn
// uniformly between half and one and a half times the fault's delay, then
// lets it through: packets sent close together arrive in another order
// when their draws cross, as on a path whose delay varies. The packets
// keep their addresses and ports, and the agents see nothing in between
// but time. It binds one queue in each node's namespace, when a delay
// fault first needs it; with no one bound, a rule lets packets pass
// (--queue-bypass), so a delayer that stops holds nothing back. Safe for
// concurrent use.
//
// Every change of the rules first lets through what is held (release):
// a fault's packets are not held past its end. (The kernel drops what a
// queue holds when the chain that queued it is made anew, so setRules
// keeps the chain and replaces its rules.)
type delayer struct {
	log  *slog.Logger
	mean atomic.Int64 // nanoseconds; 0 lets packets through at once
	held atomic.Int64 // packets held since the last set
	lost atomic.Int64 // verdicts the kernel refused since the last set: packets it had dropped

	mu      sync.Mutex
	queues  map[string]*nfqueue.Nfqueue // by namespace
	pending map[*heldPacket]struct{}
	ctx     context.Context // ends the queues' readers
	cancel  context.CancelFunc
	closed  bool
}

// heldPacket is a packet a queue holds, until its timer or a release.
type heldPacket struct {
	q     *nfqueue.Nfqueue
	id    uint32
	timer *time.Timer
}

func newDelayer(log *slog.Logger) *delayer {
	ctx, cancel := context.WithCancel(context.Background())
	return &delayer{log: log, queues: map[string]*nfqueue.Nfqueue{}, pending: map[*heldPacket]struct{}{}, ctx: ctx, cancel: cancel}
}

// set makes d the delay of every packet queued from now on, and returns
// how many packets were held since the last set and how many of those
// the kernel dropped before their time.
func (dl *delayer) set(d time.Duration) (held, lost int64) {
	dl.mean.Store(int64(d))
	return dl.held.Swap(0), dl.lost.Swap(0)
}

// draw is the time one packet is held.
func (dl *delayer) draw() time.Duration {
	mean := dl.mean.Load()
	if mean <= 0 {
		return 0
	}
	return time.Duration(mean/2 + rand.Int64N(mean+1))
}

// bind binds the delay queue in each host's namespace that has none yet.
func (dl *delayer) bind(hosts ...netns.Host) error {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	if dl.closed {
		return errors.New("nemesis: delayer: closed")
	}
	for _, h := range hosts {
		if dl.queues[h.NS] != nil {
			continue
		}
		q, err := openQueue(h.NS)
		if err != nil {
			return fmt.Errorf("nemesis: delay queue on %s: %w", h.Label, err)
		}
		err = q.RegisterWithErrorFunc(dl.ctx, func(a nfqueue.Attribute) int {
			dl.hold(q, a)
			return 0
		}, func(err error) int {
			switch {
			case dl.ctx.Err() != nil:
			case errors.Is(err, syscall.ENOENT): // the answer to a verdict for a packet the kernel dropped
				dl.lost.Add(1)
			default:
				dl.log.Warn("delay queue: read failed; its reader goes on", "host", h.Label, "err", err)
			}
			return 0
		})
		if err != nil {
			q.Close()
			return fmt.Errorf("nemesis: delay queue on %s: register: %w", h.Label, err)
		}
		dl.queues[h.NS] = q
	}
	return nil
}

// openQueue binds the delay queue in the namespace ns: only the packets'
// metadata is copied up (the verdict needs the packet's ID alone), and a
// full queue lets packets through rather than drop them.
func openQueue(ns string) (*nfqueue.Nfqueue, error) {
	f, err := os.Open(filepath.Join("/run/netns", ns))
	if err != nil {
		return nil, err
	}
	defer f.Close() // the socket stays in the namespace it was made in
	q, err := nfqueue.Open(&nfqueue.Config{
		NetNS:        int(f.Fd()),
		NfQueue:      delayQueue,
		MaxQueueLen:  8192,
		Copymode:     nfqueue.NfQnlCopyMeta,
		Flags:        nfqueue.NfQaCfgFlagFailOpen,
		WriteTimeout: time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	if err := q.SetOption(netlink.NoENOBUFS, true); err != nil {
		q.Close()
		return nil, fmt.Errorf("set NoENOBUFS: %w", err)
	}
	return q, nil
}

// hold lets the packet a through q once its drawn delay has passed.
func (dl *delayer) hold(q *nfqueue.Nfqueue, a nfqueue.Attribute) {
	if a.PacketID == nil {
		return
	}
	p := &heldPacket{q: q, id: *a.PacketID}
	dl.held.Add(1)
	dl.mu.Lock()
	defer dl.mu.Unlock()
	dl.pending[p] = struct{}{}
	p.timer = time.AfterFunc(dl.draw(), func() {
		dl.mu.Lock()
		defer dl.mu.Unlock()
		if _, ok := dl.pending[p]; ok {
			dl.pass(p)
		}
	})
}

// release lets every held packet through now, before the rules change.
func (dl *delayer) release() {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	for p := range dl.pending {
		p.timer.Stop()
		dl.pass(p)
	}
}

// pass lets p through and forgets it. dl.mu is held.
func (dl *delayer) pass(p *heldPacket) {
	delete(dl.pending, p)
	if err := p.q.SetVerdict(p.id, nfqueue.NfAccept); err != nil && dl.ctx.Err() == nil {
		dl.log.Warn("delay queue: verdict failed; the kernel keeps the packet until the queue closes", "err", err)
	}
}

// close unbinds every queue: packets still held are dropped, and the
// rules, if any are left, let packets pass.
func (dl *delayer) close() error {
	dl.mu.Lock()
	defer dl.mu.Unlock()
	if dl.closed {
		return nil
	}
	dl.closed = true
	dl.cancel()
	var errs []error
	for ns, q := range dl.queues {
		if err := q.Close(); err != nil {
			errs = append(errs, fmt.Errorf("nemesis: close the delay queue of %s: %w", ns, err))
		}
	}
	return errors.Join(errs...)
}
