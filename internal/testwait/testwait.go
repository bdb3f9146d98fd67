// Package testwait waits in tests for a condition on real processes and
// sockets, where no event can be waited on: it polls.
package testwait

import (
	"testing"
	"time"
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
