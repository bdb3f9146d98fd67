package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/tmpfs"
	"github.com/tenurehq/tenure/rpc"
)

// TestFullDataDirKeepsAgentServing runs three real agents, n2's data dir on
// a small tmpfs, and fills it. When n3 resigns and names n2 its successor,
// n2 cannot store the new term's epoch: it must not stop (before, the
// agent exited at that write, and at every term change after a restart),
// nor lead, but go on serving its socket, say why in its status, be listed
// by the others as storage-failed and not eligible while n1 takes the term,
// and be eligible again once space is freed. Root only (it mounts a tmpfs).
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
