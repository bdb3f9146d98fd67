package metrics_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tenurehq/tenure/agent"
	"github.com/tenurehq/tenure/agent/metrics"
	"github.com/tenurehq/tenure/internal/testlog"
	"github.com/tenurehq/tenure/internal/testwait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// node is an agent with its metrics served on a real loopback listener.
type node struct {
	a    *agent.Agent
	url  string
	srv  *http.Server
	name string
}

func startNodes(t *testing.T, n int) []*node {
	dir, err := os.MkdirTemp("", "tenure-metrics-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var nodes []*node
	seed := ""
	for i := 1; i <= n; i++ {
		cfg := agent.DefaultConfig()
		cfg.Name, cfg.ID = fmt.Sprintf("n%d", i), uint64(i)
		cfg.BindAddr, cfg.PeerBindAddr = "127.0.0.1:0", "127.0.0.1:0"
		cfg.SocketPath, cfg.DataDir = filepath.Join(dir, cfg.Name+".sock"), filepath.Join(dir, cfg.Name)
		cfg.Profile, cfg.LeaseTTL, cfg.Expect = agent.Local, 2*time.Second, n
		cfg.Logger = testlog.New(t, cfg.Name)
		if seed != "" {
			cfg.Join = []string{seed}
		}
		a, err := agent.Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if seed == "" {
			seed = a.GossipAddr()
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		nd := &node{a: a, url: "http://" + ln.Addr().String(), srv: &http.Server{Handler: metrics.Handler(a)}, name: cfg.Name}
		go nd.srv.Serve(ln)
		t.Cleanup(func() { nd.srv.Close(); a.Halt() })
		nodes = append(nodes, nd)
	}
	return nodes
}

// get fetches path and returns the status code and body.
func (n *node) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(n.url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// metric returns the value of the sample named exactly series (with its
// labels, as the text format writes them), or -1 when absent.
func (n *node) metric(t *testing.T, series string) float64 {
	t.Helper()
	code, body := n.get(t, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("%s /metrics: %d", n.name, code)
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if ok && name == series {
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", n.name, sc.Text(), err)
			}
			return v
		}
	}
	return -1
}

func eventually(t *testing.T, d time.Duration, cond func() string) {
	t.Helper()
	testwait.For(t, d, "metrics", cond)
}

// TestMetricsAndHealthFollowAFailover: three agents serve their metrics
// on real listeners. The leader says tenure_leader 1, answers 200 on
// /health/leader, counts its term and its renewals; followers say 0 and
// 503. After the leader is halted (a crash), the next one's values turn,
// the remaining follower sees the new term's epoch, and every node's
// /health stays 200.
func TestMetricsAndHealthFollowAFailover(t *testing.T) {
	nodes := startNodes(t, 3)
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	eventually(t, 20*time.Second, func() string {
		if v := n3.metric(t, "tenure_leader"); v != 1 {
			return fmt.Sprintf("n3 tenure_leader %v", v)
		}
		return ""
	})
	eventually(t, 5*time.Second, func() string {
		if v := n3.metric(t, `tenure_lease_events_total{event="renewed"}`); v < 1 {
			return fmt.Sprintf("n3 renewals %v", v)
		}
		return ""
	})
	if v := n3.metric(t, "tenure_socket_connections_refused_total"); v != 0 {
		t.Fatalf("n3 refused %v socket connections", v)
	}
	if v := n3.metric(t, "tenure_terms_led_total"); v != 1 {
		t.Fatalf("n3 tenure_terms_led_total %v, want 1", v)
	}
	if v := n3.metric(t, "tenure_lease_remaining_seconds"); v <= 0 || v > 2 {
		t.Fatalf("n3 lease remaining %v s, want in (0, 2]", v)
	}
	if v := n3.metric(t, `tenure_members{role="voter",status="alive"}`); v != 3 {
		_, body := n3.get(t, "/metrics")
		t.Fatalf("n3 sees %v alive voters, want 3:\n%s", v, body[strings.Index(body, "tenure_"):])
	}
	if v := n3.metric(t, `tenure_peer_messages_total{direction="sent",type="lease.renew"}`); v < 2 {
		t.Fatalf("n3 sent %v renewals, want at least one per other voter", v)
	}
	epoch := n1.metric(t, "tenure_leader_epoch")
	for _, n := range []*node{n1, n2} {
		if v := n.metric(t, "tenure_leader"); v != 0 {
			t.Fatalf("%s tenure_leader %v on a follower", n.name, v)
		}
		if code, body := n.get(t, "/health/leader"); code != http.StatusServiceUnavailable || !strings.Contains(body, "n3 does") {
			t.Fatalf("%s /health/leader: %d %s", n.name, code, body)
		}
	}
	if code, _ := n3.get(t, "/health/leader"); code != http.StatusOK {
		t.Fatalf("n3 /health/leader: %d", code)
	}
	if code, body := n3.get(t, "/v1/status"); code != http.StatusOK || !strings.Contains(body, `"is_leader":true`) {
		t.Fatalf("n3 /v1/status: %d %s", code, body)
	}

	n3.a.Halt()
	eventually(t, 20*time.Second, func() string {
		if v := n2.metric(t, "tenure_leader"); v != 1 {
			return fmt.Sprintf("n2 tenure_leader %v", v)
		}
		if v := n1.metric(t, "tenure_leader_epoch"); v <= epoch {
			return fmt.Sprintf("n1 tenure_leader_epoch %v, was %v", v, epoch)
		}
		return ""
	})
	if code, _ := n2.get(t, "/health/leader"); code != http.StatusOK {
		t.Fatalf("n2 /health/leader after the failover: %d", code)
	}
	if v := n2.metric(t, "tenure_elections_started_total"); v < 1 {
		t.Fatalf("n2 started %v elections", v)
	}
	for _, n := range []*node{n1, n2} {
		if code, body := n.get(t, "/health"); code != http.StatusOK {
			t.Fatalf("%s /health: %d %s", n.name, code, body)
		}
	}
	if code, body := n3.get(t, "/health"); code != http.StatusServiceUnavailable || !strings.Contains(body, "stopped") {
		t.Fatalf("halted n3 /health: %d %s", code, body)
	}
}
