//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRestartOnNewAddressInNamespaces: a voter's host crashes and comes
// back at once with another address (a new DHCP lease), its agent started
// again with the same name and data dir, with the LAN timing an operator
// runs. The others take its new address for gossip and peer messages
// within a failure detection and a suspicion, it does not stop itself over
// a "conflict" with its own old address, and it follows the same term. Its
// vote counts again: with h1 then killed too, the leader renews through
// it and keeps its term past a TTL. The same holds when its data dir has
// lost the file that names its previous address (a wiped data dir, or the
// first start of a release that keeps the file): it then finds that
// nothing answers at the old address under its name.
func TestRestartOnNewAddressInNamespaces(t *testing.T) {
	t.Parallel()
	for _, wipe := range []bool{false, true} {
		t.Run(map[bool]string{false: "with its address file", true: "without its address file"}[wipe], func(t *testing.T) {
			t.Parallel() // its hosts are a network of their own (netnsHosts)
			restartOnNewAddress(t, wipe)
		})
	}
}

// restartOnNewAddress is TestRestartOnNewAddressInNamespaces, the address
// file removed before the restart if wipe.
func restartOnNewAddress(t *testing.T, wipe bool) {
	f := newFleet(t, 3)
	defer f.dumpLogs()
	lan := []string{"--expect", "3", "--timing", "lan", "--lease-ttl", "10s"} // the later --timing wins
	for i := range 3 {
		f.start(i, lan...)
	}
	leader := waitNamespaceLeader(t, f.socket(0), 40*time.Second)
	if leader.Node != "h3" {
		t.Fatalf("%s leads, want h3 (the highest ID)", leader.Node)
	}
	f.kill(1)
	h2 := &f.hosts[1]
	old := h2.Addr
	h2.Addr = strings.TrimSuffix(old, ".2") + ".102"
	if err := h2.Run("ip", "addr", "del", old+"/24", "dev", "eth0"); err != nil {
		t.Fatal(err)
	}
	if err := h2.Run("ip", "addr", "add", h2.Addr+"/24", "dev", "eth0"); err != nil {
		t.Fatal(err)
	}
	if wipe {
		if err := os.Remove(filepath.Join(f.dir, "h2", "gossip-addr")); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	f.start(1, lan...)
	// A failure detection (8.4 s for three members) and a suspicion (4 s),
	// with room for a loaded machine.
	f.waitFor(25*time.Second, "the others take h2's new address", func() string {
		f.mu.Lock()
		p := f.procs[1]
		f.mu.Unlock()
		if done, err := p.Exited(); done {
			t.Fatalf("h2's agent stopped %v after it started: %v", time.Since(start), err)
		}
		for _, i := range []int{0, 2} {
			m := f.members(i)["h2"]
			if m.Status != "alive" || m.Addr != h2.Addr+":7946" || m.PeerAddr != h2.Addr+":7947" {
				return fmt.Sprintf("%s lists h2 %s at %s and %s", f.name(i), m.Status, m.Addr, m.PeerAddr)
			}
		}
		return ""
	})
	t.Logf("h2 listed at %s %v after it started", h2.Addr, time.Since(start).Round(time.Millisecond))
	f.waitFor(20*time.Second, "h2 follows the term it left", func() string {
		st, err := f.status(1)
		switch {
		case err != nil:
			return err.Error()
		case st.Leader == nil || st.Leader.Node != leader.Node || st.Leader.Epoch != leader.Epoch:
			return fmt.Sprintf("h2 follows %+v, want %s in epoch %d", st.Leader, leader.Node, leader.Epoch)
		}
		return ""
	})
	f.kill(0)
	time.Sleep(12 * time.Second) // longer than the 10 s TTL: renewed through h2, or lost
	st, err := f.status(2)
	if err != nil || !st.IsLeader || st.Leader == nil || st.Leader.Epoch != leader.Epoch {
		t.Fatalf("with h1 killed, h3 %+v (%v); want it still leading epoch %d with h2's grants", st.Leader, err, leader.Epoch)
	}
}
