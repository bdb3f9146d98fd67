package check

import (
	"fmt"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

const testTimeout = 10 * time.Second

func TestLinearizablePass(t *testing.T) {
	wantOK(t, CheckLinearizable([]Op{
		read("h1", 0, "", 0, 1, ResultAbsent),
		write("h1", 1, "h1-e1-p1-1", 2, 3, ResultOK),
		read("h1", 1, "h1-e1-p1-1", 4, 5, ResultOK),
		write("h1", 1, "h1-e1-p1-2", 6, 0, ResultUnknown), // never seen: not applied
		read("h1", 1, "h1-e1-p1-1", 7, 8, ResultOK),
		read("h1", 1, "", 9, 0, ResultUnknown),
		write("h2", 3, "h2-e3-p1-1", 10, 0, ResultUnknown), // applied: read below
		write("h1", 1, "h1-e1-p1-3", 20, 21, ResultStale),
		read("h1", 3, "h2-e3-p1-1", 22, 23, ResultOK),
		write("h3", 4, "h3-e4-p1-1", 30, 40, ResultOK),
		read("h2", 3, "h2-e3-p1-1", 31, 32, ResultOK), // concurrent with the write: may see the old value
		read("h2", 4, "h3-e4-p1-1", 33, 34, ResultOK),
	}, testTimeout))
}

// A read returns an older value after a newer write was accepted.
func TestLinearizableFlagsStaleRead(t *testing.T) {
	v := CheckLinearizable([]Op{
		write("h1", 1, "h1-e1-p1-1", 0, 1, ResultOK),
		write("h2", 2, "h2-e2-p1-1", 2, 3, ResultOK),
		read("h1", 1, "h1-e1-p1-1", 4, 5, ResultOK),
	}, testTimeout)
	wantFail(t, v, 1, "not linearizable")
}

func TestLinearizableFlagsStaleWriteAccepted(t *testing.T) {
	v := CheckLinearizable([]Op{
		write("h2", 2, "h2-e2-p1-1", 0, 1, ResultOK),
		write("h1", 1, "h1-e1-p1-1", 2, 3, ResultOK),
	}, testTimeout)
	wantFail(t, v, 1, "not linearizable")
}

// A write refused although nothing higher was accepted is flagged too.
func TestLinearizableFlagsWrongRefusal(t *testing.T) {
	v := CheckLinearizable([]Op{
		write("h1", 1, "h1-e1-p1-1", 0, 1, ResultOK),
		write("h2", 2, "h2-e2-p1-1", 2, 3, ResultStale),
	}, testTimeout)
	wantFail(t, v, 1, "not linearizable")
}

// A writer killed in the middle of a write records nothing, but the store
// may have applied it: a read of that value is not a violation, as long as
// the writer could have sent it.
func TestLinearizableUnrecordedWrite(t *testing.T) {
	ops := []Op{
		write("h1", 1, "h1-e1-p1-1", 0, 1, ResultOK),
		read("h1", 1, "h1-e1-p1-1", 2, 3, ResultOK),
		// h1's pid 1 sent h1-e1-p1-2 at about 4 and was killed.
		read("h2", 1, "h1-e1-p1-2", 10, 11, ResultOK),
	}
	wantOK(t, CheckLinearizable(ops, testTimeout))
	if n := countUnrecorded(ops); n != 1 {
		t.Fatalf("%d unrecorded writes, want 1", n)
	}
	// A value no writer could have sent, or one read before its writer was
	// done with its recorded operations, is still a violation.
	for _, bad := range []Op{
		read("h2", 1, "garbage", 10, 11, ResultOK),
		read("h2", 2, "h1-e1-p1-2", 10, 11, ResultOK), // token does not match the value's epoch
		read("h2", 1, "h1-e1-p1-2", 1, 2, ResultOK),   // returned before pid 1's read ended
	} {
		v := CheckLinearizable(append(ops[:2:2], bad), testTimeout)
		wantFail(t, v, 1, "not linearizable")
	}
}

// A search that times out fails the check: Unknown is never a pass.
func TestLinearizableTimeoutFails(t *testing.T) {
	// n concurrent writes, then a read of a value none of them wrote:
	// porcupine must try every order of the writes before it gives up.
	const n = 24
	var ops []Op
	for i := range n {
		ops = append(ops, write(fmt.Sprintf("h%d", i), 1, fmt.Sprintf("v%d", i), 0, 100, ResultOK))
	}
	ops = append(ops, read("r", 1, "never-written", 200, 201, ResultOK))
	v, lin := checkLinearizable(ops, time.Millisecond)
	if lin.result != porcupine.Unknown {
		t.Fatalf("porcupine answered %s within 1ms, want Unknown (make the history harder)", lin.result)
	}
	wantFail(t, v, 1, "did not finish within 1ms", "counted as a failure")
}

func TestModelSteps(t *testing.T) {
	w := func(tok uint64, v string) regInput { return regInput{Write: true, Token: tok, Value: v} }
	s5 := regState{Token: 5, Value: "x", Present: true}
	for _, c := range []struct {
		state regState
		in    regInput
		out   regOutput
		ok    bool
		next  regState
	}{
		{regState{}, regInput{}, regOutput{Result: ResultAbsent}, true, regState{}},
		{regState{}, regInput{}, regOutput{Result: ResultOK}, false, regState{}},
		{s5, regInput{}, regOutput{Result: ResultOK, Token: 5, Value: "x"}, true, s5},
		{s5, regInput{}, regOutput{Result: ResultOK, Token: 5, Value: "y"}, false, s5},
		{s5, w(5, "y"), regOutput{Result: ResultOK}, true, regState{5, "y", true}},
		{s5, w(4, "y"), regOutput{Result: ResultOK}, false, s5},
		{s5, w(4, "y"), regOutput{Result: ResultStale}, true, s5},
		{s5, w(6, "y"), regOutput{Result: ResultStale}, false, s5},
		{s5, w(6, "y"), regOutput{Result: ResultUnknown}, true, regState{6, "y", true}},
		{s5, w(4, "y"), regOutput{Result: ResultUnknown}, true, s5},
	} {
		ok, next := registerModel.Step(c.state, c.in, c.out)
		if ok != c.ok || (ok && next != c.next) {
			t.Errorf("step %+v %+v → %+v: got %v %+v, want %v %+v", c.state, c.in, c.out, ok, next, c.ok, c.next)
		}
	}
}
