//go:build unix

package supervise

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"
)

// script is the command most tests run: it records its start and
// environment, leaves a grandchild in its process group, and sleeps.
const script = `echo "$TENURE_EPOCH $TENURE_LEADER" >> "$OUT/starts"
env > "$OUT/env.$TENURE_EPOCH"
echo "hello from $TENURE_EPOCH"
sleep 1000 & echo $! > "$OUT/gc.$TENURE_EPOCH"
echo $$ > "$OUT/pid.$TENURE_EPOCH"
exec sleep 1000`

const (
	grace = 300 * time.Millisecond
	slack = time.Second // scheduling allowance, generous for -race
)

// started waits for the run of epoch and returns the PIDs of the command
// and of its grandchild.
func (h *harness) started(epoch string) (pid, gc int) {
	h.t.Helper()
	return h.waitPID("pid." + epoch), h.waitPID("gc." + epoch)
}

func TestStartsOnlyWhileLeading(t *testing.T) {
	h := newHarness(t)
	h.run(Config{Command: []string{script}, Shell: true, Grace: grace})
	h.agent.waitPolls(t, 3)
	if got := h.readFile("starts"); got != "" {
		t.Fatalf("started while following: %q", got)
	}
	h.agent.lead(5, 0)
	pid, gc := h.started("5")
	env := h.readFile("env.5")
	for _, want := range []string{"\nTENURE_EPOCH=5\n", "\nTENURE_LEADER=n1\n", "\nOUT=" + h.dir + "\n"} {
		if !strings.Contains("\n"+env, want) {
			t.Errorf("environment lacks %q", strings.TrimSpace(want))
		}
	}
	eventually(t, "output", func() bool { return strings.Contains(h.out.String(), "hello from 5\n") })
	begin := time.Now()
	h.agent.follow(6)
	waitGone(t, grace+slack, pid, gc)
	t.Logf("stopped in %v", time.Since(begin))
	if got := h.readFile("starts"); got != "5 n1\n" {
		t.Errorf("starts = %q, want one for epoch 5", got)
	}
}

func TestIgnoringTERMIsKilledAfterGrace(t *testing.T) {
	h := newHarness(t)
	h.run(Config{Command: []string{"trap '' TERM\n" + script}, Shell: true, Grace: grace})
	h.agent.lead(5, 0)
	pid, gc := h.started("5")
	begin := time.Now()
	h.agent.follow(6)
	waitGone(t, grace+slack, pid, gc)
	if took := time.Since(begin); took < grace {
		t.Errorf("a group ignoring SIGTERM was gone after %v, before the grace %v", took, grace)
	}
}

func TestNewTermStartsAgain(t *testing.T) {
	h := newHarness(t)
	h.run(Config{Command: []string{script}, Shell: true, Grace: grace})
	h.agent.lead(5, 0)
	pid5, gc5 := h.started("5")
	h.agent.follow(6)
	waitGone(t, grace+slack, pid5, gc5)
	h.agent.lead(7, 0)
	pid7, gc7 := h.started("7")
	if env := h.readFile("env.7"); !strings.Contains(env, "TENURE_EPOCH=7\n") {
		t.Errorf("epoch 7's environment: %q", env)
	}
	h.agent.lead(8, 0) // a new term without a leader in between
	pid8, gc8 := h.started("8")
	if !processGone(pid7) || !processGone(gc7) {
		t.Error("epoch 8 started while epoch 7's processes ran")
	}
	if got := h.readFile("starts"); got != "5 n1\n7 n1\n8 n1\n" {
		t.Errorf("starts = %q, want epochs 5, 7, 8", got)
	}
	h.cancel()
	if r := h.wait(); r.code != 0 || r.err != nil {
		t.Errorf("Run = %d, %v after cancel; want 0, nil", r.code, r.err)
	}
	waitGone(t, 0, pid8, gc8)
}

func TestAgentGoneStopsChild(t *testing.T) {
	h := newHarness(t)
	h.run(Config{Command: []string{script}, Shell: true, Grace: grace})
	h.agent.lead(5, 0)
	pid, gc := h.started("5")
	h.srv.Close()
	waitGone(t, grace+slack, pid, gc)
	h.agent.lead(6, 0)
	serve(t, h.agent, h.socket)
	h.started("6")
}

func TestWaitsForAgent(t *testing.T) {
	h := newHarness(t)
	h.srv.Close()
	h.run(Config{Command: []string{script}, Shell: true, Grace: grace})
	h.agent.lead(3, 0)
	serve(t, h.agent, h.socket)
	h.started("3")
}

func TestLeaseBelowGraceStops(t *testing.T) {
	h := newHarness(t)
	h.agent.setLease("quorum", 0)
	h.run(Config{Command: []string{script}, Shell: true, Grace: grace})
	h.agent.lead(5, 10*time.Second)
	pid, gc := h.started("5")
	h.agent.setLease("quorum", grace/3)
	waitGone(t, grace+slack, pid, gc)
	h.remove("pid.5", "gc.5")
	h.agent.setLease("quorum", 10*time.Second) // renewed: same term again
	pid, gc = h.started("5")
	h.agent.setLease("quorum", 0) // quorum mode: 0 is expired
	waitGone(t, grace+slack, pid, gc)
	h.agent.setLease("available", 0) // available mode: 0 is no lease
	eventually(t, "third start", func() bool { return strings.Count(h.readFile("starts"), "\n") == 3 })
}

func TestLeaseDeadlineWithoutAnswers(t *testing.T) {
	h := newHarness(t)
	h.agent.setLease("quorum", 0)
	h.run(Config{Command: []string{script}, Shell: true, Grace: grace})
	const lease = 2 * grace
	h.agent.lead(5, lease)
	pid, gc := h.started("5")
	h.agent.setHang(true)
	t.Cleanup(func() { h.agent.setHang(false) })
	begin := time.Now()
	// The lease deadline less the grace comes at most lease-grace after
	// the last answer; the call timeout (1s) would come later.
	waitGone(t, lease-grace+grace+slack/2, pid, gc)
	if took := time.Since(begin); took >= minCallTimeout {
		t.Errorf("stopped after %v: by the call timeout, not the lease deadline", took)
	}
}

func TestOnceReturnsExitCode(t *testing.T) {
	for _, tc := range []struct {
		cmd  []string
		want int
	}{
		{[]string{"/bin/sh", "-c", "exit 7"}, 7},
		{[]string{"/bin/sh", "-c", "kill -TERM $$"}, 128 + 15},
		{[]string{"/bin/sh", "-c", "exit 0"}, 0},
	} {
		h := newHarness(t)
		h.run(Config{Command: tc.cmd, Once: true, Grace: grace})
		h.agent.lead(5, 0)
		if r := h.wait(); r.code != tc.want || r.err != nil {
			t.Errorf("%q: Run = %d, %v; want %d, nil", tc.cmd, r.code, r.err, tc.want)
		}
	}
}

func TestOnceCannotStart(t *testing.T) {
	h := newHarness(t)
	h.run(Config{Command: []string{h.path("no-such-command")}, Once: true, Grace: grace})
	h.agent.lead(5, 0)
	if r := h.wait(); r.code != ExitCannotStart || r.err == nil || !strings.HasPrefix(r.err.Error(), "supervise: start") {
		t.Errorf("Run = %d, %v; want %d and a start error", r.code, r.err, ExitCannotStart)
	}
}

func TestRestartsAfterExit(t *testing.T) {
	h := newHarness(t)
	h.run(Config{Shell: true, Grace: grace, RestartDelay: 20 * time.Millisecond, Command: []string{
		`sleep 1000 & echo $! >> "$OUT/gcs"; echo x >> "$OUT/runs"
		[ "$(wc -l < "$OUT/runs")" -ge 3 ] && exec sleep 1000
		exit 1`}})
	h.agent.lead(5, 0)
	eventually(t, "three runs", func() bool { return strings.Count(h.readFile("runs"), "\n") == 3 })
	for _, s := range strings.Fields(h.readFile("gcs"))[:2] {
		pid, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		waitGone(t, 0, pid) // left behind by a run that exited: stopped before the next start
	}
}

func TestCancelStopsEverything(t *testing.T) {
	h := newHarness(t)
	h.run(Config{Command: []string{"trap '' TERM\n" + script}, Shell: true, Grace: grace})
	h.agent.lead(5, 0)
	pid, gc := h.started("5")
	begin := time.Now()
	h.cancel()
	if r := h.wait(); r.code != 0 || r.err != nil {
		t.Errorf("Run = %d, %v; want 0, nil", r.code, r.err)
	}
	if took := time.Since(begin); took > grace+slack {
		t.Errorf("Run took %v to return", took)
	}
	waitGone(t, 0, pid, gc) // already gone when Run returns
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{Command: []string{""}},
		{Command: []string{"echo", "hi"}, Shell: true},
		{Command: []string{"true"}, Grace: -time.Second},
	} {
		code, err := Run(context.Background(), cfg)
		if code != 0 || err == nil || !strings.HasPrefix(err.Error(), "supervise: ") {
			t.Errorf("Run(%+v) = %d, %v; want a supervise error", cfg, code, err)
		}
	}
}
