package agent

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tenurehq/tenure/agent/supervise"
	"github.com/tenurehq/tenure/internal/procgroup"
	"github.com/tenurehq/tenure/rpc"
)

// runHelperEnv makes the test binary, started as a child, run `tenure run`
// (supervise.Run) against the socket named by its value; runHelperPIDs
// names the file its command writes "CHILD GRANDCHILD" pids to.
const (
	runHelperEnv  = "TENURE_AGENT_TEST_RUN"
	runHelperPIDs = "TENURE_AGENT_TEST_PIDS"
	helperGrace   = time.Second
)

// stubbornPair ignores SIGTERM, as does its grandchild; it writes both
// PIDs to $PIDS once both run.
const stubbornPair = `trap '' TERM
( trap '' TERM; while :; do sleep 1; done ) &
echo "$$ $!" > "$PIDS.tmp" && mv "$PIDS.tmp" "$PIDS"
while :; do sleep 1; done`

// runHelper is the child's main: a supervisor that runs until killed.
func runHelper(socket string) int {
	_, err := supervise.Run(context.Background(), supervise.Config{
		Socket: socket, Command: []string{stubbornPair}, Shell: true, Grace: helperGrace,
		Env: append(os.Environ(), "PIDS="+os.Getenv(runHelperPIDs)),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// recorder passes records to next and remembers when each message of
// interest was logged, with whether group pgid still ran then.
type recorder struct {
	next slog.Handler
	mu   sync.Mutex
	seen map[string]recorded
	pgid int
}

type recorded struct {
	at           time.Time
	groupRunning bool
	attrs        string
}

func (r *recorder) Enabled(ctx context.Context, l slog.Level) bool { return true }
func (r *recorder) Handle(ctx context.Context, rec slog.Record) error {
	var b strings.Builder
	rec.Attrs(func(a slog.Attr) bool { fmt.Fprintf(&b, "%s=%v ", a.Key, a.Value); return true })
	r.mu.Lock()
	if r.seen == nil {
		r.seen = map[string]recorded{}
	}
	if _, ok := r.seen[rec.Message]; !ok {
		r.seen[rec.Message] = recorded{at: time.Now(), groupRunning: r.pgid > 0 && procgroup.Running(r.pgid), attrs: b.String()}
	}
	r.mu.Unlock()
	if r.next.Enabled(ctx, rec.Level) {
		return r.next.Handle(ctx, rec)
	}
	return nil
}
func (r *recorder) WithAttrs(as []slog.Attr) slog.Handler {
	return &attrsRecorder{r, r.next.WithAttrs(as)}
}
func (r *recorder) WithGroup(string) slog.Handler { return r }

// attrsRecorder keeps recording through loggers made With attributes.
type attrsRecorder struct {
	*recorder
	h slog.Handler
}

func (a *attrsRecorder) Handle(ctx context.Context, rec slog.Record) error {
	a.recorder.Handle(context.Background(), rec.Clone())
	return nil
}

func (r *recorder) get(msg string) (recorded, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok := r.seen[msg]
	return v, ok
}

func (r *recorder) setGroup(pgid int) {
	r.mu.Lock()
	r.pgid = pgid
	r.mu.Unlock()
}

// startRecorded starts a one-node cluster whose agent logs through a
// recorder.
func startRecorded(t *testing.T) (*testCluster, *Agent, *recorder) {
	if runtime.GOOS != "linux" {
		t.Skip("needs Linux: SO_PEERCRED, /proc and Pdeathsig")
	}
	c := newTestCluster(t)
	c.ttl = handOverTTL
	c.expect = 1
	cfg := c.config("n1", 1)
	rec := &recorder{next: cfg.Logger.Handler()}
	cfg.Logger = slog.New(rec)
	a := c.start(cfg)
	return c, a, rec
}

// TestKilledRunLeavesNoProcesses: a `tenure run` in a process of its own
// runs a command that ignores SIGTERM, with a grandchild that does too. The
// supervisor is SIGKILLed (as the OOM killer does): the child dies of its
// parent-death signal, and the agent, to which the supervisor registered
// the group, SIGKILLs the grandchild after the grace. The leader resigns
// at once: the lease is released only after the group is gone.
func TestKilledRunLeavesNoProcesses(t *testing.T) {
	c, a, rec := startRecorded(t)
	c.waitLeader("n1", 20*time.Second)
	pidFile := filepath.Join(c.dir, "pids")
	sup := exec.Command(os.Args[0], "-test.run=^$")
	sup.Env = append(os.Environ(), runHelperEnv+"="+a.SocketPath(), runHelperPIDs+"="+pidFile)
	sup.Stdout, sup.Stderr = os.Stdout, os.Stderr
	if err := sup.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sup.Process.Kill(); _ = sup.Wait() })
	child, grandchild := readPIDs(t, pidFile)
	rec.setGroup(child)
	t.Cleanup(func() { _ = procgroup.Signal(child, syscall.SIGKILL) })
	eventually(t, 10*time.Second, func() error {
		if !a.runners.hasGroup(child) {
			return fmt.Errorf("group %d not registered with the agent yet", child)
		}
		return nil
	})
	killed := time.Now()
	if err := sup.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = sup.Wait()
	if err := a.Resign(context.Background()); err != nil {
		t.Fatalf("resign: %v", err)
	}
	eventually(t, helperGrace+3*time.Second, func() error {
		if !procgroup.Gone(child) || !procgroup.Gone(grandchild) {
			return fmt.Errorf("child %d or grandchild %d still runs", child, grandchild)
		}
		return nil
	})
	gone := time.Since(killed)
	if gone > helperGrace+time.Second {
		t.Errorf("the command's group was gone %v after the kill, want within the grace %v + 1s", gone, helperGrace)
	}
	eventually(t, 5*time.Second, func() error {
		if _, ok := rec.get("local work of the ended term stopped; releasing its lease"); !ok {
			return fmt.Errorf("no release yet")
		}
		return nil
	})
	rel, _ := rec.get("local work of the ended term stopped; releasing its lease")
	if rel.groupRunning {
		t.Errorf("the lease was released while the group still ran (%s)", rel.attrs)
	}
	t.Logf("group gone %v after SIGKILL of the supervisor; release: %s", gone.Round(time.Millisecond), rel.attrs)
}

// readPIDs waits for the command to write its and its grandchild's PIDs.
func readPIDs(t *testing.T, path string) (child, grandchild int) {
	t.Helper()
	eventually(t, 15*time.Second, func() error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f := strings.Fields(string(b))
		if len(f) != 2 {
			return fmt.Errorf("pids file %q", b)
		}
		child, _ = strconv.Atoi(f[0])
		grandchild, _ = strconv.Atoi(f[1])
		return nil
	})
	return child, grandchild
}

// TestAgentRefusesForeignGroup: a runner that names a process group whose
// leader is not its child (here: a job of a shell that exited) is refused
// and the agent never signals it, even when the runner leaves; a group of
// its own child is registered, and stopped when the runner leaves.
func TestAgentRefusesForeignGroup(t *testing.T) {
	_, a, rec := startRecorded(t)
	foreign := foreignGroup(t)
	own := childGroup(t, "sleep 30")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, w := runnerWatch(ctx, t, a)
	for _, pg := range []int{foreign, own.Process.Pid} {
		if err := w.Running(ctx, 1, pg); err != nil {
			t.Fatalf("running %d: %v", pg, err)
		}
	}
	eventually(t, 5*time.Second, func() error {
		if !a.runners.hasGroup(own.Process.Pid) {
			return fmt.Errorf("own group not registered")
		}
		return nil
	})
	if r, ok := rec.get("rpc: runner's process group refused; the agent will not stop it"); !ok || !strings.Contains(r.attrs, "pgid="+strconv.Itoa(foreign)) {
		t.Fatalf("the foreign group %d was not refused (%+v)", foreign, r)
	}
	w.Close()
	eventually(t, 5*time.Second, func() error {
		if procgroup.Running(own.Process.Pid) {
			return fmt.Errorf("own group still runs after the runner left")
		}
		return nil
	})
	if !procgroup.Running(foreign) {
		t.Fatal("the agent stopped a group it could not attribute to the runner")
	}
}

// foreignGroup starts a process leading its own group whose parent is not
// this process: setsid run by a shell that exits at once.
func foreignGroup(t *testing.T) int {
	t.Helper()
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("needs setsid(1)")
	}
	out, err := exec.Command("/bin/sh", "-c", "setsid sleep 30 >/dev/null 2>&1 & echo $!").Output()
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = procgroup.Signal(pid, syscall.SIGKILL) })
	eventually(t, 5*time.Second, func() error {
		if !procgroup.Running(pid) {
			return fmt.Errorf("group %d not started yet", pid)
		}
		return nil
	})
	if err := procgroup.Attribute(pid, os.Getpid(), os.Getuid()); err == nil {
		t.Fatalf("group %d is attributable to the test; the test needs a foreign one", pid)
	}
	return pid
}

// TestTermEndStopsGroupOfSilentRunner: a runner registers its command's
// process group for the term, then says nothing when the term ends (a hung
// `tenure run`). The agent stops the group itself once the runner's grace
// and a margin have passed, SIGKILL included for a command that ignores
// SIGTERM, while the runner's connection stays open.
func TestTermEndStopsGroupOfSilentRunner(t *testing.T) {
	c, a, _ := startRecorded(t)
	epoch := c.waitLeader("n1", 10*time.Second)
	cmd := childGroup(t, `trap "" TERM; sleep 30`)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cl, w := runnerWatch(ctx, t, a)
	defer w.Close()
	if err := w.Running(ctx, epoch, cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, func() error {
		if !a.runners.hasGroup(cmd.Process.Pid) {
			return fmt.Errorf("group not registered")
		}
		return nil
	})
	resigned := time.Now()
	if err := cl.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, func() error {
		if procgroup.Running(cmd.Process.Pid) {
			return fmt.Errorf("the silent runner's group still runs")
		}
		return nil
	})
	t.Logf("group gone %v after the resign (grace 300ms)", time.Since(resigned).Round(time.Millisecond))
}

// childGroup starts script with /bin/sh as this process's child, leading a
// process group of its own, killed when the test ends.
func childGroup(t *testing.T, script string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.SysProcAttr = procgroup.Attr()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = cmd.Wait() }()
	t.Cleanup(func() { _ = procgroup.Signal(cmd.Process.Pid, syscall.SIGKILL) })
	return cmd
}

// runnerWatch connects to a's socket and registers as a runner with a
// 300 ms grace; the client is closed when the test ends.
func runnerWatch(ctx context.Context, t *testing.T, a *Agent) (*rpc.Client, *rpc.Watcher) {
	t.Helper()
	cl, err := rpc.Dial(ctx, a.SocketPath())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	w, err := cl.WatchAsRunner(ctx, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	return cl, w
}
