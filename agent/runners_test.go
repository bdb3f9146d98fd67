package agent

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/tenurehq/tenure/rpc"
)

// TestRunnerSetOwes: a release of a term waits for the runners told of it
// until each reports it (or a later term) stopped or leaves; runners never
// told of it, or that reported it already, are not waited for.
func TestRunnerSetOwes(t *testing.T) {
	s := newRunnerSet()
	told, early, never, leaving := s.add(time.Second, rpc.Peer{}), s.add(time.Second, rpc.Peer{}),
		s.add(time.Second, rpc.Peer{}), s.add(time.Second, rpc.Peer{})
	for _, r := range []*runnerConn{told, early, leaving} {
		s.told(r, 7)
	}
	s.told(never, 5)
	s.stopped(early, 7)
	owing := s.owing(7)
	if len(owing) != 2 || !slices.Contains(owing, told) || !slices.Contains(owing, leaving) {
		t.Fatalf("owing(7) = %d runners, want told and leaving", len(owing))
	}
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := s.wait(short, 7, owing); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("wait with both owing = %v, want DeadlineExceeded", err)
	}
	done := make(chan error, 1)
	go func() { done <- s.wait(context.Background(), 7, owing) }()
	s.stopped(told, 6) // an earlier term: still owes 7
	s.remove(leaving)
	s.stopped(told, 8) // a later term covers 7
	if err := <-done; err != nil {
		t.Fatalf("wait = %v", err)
	}
	if got := s.owing(7); len(got) != 0 {
		t.Fatalf("owing(7) after the reports = %d runners", len(got))
	}
}
