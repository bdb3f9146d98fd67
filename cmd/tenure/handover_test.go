package main

import (
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/agent"
)

// TestDrainTransferResignThroughTheBinary: drain, transfer and resign
// --hold as an operator types them, against three agents.
func TestDrainTransferResignThroughTheBinary(t *testing.T) {
	socks := startAgents(t, 3, nil)
	waitCLI(t, "leader n3", func() bool {
		out, _, code := tenure(t, "leader", "--socket", socks[0])
		return code == 0 && strings.HasPrefix(out, "n3 ")
	})
	// Asked of n1, the transfer is forwarded to the leader n3.
	out, stderr, code := tenure(t, "transfer", "--socket", socks[0], "n1")
	if code != 0 || !strings.HasPrefix(out, "n1 leads, epoch ") {
		t.Fatalf("transfer n1: exit %d, %q %q", code, out, stderr)
	}
	for _, c := range []struct{ name, want string }{{"nosuch", "not found"}, {"", "give exactly one NODE"}} {
		args := []string{"transfer", "--socket", socks[1]}
		if c.name != "" {
			args = append(args, c.name)
		}
		if _, stderr, code := tenure(t, args...); code == 0 || !strings.Contains(stderr, c.want) {
			t.Fatalf("transfer %q: exit %d, %q; want an error saying %q", c.name, code, stderr, c.want)
		}
	}
	if out, stderr, code := tenure(t, "drain", "--socket", socks[2]); code != 0 || !strings.Contains(out, "drained") {
		t.Fatalf("drain: exit %d, %q %q", code, out, stderr)
	}
	if out, _, _ := tenure(t, "status", "--socket", socks[2]); !strings.Contains(out, "drained:") {
		t.Fatalf("status of a drained node:\n%s", out)
	}
	waitCLI(t, "n3 listed drained", func() bool {
		out, _, _ := tenure(t, "members", "--socket", socks[0])
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "n3 ") && strings.Contains(line, "drained") {
				return true
			}
		}
		return false
	})
	if _, stderr, code := tenure(t, "transfer", "--socket", socks[0], "n3"); code != 1 || !strings.Contains(stderr, "drained") {
		t.Fatalf("transfer to drained n3: exit %d, %q", code, stderr)
	}
	if _, stderr, code := tenure(t, "resign", "--hold", "-1s", "--socket", socks[0]); code != 2 || !strings.Contains(stderr, "negative") {
		t.Fatalf("resign --hold -1s: exit %d, %q", code, stderr)
	}
	if out, stderr, code := tenure(t, "resign", "--hold", "30s", "--socket", socks[0]); code != 0 || !strings.Contains(out, "resigned") {
		t.Fatalf("resign --hold 30s on the leader n1: exit %d, %q %q", code, out, stderr)
	}
	waitCLI(t, "leader n2", func() bool {
		out, _, code := tenure(t, "leader", "--socket", socks[0])
		return code == 0 && strings.HasPrefix(out, "n2 ")
	})
	if out, stderr, code := tenure(t, "drain", "--off", "--socket", socks[2]); code != 0 || !strings.Contains(out, "lifted") {
		t.Fatalf("drain --off: exit %d, %q %q", code, out, stderr)
	}
	if out, _, _ := tenure(t, "status", "--socket", socks[2]); strings.Contains(out, "drained:") {
		t.Fatalf("status after drain --off:\n%s", out)
	}
}

// TestTransferToFrozenNodeIsRefused: a transfer to a node that gossip
// lists alive but whose agent is frozen (a stopped VM) is refused at once,
// saying why, and the leader keeps its term.
func TestTransferToFrozenNodeIsRefused(t *testing.T) {
	var agents []*agent.Agent
	socks := startAgentsKeep(t, 3, &agents)
	var before string
	waitCLI(t, "leader n3", func() bool {
		out, _, code := tenure(t, "leader", "--socket", socks[0])
		before = out
		return code == 0 && strings.HasPrefix(out, "n3 ")
	})
	resume := agents[1].Freeze()
	defer resume()
	out, stderr, code := tenure(t, "transfer", "--socket", socks[0], "n2")
	if code != 1 || !strings.Contains(stderr, `"n2" did not answer the leader`) || !strings.Contains(stderr, "the leader keeps the term") {
		t.Fatalf("transfer to frozen n2: exit %d, %q %q; want exit 1 saying n2 did not answer and the leader keeps the term", code, out, stderr)
	}
	t.Logf("refused: %s", stderr)
	if after, _, _ := tenure(t, "leader", "--socket", socks[0]); after != before {
		t.Fatalf("leader after the refused transfer: %q, before %q", after, before)
	}
}

func waitCLI(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 15s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
