//go:build linux

package main

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/netns"
)

// TestTwinsNeverLeadTogether: a fourth host is started with the leader's
// name and ID (a host cloned with its hostname), and a route on each of
// the two drops the other's packets, so neither hears of the other but
// through the rest, and serf's resolution of the name does not run until
// that news outlasts an earlier run's (TestVoterTwinStops). For 20 s the
// two never both say they lead, and the first keeps its term. Before
// voters told the twins' processes apart (leasing.Request.Instance), the
// twin took the term at the next epoch as the same holder, the first
// took it back, and both led at once for most of the time.
func TestTwinsNeverLeadTogether(t *testing.T) {
	t.Parallel() // its hosts are a network of their own (netnsHosts)
	f := newFleet(t, 4)
	defer f.dumpLogs()
	f.bootstrap(3)
	leader := waitNamespaceLeader(t, f.socket(0), 40*time.Second)
	if leader.Node != "h3" {
		t.Fatalf("%s leads, want h3 (the highest ID)", leader.Node)
	}
	f.startTwin(2, 3)
	var twinState string
	for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		a, errA := f.status(2)
		b, errB := f.status(3)
		if errA == nil && errB == nil && a.IsLeader && b.IsLeader {
			t.Fatalf("both agents named h3 lead: the first in epoch %d (%d ms left), the twin in epoch %d (%d ms left)",
				a.Epoch, a.LeaseRemainingMS, b.Epoch, b.LeaseRemainingMS)
		}
		if errB == nil {
			twinState = b.State + ": " + b.Reason
		}
	}
	st, err := f.status(2)
	if err != nil || !st.IsLeader || st.Leader == nil || st.Leader.Epoch != leader.Epoch {
		t.Fatalf("the first h3: %+v (%v); want it still leading epoch %d", st.Leader, err, leader.Epoch)
	}
	t.Logf("the twin: %s", twinState)
}

// TestVoterTwinStops: a fourth host is started with a voter's name and ID
// (h2 cloned with its hostname), and a route on each of the two drops
// the other's packets. The twin takes the others' news of h2's address
// for its own earlier run until that news would have ended, had an
// earlier run stopped there, and then leaves it to serf's resolution: the
// others hold h2 at the first's address, so the twin stops, and the first
// keeps running. Two voters of one name each count as that voter, so a
// leader counting one's grant and a candidate counting the other's could
// each have a majority. Before, the twin ran as long as the cut between
// the two lasted.
func TestVoterTwinStops(t *testing.T) {
	t.Parallel() // its hosts are a network of their own (netnsHosts)
	f := newFleet(t, 4)
	defer f.dumpLogs()
	f.bootstrap(3)
	leader := waitNamespaceLeader(t, f.socket(0), 40*time.Second)
	began := time.Now()
	p := f.startTwin(1, 3)
	select {
	case <-p.Done():
		t.Logf("the twin stopped %v after its start", time.Since(began).Round(time.Millisecond))
	case <-time.After(40 * time.Second):
		t.Fatal("the twin of voter h2 still runs 40 s after its start")
	}
	log, err := os.ReadFile(f.logPath(3))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "gossip membership ended") {
		t.Fatalf("the twin exited, but not for losing its name:\n%s", log)
	}
	st, err := f.status(1)
	if err != nil {
		t.Fatalf("the first h2 after the twin stopped: %v", err)
	}
	if st.Leader == nil || st.Leader.Node != leader.Node {
		t.Fatalf("the first h2 follows %+v, want %s", st.Leader, leader.Node)
	}
}

// startTwin cuts the routes between hosts i and j both ways (a blackhole
// route on each for the other's address) and starts host j's agent with
// host i's name and ID; it returns the twin's process.
func (f *fleet) startTwin(i, j int) *netns.Proc {
	f.t.Helper()
	a, b := f.hosts[i], f.hosts[j]
	if err := a.Run("ip", "route", "add", "blackhole", b.Addr+"/32"); err != nil {
		f.t.Fatal(err)
	}
	if err := b.Run("ip", "route", "add", "blackhole", a.Addr+"/32"); err != nil {
		f.t.Fatal(err)
	}
	f.start(j, "--name", f.name(i), "--id", fmt.Sprint(i+1))
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.procs[j]
}
