package gossip

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// TestGatePingsOtherAddresses: news of this node's name from an address
// other than its own is refused and queued for a ping, once, and refused
// while the ping is pending; then taken where a node answered, refused as
// an earlier run where none did, until its recheck is due. News from
// there after that is pinged again; where nothing answers again after an
// earlier run's news would have ended, it is taken (another node of this
// name that this node cannot reach). News of other names, and of this
// node at its own address, passes; beyond maxClaims addresses, news
// passes unpinged. Addresses come as memberlist gives them, IPv4 in 16
// bytes.
func TestGatePingsOtherAddresses(t *testing.T) {
	timing := LocalTiming()
	g := newConflictGate("n1", timing, 128)
	g.self = netip.MustParseAddrPort("10.0.0.5:7946")
	alive := func(name, ap string) *memberlist.Node {
		a := netip.MustParseAddrPort(ap)
		return &memberlist.Node{Name: name, Addr: net.ParseIP(a.Addr().String()), Port: a.Port()}
	}
	for _, n := range []*memberlist.Node{alive("n1", "10.0.0.5:7946"), alive("n2", "10.0.0.6:7946")} {
		if err := g.NotifyAlive(n); err != nil {
			t.Fatalf("refused %s at %s:%d: %v", n.Name, n.Addr, n.Port, err)
		}
	}
	if len(g.pings) != 0 {
		t.Fatalf("%d pings queued for news of other names or of this address", len(g.pings))
	}
	for _, ap := range []string{"10.0.0.7:7946", "10.0.0.8:7946"} {
		for range 2 {
			if err := g.NotifyAlive(alive("n1", ap)); !errors.Is(err, errClaimPinging) {
				t.Fatalf("news of n1 at %s before a ping: %v, want it refused as pending", ap, err)
			}
		}
		if at := <-g.pings; at.String() != ap {
			t.Fatalf("queued a ping of %s, want %s", at, ap)
		}
	}
	if len(g.pings) != 0 {
		t.Fatal("an address was queued twice")
	}
	now := g.began.Add(timing.ProbeInterval)
	if g.settle(now, netip.MustParseAddrPort("10.0.0.7:7946"), false, 3) {
		t.Fatal("an address found silent once was taken for another node's")
	}
	g.settle(now, netip.MustParseAddrPort("10.0.0.8:7946"), true, 3)
	if err := g.NotifyAlive(alive("n1", "10.0.0.7:7946")); !errors.Is(err, errPreviousRun) {
		t.Fatalf("news of n1 where nothing answered: %v, want it refused as an earlier run", err)
	}
	if err := g.NotifyAlive(alive("n1", "10.0.0.8:7946")); err != nil {
		t.Fatalf("news of n1 where a node answered: %v, want it taken", err)
	}
	silent := netip.MustParseAddrPort("10.0.0.7:7946")
	gone := g.began.Add(timing.earlierRunGone(3))
	if c := g.claims[silent]; !c.until.Equal(gone) || !c.silentSince.Equal(now) {
		t.Fatalf("an address found silent %v after the start: recheck at %v after it (silent since %v), want %v (an earlier run's news surely ended)",
			now.Sub(g.began), c.until.Sub(g.began), c.silentSince.Sub(g.began), gone.Sub(g.began))
	}
	g.claims[silent] = claim{found: claimSilent, until: time.Now(), silentSince: now} // its recheck is due
	if err := g.NotifyAlive(alive("n1", silent.String())); !errors.Is(err, errClaimPinging) {
		t.Fatalf("news of n1 where nothing answered, at its recheck: %v, want it pinged again", err)
	}
	if at := <-g.pings; at != silent {
		t.Fatalf("queued a ping of %s, want %s", at, silent)
	}
	if g.settle(gone.Add(-time.Millisecond), silent, false, 3) {
		t.Fatal("news from a silent address taken for another node's before an earlier run's news would have ended")
	}
	if !g.settle(gone, silent, false, 3) {
		t.Fatal("news from a silent address, found silent again after an earlier run's news would have ended, not taken for another node's")
	}
	if err := g.NotifyAlive(alive("n1", silent.String())); err != nil {
		t.Fatalf("news of n1 from another node of that name that cannot be reached: %v, want it taken (for serf's resolution)", err)
	}
	late := netip.MustParseAddrPort("10.0.0.9:7946")
	if g.settle(gone, late, false, 3) {
		t.Fatal("an address first found silent after an earlier run's news would have ended was taken for another node's at once")
	}
	if c := g.claims[late]; !c.until.Equal(gone.Add(timing.FailureDetectionFloor())) {
		t.Fatalf("its recheck at %v, want a failure detection floor (%v) later", c.until.Sub(gone), timing.FailureDetectionFloor())
	}
	for i := range maxClaims {
		g.claims[netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), 1)] = claim{found: claimSilent}
	}
	if err := g.NotifyAlive(alive("n1", "10.2.0.1:7946")); err != nil {
		t.Fatalf("news from a new address with %d remembered: %v, want it passed unpinged", len(g.claims), err)
	}
}

// TestPingSelfAt: a ping under this node's name is answered by a live
// member of that name, and not by a member of another name or by an
// address where nothing listens.
func TestPingSelfAt(t *testing.T) {
	twin := startNode(t, testConfig(t, 1))
	other := startNode(t, testConfig(t, 2))
	cfg := testConfig(t, 1) // the same name as twin
	me := startNode(t, cfg)
	addr := func(n *node) netip.AddrPort { return netip.MustParseAddrPort(n.LocalMember().Addr) }
	if !me.pingSelfAt(addr(twin)) {
		t.Fatal("a live member of this node's name did not answer")
	}
	if me.pingSelfAt(addr(other)) {
		t.Fatal("a member of another name answered a ping for this node's name")
	}
	gone := addr(other)
	other.Shutdown()
	if me.pingSelfAt(gone) {
		t.Fatal("an address where nothing listens answered")
	}
}

// TestAddressFile: a member records its address; started again on another
// one, it takes the first for its previous address (and announces the new
// one), and started again on the same one, it has none. A file that holds
// no address is replaced.
func TestAddressFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gossip-addr")
	start := func(bind string) (*node, string) {
		cfg := testConfig(t, 1)
		cfg.BindAddr, cfg.AddrFile = bind, path
		n := startNode(t, cfg)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(string(b)); got != n.LocalMember().Addr {
			t.Fatalf("the address file holds %q, want %s", got, n.LocalMember().Addr)
		}
		return n, n.LocalMember().Addr
	}
	first, addr1 := start("127.0.0.1:0")
	first.Shutdown()
	second, addr2 := start("127.0.0.1:0")
	if addr1 == addr2 {
		t.Skipf("the second start got the same port %s", addr1)
	}
	if got := second.recorded.String(); !second.moved() || got != addr1 {
		t.Fatalf("restarted on %s, it takes %q for its previous address, want %s", addr2, got, addr1)
	}
	second.Shutdown()
	third, _ := start(addr2)
	if third.moved() {
		t.Fatalf("restarted on the same address, it takes %s for a previous one", third.recorded)
	}
	third.Shutdown()
	if err := os.WriteFile(path, []byte("not an address\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if fourth, _ := start("127.0.0.1:0"); fourth.moved() {
		t.Fatalf("a file without an address made it take %s for a previous one", fourth.recorded)
	}
}
