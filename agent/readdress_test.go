package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tenurehq/tenure/rpc"
)

// TestRestartOnNewAddressRejoins: a voter that crashes and comes back with
// the same name and data dir on another gossip address (here another
// port; a new DHCP lease or a rescheduled container on real hosts) is
// listed at its new address and follows the leader again within a failure
// detection and a suspicion, without a new term, whether it comes back at
// once (the others still list its old address alive) or after they
// declared it failed. With the LAN timing, before tenure handled this, the
// first stopped itself after 4 s (serf resolved the "conflict" over its
// name against it) and the second was listed only 46 s later.
func TestRestartOnNewAddressRejoins(t *testing.T) {
	for _, tc := range []struct {
		name       string
		waitFailed bool
		wipe       bool // it comes back without its address file
	}{{"at once", false, false}, {"after it was declared failed", true, false}, {"at once without its address file", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newTestCluster(t)
			c.expect = 3
			c.ttl = 10 * time.Second
			cfgs := map[string]Config{}
			for i := 1; i <= 3; i++ {
				cfg := c.config(fmt.Sprintf("n%d", i), uint64(i))
				cfg.Profile = LAN // the LAN gossip timing remembers a failed member 30 s
				cfgs[cfg.Name] = cfg
				c.start(cfg)
			}
			epoch := c.waitLeader("n3", 30*time.Second)
			leader := c.agents["n3"]
			seen := func() rpc.Member {
				for _, m := range leader.Members() {
					if m.Name == "n2" {
						return m
					}
				}
				return rpc.Member{}
			}
			old := seen().Addr
			c.halt("n2")
			if tc.waitFailed {
				eventually(t, 30*time.Second, func() error {
					if m := seen(); m.Status != rpc.MemberFailed {
						return fmt.Errorf("the leader lists n2 %s", m.Status)
					}
					return nil
				})
			}
			if tc.wipe {
				if err := os.Remove(filepath.Join(cfgs["n2"].DataDir, addrFile)); err != nil {
					t.Fatal(err)
				}
			}
			start := time.Now()
			n2 := c.start(cfgs["n2"])
			if n2.GossipAddr() == old {
				t.Fatalf("n2 came back on its old address %s", old)
			}
			// A failure detection (8.4 s for three members) and a
			// suspicion (4 s), with room for a loaded machine.
			bound := 20 * time.Second
			eventually(t, bound, func() error {
				select {
				case <-n2.Done():
					t.Fatalf("n2 stopped by itself %v after it started: %v", time.Since(start), n2.Err())
				default:
				}
				if m := seen(); m.Status != rpc.MemberAlive || m.Addr != n2.GossipAddr() {
					return fmt.Errorf("the leader lists n2 %s at %s, not alive at %s", m.Status, m.Addr, n2.GossipAddr())
				}
				return nil
			})
			t.Logf("listed alive at its new address %v after it started", time.Since(start).Round(time.Millisecond))
			eventually(t, bound, func() error {
				got, err := c.agreedLeader("n3")
				if err == nil && got != epoch {
					t.Fatalf("n3 leads epoch %d, not %d: the term changed", got, epoch)
				}
				return err
			})
		})
	}
}
