package check

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/anishathalye/porcupine"
)

// The fenced register: the store as one key behind one fence. Its state is
// the value last accepted and its token, initially nothing with token 0. A
// write with a token at or above the state's is accepted and replaces it;
// a lower token is refused and changes nothing. The store keeps its fence
// apart from its values, but with one key and one fence the two move
// together, except when a write fails after the fence admitted it (a disk
// error, answered 500): such a run may be flagged here.

// regState is the register's state.
type regState struct {
	Token   uint64
	Value   string
	Present bool
}

// regInput is an operation's call: a write of Value with Token, or a read.
type regInput struct {
	Write bool
	Token uint64
	Value string
}

// regOutput is an operation's result: for a write ResultOK, ResultStale or
// ResultUnknown; for a read ResultOK with the token and value read, or
// ResultAbsent.
type regOutput struct {
	Result string
	Token  uint64
	Value  string
}

// registerModel is the porcupine model of the fenced register. A write of
// unknown outcome steps as if it was applied: porcupine lets it return at
// the end of the history, so "not applied" is the linearization that puts
// it last.
var registerModel = porcupine.Model{
	Init: func() any { return regState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(regState), input.(regInput), output.(regOutput)
		if !in.Write {
			return readStep(s, out), s
		}
		accept := in.Token >= s.Token
		next := s
		if accept {
			next = regState{Token: in.Token, Value: in.Value, Present: true}
		}
		switch out.Result {
		case ResultOK:
			return accept, next
		case ResultStale:
			return !accept, s
		}
		return true, next // unknown
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(regInput), output.(regOutput)
		if in.Write {
			return fmt.Sprintf("write(%d, %s) → %s", in.Token, in.Value, out.Result)
		}
		if out.Result == ResultAbsent {
			return "read() → absent"
		}
		return fmt.Sprintf("read() → (%d, %s)", out.Token, out.Value)
	},
	DescribeState: func(state any) string {
		s := state.(regState)
		if !s.Present {
			return "absent"
		}
		return fmt.Sprintf("(%d, %s)", s.Token, s.Value)
	},
}

func readStep(s regState, out regOutput) bool {
	if out.Result == ResultAbsent {
		return !s.Present
	}
	return s.Present && s.Token == out.Token && s.Value == out.Value
}

// linearization is porcupine's answer, kept for the visualization.
type linearization struct {
	result porcupine.CheckResult
	info   porcupine.LinearizationInfo
}

// DefaultCheckTimeout bounds the linearizability search when
// Options.CheckTimeout is 0.
const DefaultCheckTimeout = 2 * time.Minute

// CheckLinearizable is I4's full form: the merged history of every writer
// is linearizable against the fenced register. Reads of unknown outcome
// constrain nothing and are left out; writes of unknown outcome stay
// pending to the end of the history. A value read that no recorded write
// carries, but that a writer's value format names (a writer killed in the
// middle of a write records nothing), is added as a write of unknown
// outcome invoked after that writer's last recorded operation. A search
// that does not finish within timeout fails the check.
func CheckLinearizable(ops []Op, timeout time.Duration) Verdict {
	v, _ := checkLinearizable(ops, timeout)
	return v
}

func checkLinearizable(ops []Op, timeout time.Duration) (Verdict, linearization) {
	v := verdict{name: NameLinearizable}
	hist := porcupineHistory(ops)
	res, info := porcupine.CheckOperationsVerbose(registerModel, hist, timeout)
	switch res {
	case porcupine.Illegal:
		v.failf("the history of %d operations is not linearizable against the fenced register", len(hist))
	case porcupine.Unknown:
		v.failf("porcupine did not finish within %v: linearizability unknown, counted as a failure", timeout)
	}
	return v.done(fmt.Sprintf("%d operations, linearizable", len(hist))), linearization{res, info}
}

// writer names one writer process.
type writer struct {
	node string
	pid  int
}

// porcupineHistory turns the writers' operations into porcupine's, one
// client per writer process and one of its own for each pending write.
func porcupineHistory(ops []Op) []porcupine.Operation {
	end, lastDone := historyBounds(ops)
	ops = append(slices.Clip(ops), unrecordedWrites(ops, lastDone)...)
	clients := make(map[writer]int)
	var out []porcupine.Operation
	for _, o := range ops {
		if o.Op == OpRead && o.Result == ResultUnknown {
			continue
		}
		id, ret := -1-len(out), end // a pending write overlaps its writer's later operations
		if o.Result != ResultUnknown {
			id, ret = clientID(clients, writer{o.Node, o.PID}), o.Return
		}
		out = append(out, porcupine.Operation{
			ClientId: id, Call: o.Invoke, Return: ret, Metadata: fmt.Sprintf("%s pid %d", o.Node, o.PID),
			Input:  regInput{Write: o.Op == OpWrite, Token: o.Epoch, Value: o.Value},
			Output: regOutput{Result: o.Result, Token: o.Epoch, Value: o.Value},
		})
	}
	return renumberPending(out, len(clients))
}

// clientID returns w's client id, numbering writers as they come.
func clientID(clients map[writer]int, w writer) int {
	id, ok := clients[w]
	if !ok {
		id = len(clients)
		clients[w] = id
	}
	return id
}

// renumberPending gives pending writes client ids after the writers'.
func renumberPending(ops []porcupine.Operation, next int) []porcupine.Operation {
	for i := range ops {
		if ops[i].ClientId < 0 {
			ops[i].ClientId = next
			next++
		}
	}
	return ops
}

// historyBounds returns an instant after every operation, and per writer
// the last instant it is known to have been busy.
func historyBounds(ops []Op) (int64, map[writer]int64) {
	var end int64
	last := make(map[writer]int64)
	for _, o := range ops {
		t := max(o.Invoke, o.Return)
		end = max(end, t)
		w := writer{o.Node, o.PID}
		last[w] = max(last[w], t)
	}
	return end + 1, last
}

// valueFormat is the writer's value: <node>-e<epoch>-p<pid>-<seq>.
var valueFormat = regexp.MustCompile(`^(.+)-e([0-9]+)-p([0-9]+)-[0-9]+$`)

// unrecordedWrites returns a write of unknown outcome for every value read
// with ResultOK that no recorded write carries, when the value names its
// writer and the token read matches the epoch it names. It is invoked
// after everything its writer recorded (its writer's last operation), or
// at the first operation of the history when that writer recorded nothing.
func unrecordedWrites(ops []Op, lastDone map[writer]int64) []Op {
	written := make(map[string]bool)
	first := int64(0)
	for _, o := range ops {
		if o.Op == OpWrite {
			written[o.Value] = true
		}
		if first == 0 || o.Invoke < first {
			first = o.Invoke
		}
	}
	var out []Op
	for _, o := range ops {
		if o.Op != OpRead || o.Result != ResultOK || written[o.Value] {
			continue
		}
		w, ok := valueWriter(o.Value, o.Epoch)
		if !ok {
			continue
		}
		written[o.Value] = true
		at := first
		if t, ok := lastDone[w]; ok {
			at = t
		}
		out = append(out, Op{Node: w.node, PID: w.pid, Op: OpWrite, Epoch: o.Epoch, Value: o.Value,
			Invoke: at, Result: ResultUnknown})
	}
	return out
}

// valueWriter parses a writer's value and returns its writer, if it has
// the writer's format and names epoch.
func valueWriter(value string, epoch uint64) (writer, bool) {
	m := valueFormat.FindStringSubmatch(value)
	if m == nil {
		return writer{}, false
	}
	e, err1 := strconv.ParseUint(m[2], 10, 64)
	pid, err2 := strconv.Atoi(m[3])
	if err1 != nil || err2 != nil || e != epoch {
		return writer{}, false
	}
	return writer{m[1], pid}, true
}

// countUnrecorded returns how many writes porcupineHistory adds.
func countUnrecorded(ops []Op) int {
	_, last := historyBounds(ops)
	return len(unrecordedWrites(ops, last))
}
