//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/netns"
	"github.com/tenurehq/tenure/rpc"
)

// TestStatusNamesUnreachablePeersInNamespaces: three hosts with addresses
// of their own elect a leader; then h2's agent is killed (its host
// refuses connections) and h3's link goes down (its host answers nothing).
// h1's status says it has no quorum and names both, each at the peer
// address it dialled, with what its messages got: connection refused for
// h2, a timeout (or no route) for h3.
func TestStatusNamesUnreachablePeersInNamespaces(t *testing.T) {
	t.Parallel() // its hosts are a network of their own (netnsHosts)
	hosts := netnsHosts(t, 3)
	dir := t.TempDir()
	agents := startNamespaceAgents(t, dir, hosts)
	waitNamespaceLeader(t, agents[0].socket, 20*time.Second)
	agents[1].kill()
	if err := hosts[2].Run("ip", "link", "set", "eth0", "down"); err != nil {
		t.Fatalf("link down: %v", err)
	}
	var st rpc.Status
	deadline := time.Now().Add(30 * time.Second)
	for {
		var err error
		st, err = statusOf(agents[0].socket)
		h2 := "h2 (" + hosts[1].Addr + ":7947"
		h3 := "h3 (" + hosts[2].Addr + ":7947"
		if err == nil && st.Leader == nil && strings.HasPrefix(st.Reason, "no quorum") &&
			containsAll(st.Reason, h2, "connection refused", h3) &&
			(strings.Contains(st.Reason, "i/o timeout") || strings.Contains(st.Reason, "no route to host")) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("h1's status after 30s: %+v (%v); want no quorum, %s…: connection refused, and %s…: i/o timeout", st, err, h2, h3)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("h1: %s", st.Reason)
	if q := st.Quorum; q == nil || q.Need != 2 || q.Have >= q.Need {
		t.Errorf("h1's quorum %+v: want fewer grants than the 2 needed", q)
	}
}

// nsAgent is an agent process in a namespace.
type nsAgent struct {
	socket string
	proc   *netns.Proc
}

// kill stops the agent with SIGKILL, as a crash would.
func (a *nsAgent) kill() { a.proc.Kill() }

// startNamespaceAgents starts h1..hN (IDs 1..N) in hosts, bootstrapping a
// roster of all of them, and stops them when the test ends; a failed
// test shows their logs.
func startNamespaceAgents(t *testing.T, dir string, hosts []netns.Host) []*nsAgent {
	var joins []string
	for _, h := range hosts {
		joins = append(joins, "--join", h.Addr+":7946")
	}
	var agents []*nsAgent
	for i, h := range hosts {
		a := &nsAgent{socket: filepath.Join(dir, fmt.Sprintf("s%d.sock", i))}
		args := append([]string{"agent", "--name", fmt.Sprintf("h%d", i+1),
			"--id", fmt.Sprint(i + 1), "--bind", "0.0.0.0:7946", "--peer-bind", "0.0.0.0:7947", "--expect", fmt.Sprint(len(hosts)),
			"--data-dir", filepath.Join(dir, fmt.Sprint(i)), "--socket", a.socket, "--insecure-no-encryption",
			"--lease-ttl", "2s", "--timing", "local"}, joins...)
		logPath := filepath.Join(dir, fmt.Sprintf("log%d", i))
		var err error
		if a.proc, err = netns.Start(h.Command(binary, args...), logPath); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := a.proc.Stop(syscall.SIGINT, 10*time.Second); err != nil {
				t.Log(err)
			}
			if t.Failed() {
				out, _ := os.ReadFile(logPath)
				t.Logf("agent h%d log:\n%s", i+1, out)
			}
		})
		agents = append(agents, a)
	}
	return agents
}

// statusOf asks the agent at socket for its status.
func statusOf(socket string) (rpc.Status, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	cl, err := rpc.Dial(ctx, socket)
	if err != nil {
		return rpc.Status{}, err
	}
	defer cl.Close()
	return cl.Status(ctx)
}
