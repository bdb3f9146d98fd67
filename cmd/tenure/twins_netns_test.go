package main

import (
	"testing"
	"time"
)

// TestTwinsNeverLeadTogether: a fourth host is started with the leader's
// name and ID (a host cloned with its hostname), and a route on each of
// the two drops the other's packets, so neither hears of the other but
// through the rest, and serf's resolution of the name stops neither.
// For 20 s the two never both say they lead, and the first keeps its
// term. Before voters told the twins' processes apart
// (leasing.Request.Instance), the twin took the term at the next epoch as
// the same holder, the first took it back, and both led at once for most
// of the time.
func TestTwinsNeverLeadTogether(t *testing.T) {
	t.Parallel() // its hosts are a network of their own (netnsHosts)
	f := newFleet(t, 4)
	defer f.dumpLogs()
	f.bootstrap(3)
	leader := waitNamespaceLeader(t, f.socket(0), 40*time.Second)
	if leader.Node != "h3" {
		t.Fatalf("%s leads, want h3 (the highest ID)", leader.Node)
	}
	first, twin := f.hosts[2], f.hosts[3]
	if err := first.Run("ip", "route", "add", "blackhole", twin.Addr+"/32"); err != nil {
		t.Fatal(err)
	}
	if err := twin.Run("ip", "route", "add", "blackhole", first.Addr+"/32"); err != nil {
		t.Fatal(err)
	}
	f.start(3, "--name", "h3", "--id", "3")
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
