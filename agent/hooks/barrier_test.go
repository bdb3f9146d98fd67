//go:build unix

package hooks

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/tenurehq/tenure/rpc"
)

// gated is a hook command that waits for the file go.<epoch> (go.member
// for member events), then records that it ran.
const gated = `gate="$OUT/go.$TENURE_EPOCH"
case "$TENURE_EVENT" in member-*) gate="$OUT/go.member" ;; esac
while [ ! -e "$gate" ]; do sleep 0.01; done
echo ran > "$OUT/done.$TENURE_EVENT.$TENURE_EPOCH"`

// TestBarrierWaitsForRunsQueuedSoFar: a barrier on the leadership events
// waits for the runs of those hooks queued before it (a became-leader run
// still going and the lost-leadership after it), not for runs queued later
// nor for hooks that want other events.
func TestBarrierWaitsForRunsQueuedSoFar(t *testing.T) {
	h := start(t, Config{Hooks: []Hook{
		{Name: "lead", Events: []string{rpc.EventBecameLeader, rpc.EventLostLeadership}, Command: gated},
		{Name: "members", Events: []string{rpc.EventMemberJoin}, Command: gated},
	}})
	h.r.Dispatch(event(rpc.EventBecameLeader, 1))
	h.r.Dispatch(event(rpc.EventLostLeadership, 1))
	h.r.Dispatch(Event{Event: rpc.EventMemberJoin, Node: "n1", NodeID: 1, Member: &MemberRef{Name: "n2", ID: 2}})
	wait := h.r.Barrier(rpc.EventBecameLeader, rpc.EventLostLeadership)
	if wait == nil {
		t.Fatal("Barrier with runs queued returned nil")
	}
	h.r.Dispatch(event(rpc.EventBecameLeader, 2)) // after the barrier: not waited for

	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait with the runs blocked = %v, want DeadlineExceeded", err)
	}
	touch(t, h.path("go.1"))
	if err := wait(context.Background()); err != nil {
		t.Fatalf("wait: %v", err)
	}
	for _, f := range []string{"done.became-leader.1", "done.lost-leadership.1"} {
		if h.readFile(f) == "" {
			t.Errorf("the barrier returned before %s", f)
		}
	}
	if h.readFile("done.member-join.0") != "" || h.readFile("done.became-leader.2") != "" {
		t.Error("a run the barrier does not cover finished: its gate was closed")
	}
	if h.r.Barrier(rpc.EventMemberFailed) != nil {
		t.Error("Barrier for an event no hook wants is not nil")
	}
	touch(t, h.path("go.2"))
	touch(t, h.path("go.member"))
	if w := h.r.Barrier(rpc.EventBecameLeader, rpc.EventMemberJoin); w != nil {
		if err := w(context.Background()); err != nil {
			t.Fatalf("wait for the rest: %v", err)
		}
	}
	if h.readFile("done.became-leader.2") == "" || h.readFile("done.member-join.0") == "" {
		t.Error("the second barrier returned before the runs it covers finished")
	}
	if h.r.Barrier(rpc.EventBecameLeader, rpc.EventMemberJoin) != nil {
		t.Error("Barrier with every run finished is not nil")
	}
}

// TestBarrierEndsWhenCloseDropsRuns: runs that Close drops or cuts short
// count as done.
func TestBarrierEndsWhenCloseDropsRuns(t *testing.T) {
	h := start(t, Config{Hooks: []Hook{{Name: "lead", Events: []string{AllEvents}, Command: gated}}})
	h.r.Dispatch(event(rpc.EventBecameLeader, 1))
	h.r.Dispatch(event(rpc.EventLostLeadership, 1))
	wait := h.r.Barrier(rpc.EventLostLeadership)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_ = h.r.Close(ctx) // cuts the runs short
	if err := wait(context.Background()); err != nil {
		t.Fatalf("wait after Close: %v", err)
	}
}

func touch(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
}
