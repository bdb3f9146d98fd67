package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/redisproc/redistest"
)

// startRedisLock starts `tenure lock --backend BACKEND` with the recorder.
func startRedisLock(t *testing.T, backend, node, logPath, hold string, flags ...string) *exec.Cmd {
	t.Helper()
	args := append([]string{"lock", "--backend", backend, "--grace", "300ms"}, flags...)
	args = append(args, "job", "--", "sh", "-c", lockRecorder)
	cmd := exec.Command(binary, args...)
	cmd.Env = append(slicesWithout(os.Environ(), "TENURE_TOKEN"), "LOCK_LOG="+logPath, "NODE="+node, "HOLD="+hold)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopProcess(cmd) })
	return cmd
}

// slicesWithout drops the variable name from env.
func slicesWithout(env []string, name string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, name+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// TestLockRedisBackendsNeverOverlap: `tenure lock` commands contending
// through one Redis instance, and through Redlock on five, run one at a
// time; the single instance's tokens grow, Redlock's commands get no
// TENURE_TOKEN.
func TestLockRedisBackendsNeverOverlap(t *testing.T) {
	servers := redistest.Start(t, 5)
	addrs := redistest.Addrs(servers)
	for _, backend := range []string{"redis://" + addrs[0], "redlock://" + strings.Join(addrs, ",")} {
		t.Run(strings.SplitN(backend, ":", 2)[0], func(t *testing.T) {
			logPath := filepath.Join(t.TempDir(), "lock.log")
			var wg sync.WaitGroup
			for i := range 5 {
				wg.Go(func() {
					cmd := startRedisLock(t, backend, fmt.Sprint("c", i), logPath, "0.2", "--ttl", "3s")
					if err := cmd.Wait(); err != nil {
						t.Errorf("tenure lock %d: %v", i, err)
					}
				})
			}
			wg.Wait()
			runs := readLockLog(t, logPath)
			if len(runs) != 5 {
				t.Fatalf("%d runs recorded, want 5: %+v", len(runs), runs)
			}
			for i, r := range runs {
				if i > 0 && (runs[i-1].end == 0 || r.start < runs[i-1].end) {
					t.Fatalf("runs overlap: %+v and %+v", runs[i-1], r)
				}
				if strings.HasPrefix(backend, "redlock") {
					if r.fenced {
						t.Fatalf("a Redlock command got TENURE_TOKEN=%d; Redlock has no fencing token", r.token)
					}
				} else if i > 0 && (!r.fenced || r.token <= runs[i-1].token) {
					t.Fatalf("token went from %d to %d (set: %v)", runs[i-1].token, r.token, r.fenced)
				}
			}
		})
	}
}

// TestLockRedisExitCodes: held and tried once exits 3, unreachable
// instances exit 4, --require-token refuses Redlock (2) but not the
// single instance.
func TestLockRedisExitCodes(t *testing.T) {
	servers := redistest.Start(t, 3)
	addrs := redistest.Addrs(servers)
	single := "redis://" + addrs[0]
	redlock := "redlock://" + strings.Join(addrs, ",")
	logPath := filepath.Join(t.TempDir(), "lock.log")
	startRedisLock(t, single, "holder", logPath, "20", "--ttl", "5s")
	waitFor(t, 10*time.Second, "the lock held", func() error {
		if len(readLockLog(t, logPath)) == 0 {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	if _, stderr, code := tenure(t, "lock", "--backend", single, "--timeout", "0", "job", "--", "true"); code != supervisedTimeout {
		t.Fatalf("try-once of a held Redis lock exited %d, want %d: %s", code, supervisedTimeout, stderr)
	}
	if _, stderr, code := tenure(t, "lock", "--backend", single, "--timeout", "400ms", "job", "--", "true"); code != supervisedTimeout {
		t.Fatalf("a wait for a held Redis lock exited %d, want %d: %s", code, supervisedTimeout, stderr)
	}
	if _, stderr, code := tenure(t, "lock", "--backend", single, "--require-token", "other", "--", "sh", "-c", `test -n "$TENURE_TOKEN"`); code != 0 {
		t.Fatalf("--require-token with one instance exited %d: %s", code, stderr)
	}
	_, stderr, code := tenure(t, "lock", "--backend", redlock, "--require-token", "other", "--", "true")
	if code != 2 || !strings.Contains(stderr, "no fencing token") {
		t.Fatalf("--require-token with Redlock exited %d, want 2 and why: %s", code, stderr)
	}
	servers[1].Kill()
	servers[2].Kill()
	if _, stderr, code := tenure(t, "lock", "--backend", redlock, "--timeout", "0", "other", "--", "true"); code != 4 {
		t.Fatalf("Redlock with two of three down exited %d, want 4: %s", code, stderr)
	}
	if _, stderr, code := tenure(t, "lock", "--backend", "redlock://127.0.0.1:1,127.0.0.1:2", "x", "--", "true"); code != 2 {
		t.Fatalf("Redlock on two instances exited %d, want 2: %s", code, stderr)
	}
}

// TestLockRedisLostStopsCommand: the Redis instance holding the lock
// restarts empty (a crash without persistence, or a failover to a replica
// that had not received the key); the next renewal finds the lock gone,
// and tenure lock stops its command and exits 5 — well before the TTL the
// command believed it had.
func TestLockRedisLostStopsCommand(t *testing.T) {
	s := redistest.Start(t, 1)[0]
	logPath := filepath.Join(t.TempDir(), "lock.log")
	cmd := startRedisLock(t, "redis://"+s.Addr(), "holder", logPath, "60", "--ttl", "3s")
	waitFor(t, 10*time.Second, "the lock held", func() error {
		if len(readLockLog(t, logPath)) == 0 {
			return fmt.Errorf("not yet")
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if code := exitCode(err); code != 5 {
			t.Fatalf("tenure lock exited %d after its lock vanished, want 5", code)
		}
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		t.Fatal("tenure lock kept running after its lock vanished")
	}
	runs := readLockLog(t, logPath)
	if len(runs) != 1 || runs[0].end == 0 {
		t.Fatalf("the command was not stopped: %+v", runs)
	}
	if d := time.Since(restarted); d > 3*time.Second {
		t.Fatalf("stopped %v after the restart; a renewal every TTL/3 should notice within about 1s", d)
	}
}
