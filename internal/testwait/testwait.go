// Package testwait waits in tests for a condition on real processes and
// sockets, where no event can be waited on: it polls. It also waits for
// the goroutines of stopped agents to end before calling any a leak.
package testwait

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// For polls cond every 100 ms until it returns "" or d passes; then it
// fails the test with what was awaited and cond's last answer.
func For(t testing.TB, d time.Duration, what string, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		why := cond()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %s", what, d, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// LeakGrace is how long Leaks waits for goroutines to end: longer than
// memberlist's slowest probe. A probe of a member that stopped answering
// waits out its ack timer, the probe interval scaled by the local health
// score (up to eight times: 8 s with the LAN timing), and Shutdown does
// not cut that wait short. Agents stopped one after another leave those
// still running with unanswered probes, which raise the score, so the
// last agent's probe can outlive goleak's own retries (about half a
// second): 0.74 s after a test that crashed twenty members, on a loaded
// machine.
const LeakGrace = 10 * time.Second

// Leaks reports the goroutines still running (goleak.Find) once they had
// LeakGrace to end, or nil as soon as none is left.
func Leaks() error {
	deadline := time.Now().Add(LeakGrace)
	for {
		err := goleak.Find()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// VerifyTestMain runs the tests and then fails the run if any goroutine
// outlives them (Leaks), the way goleak.VerifyTestMain does with a longer
// wait.
func VerifyTestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := Leaks(); err != nil {
			fmt.Fprintf(os.Stderr, "goroutines outlived the tests: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
