package gossip

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// TestGateIgnoresPreviousRun: the conflict gate refuses news of this node
// at the address of its previous run, and only that.
func TestGateIgnoresPreviousRun(t *testing.T) {
	g := newConflictGate("n1", 50*time.Millisecond, 128)
	g.previous = netip.MustParseAddrPort("10.0.0.5:7946")
	alive := func(name, ip string, port uint16) *memberlist.Node {
		return &memberlist.Node{Name: name, Addr: net.ParseIP(ip), Port: port} // a 16-byte IPv4
	}
	if g.NotifyAlive(alive("n1", "10.0.0.5", 7946)) == nil {
		t.Fatal("news of this node's previous address was taken")
	}
	for _, n := range []*memberlist.Node{alive("n1", "10.0.0.9", 7946), alive("n1", "10.0.0.5", 7947), alive("n2", "10.0.0.5", 7946)} {
		if err := g.NotifyAlive(n); err != nil {
			t.Fatalf("refused %s at %s:%d: %v", n.Name, n.Addr, n.Port, err)
		}
	}
}

// TestAddressFile: a member records its address; started again on another
// one, it ignores news of the first, and started again on the same one, it
// ignores nothing. A file that holds no address is replaced.
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
	if got := second.conflict.previous.String(); got != addr1 {
		t.Fatalf("restarted on %s, it ignores news of %q, want %s", addr2, got, addr1)
	}
	second.Shutdown()
	third, _ := start(addr2)
	if third.conflict.previous.IsValid() {
		t.Fatalf("restarted on the same address, it ignores news of %s", third.conflict.previous)
	}
	third.Shutdown()
	if err := os.WriteFile(path, []byte("not an address\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if fourth, _ := start("127.0.0.1:0"); fourth.conflict.previous.IsValid() {
		t.Fatalf("a file without an address made it ignore %s", fourth.conflict.previous)
	}
}
