//go:build unix

package supervise

import (
	"sync/atomic"
	"testing"
	"time"
)

// nextReport waits for the fake agent's next stopped report.
func (f *fakeAgent) nextReport(t *testing.T) stoppedReport {
	t.Helper()
	select {
	case r := <-f.reports:
		return r
	case <-time.After(testTimeout):
		t.Fatal("timed out waiting for a stopped report")
	}
	return stoppedReport{}
}

// TestReportsStoppedOnceTheGroupIsGone: Run registers as a runner with its
// grace, and reports a term stopped only after the term ended and the
// command's whole process group is gone (here a SIGTERM handler takes a
// while), never while the term goes on.
func TestReportsStoppedOnceTheGroupIsGone(t *testing.T) {
	h := newHarness(t)
	var pid, gc atomic.Int64
	var aliveAtReport atomic.Bool
	h.agent.onReport = func(uint64) {
		aliveAtReport.Store(!processGone(int(pid.Load())) || !processGone(int(gc.Load())))
	}
	h.run(Config{Shell: true, Grace: time.Second, Command: []string{`trap 'sleep 0.2; exit 0' TERM
		echo "$TENURE_EPOCH $TENURE_LEADER" >> "$OUT/starts"
		sleep 1000 & echo $! > "$OUT/gc.$TENURE_EPOCH"
		echo $$ > "$OUT/pid.$TENURE_EPOCH"
		wait`}})
	h.agent.lead(5, 0)
	p, g := h.started("5")
	pid.Store(int64(p))
	gc.Store(int64(g))
	ended := time.Now()
	h.agent.follow(6)
	r := h.agent.nextReport(t)
	if r.epoch != 5 || r.at.Before(ended) {
		t.Fatalf("report %+v, want epoch 5 after the term ended at %v", r, ended)
	}
	if aliveAtReport.Load() {
		t.Fatal("the command's group still ran when Run reported the term stopped")
	}
	if took := r.at.Sub(ended); took < 200*time.Millisecond {
		t.Fatalf("reported %v after the term ended: before the SIGTERM handler (200ms) can have finished", took)
	}
	h.agent.mu.Lock()
	graces := h.agent.graces
	h.agent.mu.Unlock()
	if len(graces) != 1 || graces[0] != time.Second {
		t.Fatalf("registered graces %v, want one of 1s", graces)
	}
}

// TestReportsStoppedWithoutCommand: a term the stream said this node leads
// is reported stopped when it ends even though no command ran for it (here
// the lease had run out); terms of other leaders are not reported.
func TestReportsStoppedWithoutCommand(t *testing.T) {
	h := newHarness(t)
	h.agent.setLease("quorum", 0)
	h.run(Config{Command: []string{script}, Shell: true, Grace: grace})
	h.agent.follow(3)
	h.agent.lead(5, 0) // quorum mode: a lease of 0 has expired, so no start
	h.agent.waitPolls(t, 2)
	h.agent.follow(6)
	if r := h.agent.nextReport(t); r.epoch != 5 {
		t.Fatalf("first report for epoch %d, want 5", r.epoch)
	}
	if got := h.readFile("starts"); got != "" {
		t.Fatalf("the command started without a valid lease: %q", got)
	}
}
