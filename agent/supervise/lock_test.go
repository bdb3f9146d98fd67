//go:build unix

package supervise

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeLease is a Lease the test controls: it is lost when the test calls
// lose, and records its Unlock.
type fakeLease struct {
	token    uint64
	fenced   bool
	deadline time.Time
	lost     chan struct{}
	mu       sync.Mutex
	err      error
	unlocked bool
}

func newFakeLease(token uint64, fenced bool) *fakeLease {
	return &fakeLease{token: token, fenced: fenced, deadline: time.Now().Add(time.Hour), lost: make(chan struct{})}
}

func (l *fakeLease) Name() string          { return "job" }
func (l *fakeLease) Token() (uint64, bool) { return l.token, l.fenced }
func (l *fakeLease) Deadline() time.Time   { return l.deadline }
func (l *fakeLease) Lost() <-chan struct{} { return l.lost }
func (l *fakeLease) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}
func (l *fakeLease) Unlock(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.unlocked = true
	return nil
}
func (l *fakeLease) lose(err error) {
	l.mu.Lock()
	l.err = err
	l.mu.Unlock()
	close(l.lost)
}

// fakeLocker grants its lease, or fails with err.
type fakeLocker struct {
	lease *fakeLease
	err   error
}

func (f fakeLocker) Lock(context.Context, string, LeaseOptions) (Lease, error) {
	if f.err != nil {
		return nil, f.err
	}
	return f.lease, nil
}

func lockConfig(t *testing.T, lk Locker, script string) LockConfig {
	return LockConfig{
		Config: Config{Command: []string{script}, Shell: true, Grace: 200 * time.Millisecond,
			Env: []string{"PATH=" + os.Getenv("PATH"), "TENURE_TOKEN=stale"}, Logger: testLogger(t, "lock")},
		Name: "job", Locker: lk,
	}
}

func TestRunLockedWithLockerSetsTokenOnlyWhenFenced(t *testing.T) {
	for _, fenced := range []bool{true, false} {
		t.Run(fmt.Sprint("fenced=", fenced), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "env")
			l := newFakeLease(42, fenced)
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			code, err := RunLocked(ctx, lockConfig(t, fakeLocker{lease: l}, `echo "lock=$TENURE_LOCK token=${TENURE_TOKEN-unset}" > `+out+`; exit 7`))
			if err != nil || code != 7 {
				t.Fatalf("RunLocked = %d, %v; want the command's 7", code, err)
			}
			b, _ := os.ReadFile(out)
			want := "lock=job token=42"
			if !fenced {
				want = "lock=job token=unset" // no token, and the inherited one removed
			}
			if strings.TrimSpace(string(b)) != want {
				t.Fatalf("command saw %q, want %q", b, want)
			}
			if !l.unlocked {
				t.Fatal("the lease was not released")
			}
		})
	}
}

func TestRunLockedRequireTokenRefusesLeaseWithoutToken(t *testing.T) {
	out := filepath.Join(t.TempDir(), "ran")
	l := newFakeLease(0, false)
	cfg := lockConfig(t, fakeLocker{lease: l}, "touch "+out)
	cfg.RequireToken = true
	code, err := RunLocked(context.Background(), cfg)
	if code != ExitRefused || err == nil || !strings.Contains(err.Error(), "no fencing token") {
		t.Fatalf("RunLocked = %d, %v; want ExitRefused and why", code, err)
	}
	if _, serr := os.Stat(out); serr == nil {
		t.Fatal("the command ran without the required token")
	}
	if !l.unlocked {
		t.Fatal("the refused lease was not released")
	}
}

func TestRunLockedLostLeaseStopsCommand(t *testing.T) {
	l := newFakeLease(5, true)
	dir := t.TempDir()
	started := filepath.Join(dir, "started")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	go func() {
		for ctx.Err() == nil {
			if _, err := os.Stat(started); err == nil {
				l.lose(errors.New("renewal found the lock gone"))
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	begin := time.Now()
	code, err := RunLocked(ctx, lockConfig(t, fakeLocker{lease: l}, "touch "+started+"; sleep 30"))
	if code != ExitLockLost || err == nil || !strings.Contains(err.Error(), "renewal found the lock gone") {
		t.Fatalf("RunLocked = %d, %v; want ExitLockLost and why", code, err)
	}
	if d := time.Since(begin); d > 5*time.Second {
		t.Fatalf("the command was stopped only after %v", d)
	}
}

func TestRunLockedMapsLockerErrors(t *testing.T) {
	for _, tc := range []struct {
		err  error
		code int
	}{
		{fmt.Errorf("%w: held", ErrLeaseNotGranted), ExitLockTimeout},
		{fmt.Errorf("%w: 3 of 5 down", ErrLeaseUnavailable), ExitNoQuorum},
	} {
		code, err := RunLocked(context.Background(), lockConfig(t, fakeLocker{err: tc.err}, "true"))
		if code != tc.code || !errors.Is(err, tc.err) {
			t.Errorf("Lock error %v: RunLocked = %d, %v; want %d", tc.err, code, err, tc.code)
		}
	}
	cfg := lockConfig(t, fakeLocker{lease: newFakeLease(1, true)}, "true")
	cfg.Task = true
	if code, err := RunLocked(context.Background(), cfg); code != ExitRefused || err == nil {
		t.Errorf("a task from another Locker: %d, %v; want ExitRefused", code, err)
	}
}
