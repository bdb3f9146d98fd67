package gossip

import (
	"context"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// RefusalLogInterval is how often the peer transport and the gossip port
// log the connections and packets they refused: the first refusal at once,
// then at most one line per interval with the count of each reason, however
// many an attacker causes.
const RefusalLogInterval = 30 * time.Second

// maxRefusalDetail bounds the text of an error quoted in a refusal line.
const maxRefusalDetail = 200

// refusalLog counts refusals and logs them at most once per interval. Its
// methods are safe for concurrent use.
type refusalLog struct {
	logger   *slog.Logger
	level    slog.Level
	msg      string
	interval time.Duration
	total    atomic.Uint64

	mu      sync.Mutex
	counts  map[string]int // by reason, since the last line
	last    []any          // attributes of the latest refusal
	timer   *time.Timer    // runs while an interval is open
	stopped bool
}

func newRefusalLog(logger *slog.Logger, level slog.Level, msg string) *refusalLog {
	return &refusalLog{logger: logger, level: level, msg: msg, interval: RefusalLogInterval, counts: map[string]int{}}
}

// Total returns how many refusals were noted.
func (r *refusalLog) Total() uint64 {
	return r.total.Load()
}

// note counts one refusal for reason, from remote; err, if not nil, is
// logged (cut) as the latest error.
func (r *refusalLog) note(reason, remote string, err error) {
	r.total.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	r.counts[reason]++
	r.last = []any{"last_remote", remote, "last_reason", reason}
	if err != nil {
		r.last = append(r.last, "last_error", cutForeign(err.Error(), maxRefusalDetail))
	}
	if r.timer == nil {
		r.flushLocked()
		r.timer = time.AfterFunc(r.interval, r.tick)
	}
}

// tick ends an interval: it logs what was refused during it, if anything,
// and opens the next, or lets the next refusal be logged at once.
func (r *refusalLog) tick() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	if len(r.counts) == 0 {
		r.timer = nil
		return
	}
	r.flushLocked()
	r.timer.Reset(r.interval)
}

func (r *refusalLog) flushLocked() {
	n := 0
	attrs := []any{}
	for _, reason := range slices.Sorted(maps.Keys(r.counts)) {
		n += r.counts[reason]
		attrs = append(attrs, reason, r.counts[reason])
	}
	attrs = append([]any{"count", n, "total", r.total.Load(), "interval", r.interval}, attrs...)
	r.logger.Log(context.Background(), r.level, r.msg, append(attrs, r.last...)...)
	clear(r.counts)
}

// stop logs the refusals of the interval not yet logged, if any, and ends
// logging; later refusals are only counted.
func (r *refusalLog) stop() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped {
		return
	}
	if len(r.counts) > 0 {
		r.flushLocked()
	}
	r.stopped = true
	if r.timer != nil {
		r.timer.Stop()
	}
}
