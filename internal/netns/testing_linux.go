package netns

import "testing"

// ForTest makes a network for t: it skips t where networks cannot be made
// (Available), first sweeps the leftovers of earlier runs with the same
// prefix, and closes the network (killing what still runs in it) when t
// ends, failed or not.
func ForTest(t testing.TB, opts Options) *Network {
	t.Helper()
	if err := Available(); err != nil {
		t.Skip(err)
	}
	if removed, err := Sweep(opts.Prefix); err != nil {
		t.Logf("netns: sweeping earlier runs' namespaces: %v", err)
	} else if len(removed) > 0 {
		t.Logf("netns: removed %d namespaces of earlier runs: %v", len(removed), removed)
	}
	n, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("netns: %v", err)
		}
	})
	return n
}

// HostsForTest is ForTest with count hosts h1..hN at octets 1..N.
func HostsForTest(t testing.TB, opts Options, count int) []Host {
	t.Helper()
	hosts, err := ForTest(t, opts).AddHosts(count)
	if err != nil {
		t.Fatal(err)
	}
	return hosts
}
