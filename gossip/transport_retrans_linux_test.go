//go:build linux

package gossip

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/netns"
)

// inNetnsEnv marks a run of this test binary inside a network namespace
// of its own (runInNetns), where the test may cut its own loopback.
const inNetnsEnv = "TENURE_GOSSIP_IN_NETNS"

// runInNetns runs test name of this binary again, inside a network
// namespace made for it, and fails t if that run fails; it reports
// whether the caller is that run (then it goes on with the test body).
// The namespace's firewall is the test's own: iptables rules there cut
// nothing of the machine's. It skips t where namespaces cannot be made.
func runInNetns(t *testing.T, name string) (inside bool) {
	t.Helper()
	if os.Getenv(inNetnsEnv) != "" {
		return true
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Skip("needs iptables")
	}
	h := netns.HostsForTest(t, netns.Options{Prefix: "gt", Subnet: "10.217.0"}, 1)[0]
	cmd := h.Command(os.Args[0], "-test.run=^"+name+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), inNetnsEnv+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("inside namespace %s:\n%s", h.NS, out)
	if err != nil {
		t.Fatalf("the run inside the namespace: %v", err)
	}
	if !strings.Contains(string(out), "--- PASS: "+name) {
		t.Fatal("the run inside the namespace did not pass the test")
	}
	return false
}

// iptables adds (-A) or deletes (-D) a rule on the INPUT chain of this
// namespace.
func iptables(t *testing.T, op string, rule ...string) {
	t.Helper()
	args := append([]string{op, "INPUT"}, rule...)
	if out, err := exec.Command("iptables", args...).CombinedOutput(); err != nil {
		t.Fatalf("iptables %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// TestRetransmittedCallsAreNoSamples: CallRetried reports a call whose
// request, answer or connect a cut held (the kernel sent them again once
// it healed), and no other: their durations count the cut, not a round
// trip, and the agent leaves them out of its estimate (Karn's rule).
// Before, answers a cut had held raised the estimate of every node that
// had called across it to about a second (agent: TestCutIsNoRoundTrip).
// The cuts are iptables rules on this namespace's loopback; each heals
// 400 ms after the call.
func TestRetransmittedCallsAreNoSamples(t *testing.T) {
	if !runInNetns(t, "TestRetransmittedCallsAreNoSamples") {
		return
	}
	srv := listen(t, TransportConfig{})
	addr := srv.Addr()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	cli := listen(t, TransportConfig{})
	calls := func(n int, why string) {
		t.Helper()
		for i := range n {
			if o := <-callRetried(cli, addr); o.err != nil || o.retried {
				t.Fatalf("call %d %s: %+v, want answered and not retried", i, why, o)
			}
		}
	}
	calls(10, "with no cut")
	for _, cut := range []struct {
		what string
		rule []string
	}{
		{"the request", []string{"-p", "tcp", "--dport", port, "-j", "DROP"}},
		{"the answer", []string{"-p", "tcp", "--sport", port, "-j", "DROP"}},
	} {
		iptables(t, "-A", cut.rule...)
		o := callRetried(cli, addr)
		time.Sleep(400 * time.Millisecond)
		iptables(t, "-D", cut.rule...)
		if got := <-o; got.err != nil || !got.retried {
			t.Fatalf("a call with %s held for 400 ms: %+v, want answered and retried", cut.what, got)
		} else {
			t.Logf("a call with %s held for 400 ms: answered after %v, retried", cut.what, got.took)
		}
		calls(3, "after the heal of a cut of "+cut.what)
	}
	// A new connection whose SYN the cut held: the call waits on the
	// connect, dials afresh once it is stale, and either way its time
	// counts the cut.
	fresh := listen(t, TransportConfig{})
	syn := []string{"-p", "tcp", "--dport", port, "--syn", "-j", "DROP"}
	iptables(t, "-A", syn...)
	o := callRetried(fresh, addr)
	time.Sleep(400 * time.Millisecond)
	iptables(t, "-D", syn...)
	if got := <-o; got.err != nil || !got.retried {
		t.Fatalf("a call whose connect was held for 400 ms: %+v, want answered and retried", got)
	}
}

// retried is the outcome of one CallRetried.
type retried struct {
	retried bool
	took    time.Duration
	err     error
}

// callRetried calls addr from tr in a goroutine of its own, bounded by
// 5 s; the channel delivers the outcome.
func callRetried(tr *Transport, addr string) <-chan retried {
	out := make(chan retried, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		began := time.Now()
		_, r, err := tr.CallRetried(ctx, addr, []byte("ping"))
		out <- retried{retried: r, took: time.Since(began), err: err}
	}()
	return out
}
