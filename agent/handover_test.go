package agent

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/agent/supervise"
)

// handOverTTL is the lease TTL of the hand-over tests: long enough that a
// grace of a second sits well inside the lease left between renewals, and
// that a next leader waiting for the old promises to run out stands out.
const handOverTTL = 4 * time.Second

// politeChild is a command whose SIGTERM handlers take 300 ms: the child and
// a grandchild in its process group each record when they start and when
// their handler is done, in $LOG.
const politeChild = `rec() { echo "$1 $TENURE_EPOCH $2 $(date +%s%N)" >> "$LOG"; }
rec start child
( trap 'sleep 0.3; rec stop grandchild; exit 0' TERM; rec start grandchild; sleep 1000 & wait ) &
trap 'sleep 0.3; rec stop child; exit 0' TERM
sleep 1000 &
wait`

// stubbornChild ignores SIGTERM, and so does its grandchild: only SIGKILL,
// after the grace, stops them, so they record only their start.
const stubbornChild = `rec() { echo "$1 $TENURE_EPOCH $2 $(date +%s%N)" >> "$LOG"; }
trap '' TERM
rec start child
( rec start grandchild; while :; do sleep 1; done ) &
while :; do sleep 1; done`

// TestResignNeverOverlapsRunChildren: a `tenure run` supervisor on each of
// three real agents runs a command whose SIGTERM handlers take 300 ms. The
// leader resigns: its command has stopped before the next leader's starts
// (the release waits for the supervisor's report), and the next leader
// still starts long before the old lease could have run out.
func TestResignNeverOverlapsRunChildren(t *testing.T) {
	h := newHandOver(t, politeChild, time.Second)
	h.act("resign", func() error { return h.c.agents["n3"].Resign(context.Background()) })
	h.check()
}

// TestShutdownNeverOverlapsRunChildren: as above, for a graceful stop of
// the leader's agent, which returns once its command stopped and the
// release went out.
func TestShutdownNeverOverlapsRunChildren(t *testing.T) {
	h := newHandOver(t, politeChild, time.Second)
	h.act("shutdown", func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := h.c.agents["n3"].Shutdown(ctx)
		delete(h.c.agents, "n3")
		return err
	})
	h.check()
}

// TestResignKillsStubbornChildBeforeRelease: a command that ignores SIGTERM
// is SIGKILLed at the grace, and only then is the lease released: no
// overlap, and still no wait for the old promises.
func TestResignKillsStubbornChildBeforeRelease(t *testing.T) {
	h := newHandOver(t, stubbornChild, 500*time.Millisecond)
	h.act("resign", func() error { return h.c.agents["n3"].Resign(context.Background()) })
	h.check()
	if killed := h.stopped["n3"]; killed.Sub(h.at) < 500*time.Millisecond {
		t.Errorf("the stubborn command on n3 was gone %v after the resign, before its grace", killed.Sub(h.at))
	}
}

// handOver runs three agents with a supervisor on each, n3 leading.
type handOver struct {
	t        *testing.T
	c        *testCluster
	dir      string
	first    uint64    // n3's term
	at       time.Time // when the leader was told to go
	deadline time.Time // n3's lease deadline just before
	stopped  map[string]time.Time
	runs     *sync.WaitGroup
	cancel   context.CancelFunc
	logs     map[string]*stopLog
}

func newHandOver(t *testing.T, script string, grace time.Duration) *handOver {
	c := newTestCluster(t)
	c.ttl = handOverTTL
	c.startN(3)
	h := &handOver{t: t, c: c, dir: c.dir, runs: &sync.WaitGroup{}, logs: map[string]*stopLog{}, stopped: map[string]time.Time{}}
	h.first = c.waitLeader("n3", 20*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	t.Cleanup(h.stopRuns)
	for _, name := range []string{"n1", "n2", "n3"} {
		h.startRun(ctx, name, script, grace)
	}
	eventually(t, 10*time.Second, func() error {
		if _, ok := h.started("n3", h.first); !ok {
			return fmt.Errorf("no command of epoch %d on n3 yet", h.first)
		}
		return nil
	})
	return h
}

// startRun starts a supervisor on name, as `tenure run` does.
func (h *handOver) startRun(ctx context.Context, name, script string, grace time.Duration) {
	log := &stopLog{}
	h.logs[name] = log
	env := append(os.Environ(), "LOG="+h.logFile(name))
	h.runs.Add(1)
	go func() {
		defer h.runs.Done()
		_, err := supervise.Run(ctx, supervise.Config{
			Socket:  h.c.agents[name].SocketPath(),
			Command: []string{script},
			Shell:   true,
			Grace:   grace,
			Env:     env,
			Logger:  slog.New(log),
			Stdout:  &bytes.Buffer{},
			Stderr:  &bytes.Buffer{},
		})
		if err != nil {
			h.t.Errorf("run on %s: %v", name, err)
		}
	}()
}

func (h *handOver) logFile(name string) string { return filepath.Join(h.dir, "intervals-"+name) }

func (h *handOver) stopRuns() {
	h.cancel()
	h.runs.Wait()
}

// act makes the leader go, and waits until n2 runs the command of a later
// term and n3's command has stopped.
func (h *handOver) act(what string, f func() error) {
	st := h.c.agents["n3"].Status()
	h.deadline = time.Now().Add(time.Duration(st.LeaseRemainingMS) * time.Millisecond)
	h.at = time.Now()
	if err := f(); err != nil {
		h.t.Fatalf("%s: %v", what, err)
	}
	eventually(h.t, 10*time.Second, func() error {
		roles := map[string]bool{}
		for _, iv := range h.intervals() {
			if iv.node == "n2" && iv.epoch > h.first {
				roles[iv.role] = true
			}
		}
		if !roles["child"] || !roles["grandchild"] {
			return fmt.Errorf("no command of a later term on n2 yet, with its grandchild")
		}
		return nil
	})
	eventually(h.t, 5*time.Second, func() error {
		at, ok := h.logs["n3"].stoppedAt(h.first)
		if !ok {
			return fmt.Errorf("n3's command of epoch %d has not stopped", h.first)
		}
		h.stopped["n3"] = at
		return nil
	})
}

// check stops the supervisors and checks that no two commands on
// different hosts ran at once, and that the hand-over did not wait for the
// old lease to run out.
func (h *handOver) check() {
	h.stopRuns()
	ivs := h.intervals()
	for _, iv := range ivs {
		h.t.Logf("%s epoch %d %-10s %s", iv.node, iv.epoch, iv.role, iv.span(h.at))
	}
	for i, a := range ivs {
		for _, b := range ivs[i+1:] {
			if a.node != b.node && a.start.Before(b.end) && b.start.Before(a.end) {
				h.t.Errorf("%s's %s (epoch %d) and %s's %s (epoch %d) overlapped by %v",
					a.node, a.role, a.epoch, b.node, b.role, b.epoch, minTime(a.end, b.end).Sub(maxTime(a.start, b.start)))
			}
		}
	}
	next, ok := h.started("n2", h.first+1)
	if !ok {
		h.t.Fatal("no later command on n2")
	}
	h.t.Logf("old command gone %v after the leader was told to go; next command started %v after (%v after the old one was gone); the old lease would have ended %v after",
		h.stopped["n3"].Sub(h.at), next.Sub(h.at), next.Sub(h.stopped["n3"]), h.deadline.Sub(h.at))
	if !next.Before(h.deadline) {
		h.t.Errorf("the next command started %v after the old lease deadline: the hand-over waited for the promises", next.Sub(h.deadline))
	}
}

// started returns when the first command (child) of a term at least epoch
// started on node.
func (h *handOver) started(node string, epoch uint64) (time.Time, bool) {
	for _, iv := range h.intervals() {
		if iv.node == node && iv.epoch >= epoch && iv.role == "child" {
			return iv.start, true
		}
	}
	return time.Time{}, false
}

// interval is when one process of a command ran: from its first line to
// the end of its SIGTERM handler or, later, the moment its supervisor saw
// its whole process group gone (an upper bound on its end); open-ended
// when neither happened.
type interval struct {
	node, role string
	epoch      uint64
	start, end time.Time
}

func (iv interval) span(origin time.Time) string {
	end := "running"
	if !iv.end.Equal(forever) {
		end = iv.end.Sub(origin).String()
	}
	return fmt.Sprintf("%v .. %s (relative to the leader's going)", iv.start.Sub(origin), end)
}

var forever = time.Unix(1<<40, 0)

// intervals reads what the commands recorded and what the supervisors saw.
func (h *handOver) intervals() []interval {
	var out []interval
	for _, node := range []string{"n1", "n2", "n3"} {
		out = append(out, h.nodeIntervals(node)...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].start.Before(out[j].start) })
	return out
}

func (h *handOver) nodeIntervals(node string) []interval {
	b, _ := os.ReadFile(h.logFile(node))
	byKey := map[string]*interval{}
	var keys []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 {
			continue
		}
		epoch, _ := strconv.ParseUint(f[1], 10, 64)
		ns, _ := strconv.ParseInt(f[3], 10, 64)
		key := f[1] + " " + f[2]
		iv := byKey[key]
		if iv == nil {
			iv = &interval{node: node, role: f[2], epoch: epoch, end: forever}
			byKey[key] = iv
			keys = append(keys, key)
		}
		if f[0] == "start" {
			iv.start = time.Unix(0, ns)
		} else {
			iv.end = time.Unix(0, ns)
		}
	}
	var out []interval
	for _, k := range keys {
		iv := *byKey[k]
		if parent := byKey[strconv.FormatUint(iv.epoch, 10)+" child"]; iv.start.IsZero() && parent != nil {
			iv.start = parent.start // stopped before it could say it started
		}
		if at, ok := h.logs[node].stoppedAt(iv.epoch); ok && (iv.end.Equal(forever) || at.After(iv.end)) {
			iv.end = at
		}
		out = append(out, iv)
	}
	return out
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// stopLog is a supervisor's log handler that records when it saw the
// command of each term stopped (its whole process group gone).
type stopLog struct {
	mu      sync.Mutex
	stopped map[uint64]time.Time
}

func (l *stopLog) Enabled(context.Context, slog.Level) bool { return true }

func (l *stopLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "supervise: the command stopped" && r.Message != "supervise: the command exited by itself" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "epoch" {
			l.mu.Lock()
			if l.stopped == nil {
				l.stopped = map[uint64]time.Time{}
			}
			l.stopped[a.Value.Uint64()] = r.Time
			l.mu.Unlock()
		}
		return true
	})
	return nil
}

func (l *stopLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *stopLog) WithGroup(string) slog.Handler      { return l }

// stoppedAt returns when the supervisor saw the command of epoch stopped.
func (l *stopLog) stoppedAt(epoch uint64) (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	at, ok := l.stopped[epoch]
	return at, ok
}
