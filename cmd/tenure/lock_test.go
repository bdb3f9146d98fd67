package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tenurehq/tenure/agent"
	"github.com/tenurehq/tenure/internal/testwait"
	"github.com/tenurehq/tenure/rpc"
)

// lockRecorder is a script for `tenure lock ... -- sh -c`: it appends
// "start NANOS TOKEN NODE" when the lock's command starts and "end NANOS
// TOKEN NODE" when it ends (or is stopped), to the file in $LOCK_LOG;
// TOKEN is "unset" when the command got no TENURE_TOKEN (Redlock).
const lockRecorder = `echo "start $(date +%s%N) ${TENURE_TOKEN-unset} $NODE" >> "$LOCK_LOG"
trap 'echo "end $(date +%s%N) ${TENURE_TOKEN-unset} $NODE" >> "$LOCK_LOG"; kill $! 2>/dev/null; exit 0' TERM
sleep "$HOLD" & wait
echo "end $(date +%s%N) ${TENURE_TOKEN-unset} $NODE" >> "$LOCK_LOG"`

// lockRun is one run of a lock's command, from the recorder's log.
type lockRun struct {
	node       string
	token      uint64
	fenced     bool  // the command got a TENURE_TOKEN
	start, end int64 // Unix nanoseconds; end 0 while it runs
}

func readLockLog(t *testing.T, path string) []lockRun {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// A run is one holder's command with one token: a node runs several
	// commands with different tokens, and without tokens each command
	// names a node of its own.
	byRun := map[string]*lockRun{}
	var order []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var what, token, node string
		var at int64
		if _, err := fmt.Sscan(sc.Text(), &what, &at, &token, &node); err != nil {
			t.Fatalf("bad log line %q: %v", sc.Text(), err)
		}
		k := node + " " + token
		r := byRun[k]
		if r == nil {
			r = &lockRun{node: node, fenced: token != "unset"}
			if r.fenced {
				if r.token, err = strconv.ParseUint(token, 10, 64); err != nil {
					t.Fatalf("bad token in log line %q: %v", sc.Text(), err)
				}
			}
			byRun[k] = r
			order = append(order, k)
		}
		if what == "start" {
			r.start = at
		} else {
			r.end = at
		}
	}
	var runs []lockRun
	for _, k := range order {
		runs = append(runs, *byRun[k])
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].start < runs[j].start })
	return runs
}

// checkExclusive fails if two runs overlap or a later run has a lower
// token.
func checkExclusive(t *testing.T, runs []lockRun) {
	t.Helper()
	for i := 1; i < len(runs); i++ {
		a, b := runs[i-1], runs[i]
		if a.end == 0 || b.start < a.end {
			t.Fatalf("runs overlap: %+v and %+v", a, b)
		}
		if b.token <= a.token {
			t.Fatalf("token went from %d to %d", a.token, b.token)
		}
	}
}

// startLock starts `tenure lock` against sock with the recorder as its
// command.
func startLock(t *testing.T, sock, node, name, logPath, hold string, flags ...string) *exec.Cmd {
	t.Helper()
	args := append([]string{"lock", "--socket", sock, "--grace", "500ms"}, flags...)
	args = append(args, name, "--", "sh", "-c", lockRecorder)
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), "LOCK_LOG="+logPath, "NODE="+node, "HOLD="+hold)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopProcess(cmd) })
	return cmd
}

// stopProcess stops a tenure command as an operator would (SIGTERM, which
// stops its command's process group), and kills it if it has not exited
// within five seconds.
func stopProcess(cmd *exec.Cmd) {
	if cmd.ProcessState != nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// TestLockCommandsNeverOverlap: `tenure lock` commands on two agents,
// three each at once, run one at a time with growing tokens, and each
// exits with its command's code.
func TestLockCommandsNeverOverlap(t *testing.T) {
	socks := startAgents(t, 3, nil)
	waitAgreed(t, socks)
	logPath := filepath.Join(t.TempDir(), "lock.log")
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			node := fmt.Sprintf("n%d", 1+i%2)
			cmd := startLock(t, socks[i%2], node, "migrations", logPath, "0.3")
			if err := cmd.Wait(); err != nil {
				t.Errorf("tenure lock on %s: %v", node, err)
			}
		}()
	}
	wg.Wait()
	runs := readLockLog(t, logPath)
	if len(runs) != 6 {
		t.Fatalf("%d runs recorded, want 6: %+v", len(runs), runs)
	}
	checkExclusive(t, runs)
	// A held lock, tried once, exits 3.
	holder := startLock(t, socks[0], "n1", "migrations", logPath, "5")
	waitFor(t, 20*time.Second, "the lock held", func() error {
		if len(readLockLog(t, logPath)) < 7 {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	_, stderr, code := tenure(t, "lock", "--socket", socks[1], "--timeout", "0", "migrations", "--", "true")
	if code != supervisedTimeout {
		t.Fatalf("try-once of a held lock exited %d, want %d: %s", code, supervisedTimeout, stderr)
	}
	out, _, code := tenure(t, "locks", "--socket", socks[2])
	if code != 0 || !strings.Contains(out, "migrations") || !strings.Contains(out, "n1") {
		t.Fatalf("tenure locks (exit %d):\n%s", code, out)
	}
	_ = holder.Process.Signal(syscall.SIGTERM)
	if err := holder.Wait(); exitCode(err) != 0 {
		t.Fatalf("interrupted tenure lock: %v", err)
	}
}

const supervisedTimeout = 3 // supervise.ExitLockTimeout

// waitAgreed waits until every agent names the same leader.
func waitAgreed(t *testing.T, socks []string) string {
	t.Helper()
	var leader string
	waitFor(t, 30*time.Second, "an agreed leader", func() error {
		leader = ""
		for _, s := range socks {
			st, err := statusOf(s)
			if err != nil {
				return err
			}
			if st.Leader == nil || (leader != "" && st.Leader.Node != leader) {
				return fmt.Errorf("%s sees leader %v", st.Node, st.Leader)
			}
			leader = st.Leader.Node
		}
		return nil
	})
	return leader
}

// TestLockSurvivesLeaderCrashAndMovesAfterHolderCrash: a lock held on n1
// stays with it (same token, command never stopped) when the leader's
// agent crashes; when n1's agent crashes, its command is stopped and the
// waiter on n2 gets the lock with a higher token once n1's lease ran out.
func TestLockSurvivesLeaderCrashAndMovesAfterHolderCrash(t *testing.T) {
	var agents []*agent.Agent
	socks := startAgentsKeep(t, 5, &agents) // two crashes leave a majority
	leader := waitAgreed(t, socks)
	if leader != "n5" {
		t.Fatalf("leader %s, want n5", leader)
	}
	logPath := filepath.Join(t.TempDir(), "lock.log")
	holder := startLock(t, socks[0], "n1", "db", logPath, "60", "--ttl", "6s")
	waitFor(t, 20*time.Second, "n1 holding db", func() error {
		if len(readLockLog(t, logPath)) < 1 {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	waiter := startLock(t, socks[1], "n2", "db", logPath, "60", "--ttl", "6s")
	agents[4].Halt() // the leader crashes
	time.Sleep(12 * time.Second)
	runs := readLockLog(t, logPath)
	if len(runs) != 1 || runs[0].end != 0 || runs[0].node != "n1" {
		t.Fatalf("after the leader's crash: %+v, want n1's command still running", runs)
	}
	ls := locksOf(t, socks[0])
	if len(ls) != 1 || ls[0].Holder != "n1" || ls[0].Token != runs[0].token {
		t.Fatalf("the new leader's table: %+v, want db held by n1 with token %d", ls, runs[0].token)
	}
	crash := time.Now()
	agents[0].Halt() // the holder's host crashes
	if err := holder.Wait(); exitCode(err) != 5 {
		t.Fatalf("tenure lock on a crashed agent exited %v, want 5", err)
	}
	waitFor(t, 30*time.Second, "n2 holding db", func() error {
		if runs := readLockLog(t, logPath); len(runs) < 2 {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	runs = readLockLog(t, logPath)
	checkExclusive(t, runs[:1])
	if runs[1].node != "n2" || runs[1].token <= runs[0].token || runs[1].start < runs[0].end {
		t.Fatalf("after the holder's crash: %+v", runs)
	}
	t.Logf("the waiter started %v after the holder's agent crashed", time.Duration(runs[1].start-crash.UnixNano()).Round(time.Millisecond))
	_ = waiter.Process.Signal(syscall.SIGTERM)
	_ = waiter.Wait()
}

func locksOf(t *testing.T, sock string) []rpc.LockInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := rpc.Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ls, err := cl.Locks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ls
}

// startAgentsKeep is startAgents that also hands back the agents.
func startAgentsKeep(t *testing.T, n int, out *[]*agent.Agent) []string {
	return startAgentsWith(t, n, nil, out)
}

// TestTasksSpreadOverHosts: ten tasks asked for on five hosts land on at
// least four different hosts, one holder each; `tenure run --task` runs
// its command with TENURE_TASK and TENURE_TOKEN.
func TestTasksSpreadOverHosts(t *testing.T) {
	socks := startAgents(t, 5, nil)
	waitAgreed(t, socks)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	type held struct {
		host string
		lock *rpc.Lock
	}
	got := make(chan held, 50)
	var wg sync.WaitGroup
	for h, sock := range socks {
		cl, err := rpc.Dial(ctx, sock)
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		for i := range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l, err := cl.LockWith(ctx, "report-"+strconv.Itoa(i), rpc.LockOptions{Wait: -1, Task: true})
				if err == nil {
					got <- held{fmt.Sprintf("n%d", h+1), l}
				}
			}()
		}
	}
	hosts := map[string]int{}
	tasks := map[string]string{}
	for len(tasks) < 10 {
		select {
		case h := <-got:
			if other, ok := tasks[h.lock.Name()]; ok {
				t.Fatalf("%s held by %s and %s", h.lock.Name(), other, h.host)
			}
			tasks[h.lock.Name()] = h.host
			hosts[h.host]++
		case <-ctx.Done():
			t.Fatalf("only %d tasks placed: %v", len(tasks), tasks)
		}
	}
	if len(hosts) < 4 {
		t.Fatalf("ten tasks landed on %d hosts: %v", len(hosts), tasks)
	}
	t.Logf("placement: %v", hosts)
	listing, _, code := tenure(t, "tasks", "--socket", socks[4])
	if code != 0 || strings.Count(listing, "report-") != 10 {
		t.Fatalf("tenure tasks (exit %d) does not list the ten tasks:\n%s", code, listing)
	}
	for name, host := range tasks {
		if !regexp.MustCompile(`(?m)^` + name + `\s+` + host + `\s+[0-9]+`).MatchString(listing) {
			t.Errorf("tenure tasks does not show %s on %s:\n%s", name, host, listing)
		}
	}
	cancel()
	wg.Wait()

	out := filepath.Join(t.TempDir(), "task.env")
	cmd := exec.Command(binary, "run", "--socket", socks[0], "--grace", "500ms", "--task", "nightly", "--", "sh", "-c", `echo "$TENURE_TASK $TENURE_TOKEN" > "$OUT"; sleep 60`)
	cmd.Env = append(os.Environ(), "OUT="+out)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer stopProcess(cmd)
	waitFor(t, 20*time.Second, "the task's command", func() error {
		b, err := os.ReadFile(out)
		if err != nil || !strings.HasPrefix(string(b), "nightly ") || len(strings.Fields(string(b))) != 2 {
			return fmt.Errorf("env file %q (%v)", b, err)
		}
		return nil
	})
}

// waitFor polls cond until it returns nil, failing after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() error) {
	t.Helper()
	testwait.For(t, d, what, func() string {
		if err := cond(); err != nil {
			return err.Error()
		}
		return ""
	})
}
