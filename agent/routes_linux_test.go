package agent

import (
	"maps"
	"os"
	"path/filepath"
	"testing"
)

// TestReadDefaultRoutes: the interfaces of up IPv4 and IPv6 default
// routes are read from tables in the kernel's /proc/net formats; other
// routes, routes that are down, the unreachable IPv6 default on lo, and a
// missing table are not.
func TestReadDefaultRoutes(t *testing.T) {
	dir := t.TempDir()
	v4 := filepath.Join(dir, "route")
	v6 := filepath.Join(dir, "ipv6_route")
	write := func(path, text string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(v4, "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"+
		"eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"+
		"eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"+
		"docker0\t000011AC\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0\n"+
		"wg0\t00000000\t00000000\t0000\t0\t0\t0\t00000000\t0\t0\t0\n")
	write(v6, "fd000000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000001 00000000 00000001     eth1\n"+
		"00000000000000000000000000000000 00 00000000000000000000000000000000 00 fd000000000000000000000000000001 00000400 00000003 00000000 00000003     eth1\n"+
		"00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 ffffffff 00000001 00000000 00200200       lo\n")
	got, err := readDefaultRoutes(v4, v6)
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]bool{"eth0": true, "eth1": true}; !maps.Equal(got, want) {
		t.Fatalf("default routes on %v, want %v", got, want)
	}
	got, err = readDefaultRoutes(v4, filepath.Join(dir, "none"))
	if err != nil {
		t.Fatalf("a missing IPv6 table: %v", err)
	}
	if want := map[string]bool{"eth0": true}; !maps.Equal(got, want) {
		t.Fatalf("without an IPv6 table: default routes on %v, want %v", got, want)
	}
}
