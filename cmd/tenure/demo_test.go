package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// demoSteps are the steps a completed demo reports, in order.
var demoSteps = []string{
	"start", "elected", "leader_write", "freeze", "lease_expired",
	"new_leader", "new_leader_write", "stale_write", "read_back", "summary",
}

// TestDemoTellsTheFencingStory runs the demo in-process with JSON output
// and checks the story it tells, and that it leaves no files behind (the
// goroutine check is TestMain's).
func TestDemoTellsTheFencingStory(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	start := time.Now()
	if err := runDemo(ctx, &out, demoOptions{Nodes: 3, LeaseTTL: 2 * time.Second, JSON: true}); err != nil {
		t.Fatalf("demo: %v\noutput:\n%s", err, out.String())
	}
	t.Logf("demo took %v", time.Since(start))
	steps := parseDemoSteps(t, out.String())
	sum, first, second := steps["summary"], epochOf(t, steps["elected"], "epoch"), epochOf(t, steps["new_leader"], "epoch")
	if f, s := epochOf(t, sum, "first_epoch"), epochOf(t, sum, "second_epoch"); f != first || s != second {
		t.Errorf("summary epochs %d, %d; steps said %d, %d", f, s, first, second)
	}
	if second <= first {
		t.Errorf("second epoch %d is not above the first, %d", second, first)
	}
	for _, key := range []string{"first_write_accepted", "new_write_accepted", "stale_write_rejected"} {
		if sum[key] != true {
			t.Errorf("summary %s = %v, want true", key, sum[key])
		}
	}
	stale := steps["stale_write"]
	if epochOf(t, stale, "token") != first || stale["status"] != float64(409) || !strings.Contains(stale["store_message"].(string), "stale fencing token") {
		t.Errorf("stale write step: %v", stale)
	}
	if epochOf(t, steps["read_back"], "token") != second {
		t.Errorf("the store kept %v, want the new leader's write", steps["read_back"])
	}
	dir, _ := steps["start"]["dir"].(string)
	if _, err := os.Stat(dir); dir == "" || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("temp dir %q still there after the demo (stat: %v)", dir, err)
	}
}

// parseDemoSteps parses the demo's JSON lines, checks that the steps came
// in order with summary last, and returns them by step name.
func parseDemoSteps(t *testing.T, out string) map[string]map[string]any {
	t.Helper()
	steps := map[string]map[string]any{}
	var names []string
	for line := range strings.Lines(out) {
		var step map[string]any
		if err := json.Unmarshal([]byte(line), &step); err != nil {
			t.Fatalf("line %q is not JSON: %v", line, err)
		}
		name, _ := step["step"].(string)
		if _, ok := step["elapsed_ms"].(float64); !ok {
			t.Errorf("step %q lacks elapsed_ms: %s", name, line)
		}
		steps[name] = step
		names = append(names, name)
	}
	if strings.Join(names, " ") != strings.Join(demoSteps, " ") {
		t.Fatalf("steps %v, want %v\noutput:\n%s", names, demoSteps, out)
	}
	return steps
}

// epochOf returns the integer field key of a step.
func epochOf(t *testing.T, step map[string]any, key string) uint64 {
	t.Helper()
	v, ok := step[key].(float64)
	if !ok || v < 1 {
		t.Fatalf("%s = %v in %v, want a positive integer", key, step[key], step)
	}
	return uint64(v)
}

// TestDemoRefusesBadOptions checks that too few nodes and an unusable lease
// TTL are refused up front with a clear message, in-process and through
// the binary (exit 2).
func TestDemoRefusesBadOptions(t *testing.T) {
	var out bytes.Buffer
	err := runDemo(context.Background(), &out, demoOptions{Nodes: 2, LeaseTTL: 2 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "--nodes 2") || !strings.Contains(err.Error(), "at least 3") || out.Len() != 0 {
		t.Fatalf("demo with 2 nodes: err %v, output %q", err, out.String())
	}
	for _, tc := range []struct{ flag, want string }{
		{"--nodes=2", "--nodes 2: the demo needs at least 3 agents"},
		{"--lease-ttl=0s", "--lease-ttl 0s"},
		{"--lease-ttl=1m", "--lease-ttl 1m0s: the demo waits out a whole lease, so keep it at most 10s"},
	} {
		stdout, stderr, code := tenure(t, "demo", tc.flag)
		if code != 2 || stdout != "" || !strings.Contains(stderr, tc.want) {
			t.Errorf("demo %s: exit %d, stdout %q, stderr %q; want exit 2 and %q", tc.flag, code, stdout, stderr, tc.want)
		}
	}
}

// TestDemoInterrupted sends SIGINT to the binary mid-demo: it must stop
// everything, remove its files and exit 130.
func TestDemoInterrupted(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "demo", "--json")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	dir := interruptAfterElection(t, cmd, bufio.NewScanner(stdout))
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 || !strings.Contains(stderr.String(), "interrupted") {
		t.Fatalf("interrupted demo: %v, stderr %q; want exit 130", err, stderr.String())
	}
	if _, err := os.Stat(dir); dir == "" || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("temp dir %q still there after the interrupted demo (stat: %v)", dir, err)
	}
}

// interruptAfterElection reads the demo's steps until the election, sends
// SIGINT, drains the rest, and returns the demo's temp dir.
func interruptAfterElection(t *testing.T, cmd *exec.Cmd, sc *bufio.Scanner) string {
	t.Helper()
	dir := ""
	for sc.Scan() {
		var step map[string]any
		if err := json.Unmarshal(sc.Bytes(), &step); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		if step["step"] == "start" {
			dir, _ = step["dir"].(string)
		}
		if step["step"] == "elected" {
			if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	for sc.Scan() {
	}
	return dir
}

// cancelOnStep is a writer that cancels a context once a JSON line of the
// given step passes through it.
type cancelOnStep struct {
	buf    bytes.Buffer
	step   string
	cancel context.CancelFunc
}

// Write records p and cancels when p is the awaited step.
func (w *cancelOnStep) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(`"step":"`+w.step+`"`)) {
		w.cancel()
	}
	return w.buf.Write(p)
}

// TestDemoCancelledWhileFrozen cancels the in-process demo while its leader
// is frozen: it must wake and stop every agent, remove its files, and
// report the interruption (TestMain then checks no goroutine is left).
func TestDemoCancelledWhileFrozen(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := &cancelOnStep{step: "freeze", cancel: cancel}
	err := runDemo(ctx, w, demoOptions{Nodes: 3, LeaseTTL: 2 * time.Second, JSON: true})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "'s lease to end") {
		t.Fatalf("cancelled demo: %v\noutput:\n%s", err, w.buf.String())
	}
	var start struct{ Dir string }
	line, _, _ := strings.Cut(w.buf.String(), "\n")
	if err := json.Unmarshal([]byte(line), &start); err != nil || start.Dir == "" {
		t.Fatalf("first line %q: %v", line, err)
	}
	if _, err := os.Stat(start.Dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("temp dir %q still there after the cancelled demo (stat: %v)", start.Dir, err)
	}
}
