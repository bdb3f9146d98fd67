package check

import (
	"strings"
	"testing"
	"time"
)

// Synthetic runs are written in milliseconds after base.
const base = int64(1_700_000_000_000_000_000)

func ms(n int) int64 { return base + int64(n)*int64(time.Millisecond) }

func start(node string, at int) JournalRecord {
	return JournalRecord{T: ms(at), Node: node, Event: JournalStart}
}

func lead(node string, epoch uint64, at, until int) JournalRecord {
	return JournalRecord{T: ms(at), Node: node, Event: JournalLead, Epoch: epoch, Until: ms(until)}
}

func extend(node string, epoch uint64, at, until int) JournalRecord {
	return JournalRecord{T: ms(at), Node: node, Event: JournalExtend, Epoch: epoch, Until: ms(until)}
}

func end(node string, epoch uint64, at int) JournalRecord {
	return JournalRecord{T: ms(at), Node: node, Event: JournalEnd, Epoch: epoch}
}

func ev(kind string, at int, nodes ...string) Event {
	return Event{T: ms(at), Kind: kind, Nodes: nodes}
}

// write is a write by node's writer (pid 1) with token epoch; ret < 0 for
// an unknown result.
func write(node string, epoch uint64, value string, invoke, ret int, result string) Op {
	o := Op{Node: node, PID: 1, Op: OpWrite, Epoch: epoch, Value: value, Invoke: ms(invoke), Result: result}
	if result != ResultUnknown {
		o.Return = ms(ret)
	}
	return o
}

// read is a read by node's writer returning (epoch, value), or absent.
func read(node string, epoch uint64, value string, invoke, ret int, result string) Op {
	o := Op{Node: node, PID: 1, Op: OpRead, Epoch: epoch, Value: value, Invoke: ms(invoke), Result: result}
	if result != ResultUnknown {
		o.Return = ms(ret)
	}
	return o
}

// newRun sorts the lists as Load does.
func newRun(journal []JournalRecord, history []Op, events []Event) *Run {
	r := &Run{Journal: journal, History: history, Events: events}
	r.sort()
	return r
}

// beliefs computes the intervals of a journal sorted as Load sorts it.
func beliefs(journal []JournalRecord, events ...Event) []Interval {
	r := newRun(journal, nil, events)
	return Beliefs(r.Journal, r.Events)
}

func wantOK(t *testing.T, v Verdict) {
	t.Helper()
	if !v.OK {
		t.Fatalf("%s failed, want it to pass:\n%s", v.Name, strings.Join(v.Details, "\n"))
	}
	if len(v.Details) != 1 {
		t.Fatalf("%s passed with %d detail lines, want a one-line summary: %q", v.Name, len(v.Details), v.Details)
	}
}

// wantFail checks that v failed with exactly n violations, each containing
// every one of substrs (all of them in the first).
func wantFail(t *testing.T, v Verdict, n int, substrs ...string) {
	t.Helper()
	if v.OK {
		t.Fatalf("%s passed (%q), want it to fail", v.Name, v.Details)
	}
	if len(v.Details) != n {
		t.Fatalf("%s has %d violations, want %d:\n%s", v.Name, len(v.Details), n, strings.Join(v.Details, "\n"))
	}
	for _, s := range substrs {
		if !strings.Contains(v.Details[0], s) {
			t.Errorf("%s violation %q does not mention %q", v.Name, v.Details[0], s)
		}
	}
}

// liveness runs I5 on r as Check does.
func liveness(r *Run, bound time.Duration) (Verdict, []time.Duration) {
	iv, end := Beliefs(r.Journal, r.Events), runEnd(r)
	return CheckLiveness(iv, r.Events, FaultSpans(iv, r.Events, end), bound, end)
}
