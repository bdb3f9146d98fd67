package hooks

import (
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/rpc"
)

// TestObserveToldEachOutcome: Config.Observe hears of every finished run
// with its outcome and duration: an exit 0, a non-zero exit, and a run
// stopped at the timeout.
func TestObserveToldEachOutcome(t *testing.T) {
	var mu sync.Mutex
	got := map[string]RunOutcome{}
	done := make(chan struct{}, 3)
	h := start(t, Config{Timeout: 300 * time.Millisecond, KillGrace: time.Second,
		Observe: func(o RunOutcome) {
			mu.Lock()
			got[o.Hook] = o
			mu.Unlock()
			done <- struct{}{}
		},
		Hooks: []Hook{
			{Name: "good", Events: []string{rpc.EventBecameLeader}, Command: "true"},
			{Name: "bad", Events: []string{rpc.EventBecameLeader}, Command: "exit 3"},
			{Name: "slow", Events: []string{rpc.EventBecameLeader}, Command: "sleep 5"},
		}})
	h.r.Dispatch(event(rpc.EventBecameLeader, 1))
	for range 3 {
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("observed only %v", got)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for hook, want := range map[string]string{"good": OutcomeOK, "bad": OutcomeFailed, "slow": OutcomeTimeout} {
		o := got[hook]
		if o.Outcome != want || o.Event != rpc.EventBecameLeader || o.Duration <= 0 {
			t.Errorf("%s observed as %+v, want outcome %s", hook, o, want)
		}
	}
	if d := got["slow"].Duration; d < 300*time.Millisecond {
		t.Errorf("timed-out run took %v, less than the timeout", d)
	}
}
