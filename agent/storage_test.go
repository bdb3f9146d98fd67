package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/tmpfs"
	"github.com/tenurehq/tenure/rpc"
)

// TestFullDataDirKeepsAgentServing runs three real agents, n2's data dir on
// a small tmpfs, and fills it. A transfer of n3's term to n2 is refused
// with the reason (n2 finds its disk full when the leader asks it whether
// it can take the term), and n3 keeps its term. When n3 then resigns, n1
// takes the term and n2 cannot store its grant: it must not stop (before,
// the agent exited at a failed write, and at every term change after a
// restart), nor lead, but go on serving its socket, say why in its status,
// be listed by the others as storage-failed and not eligible, and be
// eligible again once space is freed. Root only (it mounts a tmpfs).
func TestFullDataDirKeepsAgentServing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	c := newTestCluster(t)
	c.expect = 3
	full := filepath.Join(c.dir, "n2") // n2's data dir, as c.config names it
	if err := os.MkdirAll(full, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := tmpfs.Mount(full, "512k"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, a := range c.agents {
			a.Halt()
		}
		if err := tmpfs.Unmount(full); err != nil {
			t.Error(err)
		}
	})
	for i := 1; i <= 3; i++ {
		c.start(c.config(fmt.Sprintf("n%d", i), uint64(i))) // each joins the first
	}
	first := c.waitLeader("n3", 20*time.Second)
	filler := filepath.Join(full, "filler")
	if err := tmpfs.Fill(filler); err != nil {
		t.Fatal(err)
	}

	// n2 has not written since its disk filled: asked whether it can
	// take the term, it finds out, and the transfer is refused.
	err := socketCall(c.agents["n3"], func(ctx context.Context, cl *rpc.Client) error { return cl.Transfer(ctx, "n2") })
	if err == nil || !strings.Contains(err.Error(), "cannot write its data dir") {
		t.Fatalf("transfer to n2 with its disk full: %v; want a refusal that says why", err)
	}
	t.Logf("the transfer to n2 was refused: %v", err)
	if e := c.waitLeader("n3", 20*time.Second); e != first {
		t.Fatalf("n3 leads epoch %d after the refused transfer, not its term %d", e, first)
	}

	if err := socketCall(c.agents["n3"], func(ctx context.Context, cl *rpc.Client) error { return cl.Resign(ctx) }); err != nil {
		t.Fatal(err)
	}
	next := c.waitLeader("n1", 20*time.Second)
	if next <= first {
		t.Fatalf("n1 leads epoch %d after n3's term %d", next, first)
	}
	n2 := c.agents["n2"]
	var st rpc.Status
	if err := socketCall(n2, func(ctx context.Context, cl *rpc.Client) (err error) { st, err = cl.Status(ctx); return err }); err != nil {
		t.Fatalf("n2's socket after its disk filled: %v", err)
	}
	if st.Storage == "" || st.IsLeader {
		t.Fatalf("n2's status with a full data dir: storage %q, leader %v; want the failed write, not leading", st.Storage, st.IsLeader)
	}
	t.Logf("n2's status says: %s", st.Storage)
	waitMember(t, c.agents["n1"], "n2", func(m rpc.Member) bool { return m.StorageFailed && !m.Eligible })

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*storageRetryInterval, func() error {
		var st rpc.Status
		if err := socketCall(n2, func(ctx context.Context, cl *rpc.Client) (err error) { st, err = cl.Status(ctx); return err }); err != nil {
			return err
		}
		if st.Storage != "" {
			return fmt.Errorf("n2 still reports %q", st.Storage)
		}
		return nil
	})
	waitMember(t, c.agents["n1"], "n2", func(m rpc.Member) bool { return !m.StorageFailed && m.Eligible })
	if _, err := os.Stat(filepath.Join(full, probeFile)); !os.IsNotExist(err) {
		t.Fatalf("the write probe is left in the data dir (stat: %v)", err)
	}
}
