package rpc

import (
	"log/slog"
	"sync"
	"time"
)

// DefaultLogInterval is how often, at most, each kind of warning about
// clients (refused connections, malformed frames) is logged.
const DefaultLogInterval = 10 * time.Second

// rateLog logs each warning message at most once per interval; the
// repeats in between are counted and reported, as "repeated", with the
// next line of that message or by flush. A client that sends garbage in a
// loop then costs a line per interval, not one per connection.
type rateLog struct {
	every time.Duration
	now   func() time.Time

	mu    sync.Mutex
	kinds map[string]*rateKind
}

// rateKind is one message's state.
type rateKind struct {
	last     time.Time
	repeated int
	log      *slog.Logger // the logger of the latest suppressed repeat
}

func newRateLog(every time.Duration) *rateLog {
	return &rateLog{every: every, now: time.Now, kinds: map[string]*rateKind{}}
}

// warn logs msg with args on l, unless msg was logged less than the
// interval ago: then it only counts it.
func (r *rateLog) warn(l *slog.Logger, msg string, args ...any) {
	r.mu.Lock()
	k := r.kinds[msg]
	if k == nil {
		k = &rateKind{}
		r.kinds[msg] = k
	}
	now := r.now()
	if !k.last.IsZero() && now.Sub(k.last) < r.every {
		k.repeated++
		k.log = l
		r.mu.Unlock()
		return
	}
	n := k.repeated
	k.last, k.repeated, k.log = now, 0, nil
	r.mu.Unlock()
	if n > 0 {
		args = append(args, "repeated", n, "in", r.every)
	}
	l.Warn(msg, args...)
}

// flush logs the count of every message's repeats not yet reported.
func (r *rateLog) flush() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for msg, k := range r.kinds {
		if k.repeated > 0 {
			k.log.Warn(msg, "repeated", k.repeated, "last_interval", r.every)
			k.repeated = 0
		}
	}
}
