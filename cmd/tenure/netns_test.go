//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/netns"
	"github.com/tenurehq/tenure/rpc"
)

// netnsHosts makes n hosts h1..hN, network namespaces with addresses
// 10.213.0.1..n joined by a bridge (internal/netns), and removes them and
// what runs in them when the test ends. It skips the test where namespaces
// cannot be made (not root, no iproute2). All traffic stays inside them.
// Each call's hosts hang off a bridge of their own, so the same addresses
// in two tests never meet: the namespace tests run in parallel, and they
// mostly wait (the agents use about 1 % of a core each).
func netnsHosts(t *testing.T, n int) []netns.Host {
	t.Helper()
	return netns.HostsForTest(t, netns.Options{Prefix: "tn", Subnet: "10.213.0"}, n)
}

// TestDefaultBindsInNamespaces: three hosts with addresses of their own
// start agents the way the quick start does but binding 0.0.0.0 and no
// --advertise: each advertises its one address for gossip and peer
// messages, and they elect a leader. (Agents that advertised 0.0.0.0 or
// [::] never reached each other.) A host with two addresses and no
// --advertise refuses to start, naming --advertise.
func TestDefaultBindsInNamespaces(t *testing.T) {
	t.Parallel() // its hosts are a network of their own (netnsHosts)
	hosts := netnsHosts(t, 3)
	dir := t.TempDir()
	startDefaultBinds(t, hosts, dir)
	if err := hosts[0].Run("ip", "addr", "add", "10.214.0.1/24", "dev", "eth0"); err != nil {
		t.Fatalf("second address: %v", err)
	}
	out, err := hosts[0].Command(binary, "agent", "--name", "x", "--bind", "0.0.0.0:7950",
		"--peer-bind", "0.0.0.0:7951", "--data-dir", filepath.Join(dir, "x"), "--socket", filepath.Join(dir, "x.sock"),
		"--insecure-no-encryption").CombinedOutput()
	if code := exitCode(err); code != 2 || !strings.Contains(string(out), "several addresses") || !strings.Contains(string(out), "--advertise") {
		t.Fatalf("two addresses, no --advertise: exit %d, %q; want exit 2 naming --advertise", code, out)
	}
}

// TestBridgeBesideTheRouteInNamespaces: hosts that route through eth0 and
// also have a bridge such as Docker's (docker0, 172.17.0.1 on every host)
// start agents with default binds and no --advertise: each advertises its
// eth0 address, that of its default route, and they elect a leader. Both
// where eth0's addresses are private, which a host refused to start on
// before (two private addresses), and where they are public, on which
// every host advertised the bridge's private address, the same on all;
// and on dual-stack hosts whose eth0 also has a unique local IPv6 address
// (refused before: two private addresses), where the IPv4 one wins.
func TestBridgeBesideTheRouteInNamespaces(t *testing.T) {
	for _, tc := range []struct {
		name, subnet string
		ula          bool
	}{{"private", "10.213.0", false}, {"public", "198.51.100", false}, {"dual-stack", "10.213.0", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each network is a bridge of its own
			hosts := netns.HostsForTest(t, netns.Options{Prefix: "tb", Subnet: tc.subnet}, 3)
			for i, h := range hosts {
				steps := [][]string{
					{"link", "add", "docker0", "type", "bridge"},
					{"addr", "add", "172.17.0.1/16", "dev", "docker0"},
					{"link", "set", "docker0", "up"},
					{"route", "add", "default", "dev", "eth0"},
				}
				if tc.ula {
					steps = append(steps, []string{"-6", "addr", "add", fmt.Sprintf("fd20::%d/64", i+1), "dev", "eth0", "nodad"},
						[]string{"-6", "route", "add", "default", "dev", "eth0"})
				}
				for _, args := range steps {
					if err := h.Run("ip", args...); err != nil {
						t.Fatalf("%s: ip %s: %v", h.Label, strings.Join(args, " "), err)
					}
				}
			}
			startDefaultBinds(t, hosts, t.TempDir())
		})
	}
}

// startDefaultBinds starts an agent on each host the way the quick start
// does, but binding 0.0.0.0 and with no --advertise, and checks that they
// elect a leader and list each other at the hosts' addresses, for gossip
// and peer messages alike. The agents stop when the test ends.
func startDefaultBinds(t *testing.T, hosts []netns.Host, dir string) {
	t.Helper()
	var joins []string
	for _, h := range hosts {
		joins = append(joins, "--join", h.Addr+":7946")
	}
	socket := func(i int) string { return filepath.Join(dir, fmt.Sprintf("s%d.sock", i)) }
	for i, h := range hosts {
		args := append([]string{"agent", "--name", fmt.Sprintf("h%d", i+1),
			"--id", fmt.Sprint(i + 1), "--bind", "0.0.0.0:7946", "--peer-bind", "0.0.0.0:7947", "--expect", fmt.Sprint(len(hosts)),
			"--data-dir", filepath.Join(dir, fmt.Sprint(i)), "--socket", socket(i), "--insecure-no-encryption",
			"--lease-ttl", "2s", "--timing", "local"}, joins...)
		logPath := filepath.Join(dir, fmt.Sprintf("log%d", i))
		p, err := netns.Start(h.Command(binary, args...), logPath)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := p.Stop(syscall.SIGINT, 10*time.Second); err != nil {
				t.Log(err)
			}
			if t.Failed() {
				out, _ := os.ReadFile(logPath)
				t.Logf("agent h%d log:\n%s", i+1, out)
			}
		})
	}
	leader := waitNamespaceLeader(t, socket(0), 20*time.Second)
	t.Logf("leader %s, epoch %d", leader.Node, leader.Epoch)
	members := membersOf(t, socket(1))
	for i, h := range hosts {
		m, ok := members[fmt.Sprintf("h%d", i+1)]
		if !ok || m.Addr != h.Addr+":7946" || m.PeerAddr != h.Addr+":7947" {
			t.Fatalf("h%d is listed as %+v, want gossip %s:7946 and peer %s:7947", i+1, m, h.Addr, h.Addr)
		}
	}
}

// waitNamespaceLeader polls an agent's socket until it knows a leader.
func waitNamespaceLeader(t *testing.T, socket string, d time.Duration) rpc.LeaderInfo {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		l, err := leaderOf(ctx, socket)
		cancel()
		if err == nil {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("no leader after %v: %v", d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func leaderOf(ctx context.Context, socket string) (rpc.LeaderInfo, error) {
	cl, err := rpc.Dial(ctx, socket)
	if err != nil {
		return rpc.LeaderInfo{}, err
	}
	defer cl.Close()
	return cl.Leader(ctx)
}

// membersOf lists the members an agent knows, by name.
func membersOf(t *testing.T, socket string) map[string]rpc.Member {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cl, err := rpc.Dial(ctx, socket)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ms, err := cl.Members(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]rpc.Member{}
	for _, m := range ms {
		out[m.Name] = m
	}
	return out
}

func exitCode(err error) int {
	if e, ok := err.(*exec.ExitError); ok {
		return e.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}
