//go:build linux

package netns

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

var opts = Options{Prefix: "nt", Subnet: "10.216.0"}

// TestMain doubles as a helper process: with NETNS_HELPER set, the test
// binary listens or dials inside a namespace instead of running tests.
func TestMain(m *testing.M) {
	switch os.Getenv("NETNS_HELPER") {
	case "":
		os.Exit(m.Run())
	case "listen":
		ln, err := net.Listen("tcp", "0.0.0.0:9000")
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		for {
			c, err := ln.Accept()
			if err != nil {
				os.Exit(1)
			}
			_, _ = c.Write([]byte("hello from " + os.Getenv("NETNS_ADDR")))
			c.Close()
		}
	case "dial":
		out, err := dial(os.Getenv("NETNS_ADDR"), 5*time.Second)
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		fmt.Print(out)
		os.Exit(0)
	}
}

// dial connects to addr until it answers or d passes, and returns what it
// says.
func dial(addr string, d time.Duration) (string, error) {
	deadline := time.Now().Add(d)
	for {
		c, err := net.DialTimeout("tcp", addr, 300*time.Millisecond)
		if err == nil {
			b, err := io.ReadAll(c)
			c.Close()
			return string(b), err
		}
		if time.Now().After(deadline) {
			return "", err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// helper is the test binary as a helper process in host h.
func helper(h Host, role, addr string) *exec.Cmd {
	cmd := h.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "NETNS_HELPER="+role, "NETNS_ADDR="+addr)
	return cmd
}

// TestHostsReachEachOtherOnly: a server bound to 0.0.0.0 in h1 answers a
// client in h2 at h1's address; the machine's own namespace has no address
// on the network.
func TestHostsReachEachOtherOnly(t *testing.T) {
	hosts := HostsForTest(t, opts, 2)
	p, err := Start(helper(hosts[0], "listen", hosts[0].Addr), filepath.Join(t.TempDir(), "listen.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Kill()
	out, err := helper(hosts[1], "dial", hosts[0].Addr+":9000").CombinedOutput()
	if err != nil || string(out) != "hello from "+hosts[0].Addr {
		t.Fatalf("h2 dialling h1: %v: %q", err, out)
	}
	root, err := exec.Command("ip", "-o", "addr").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(root), opts.Subnet+".") {
		t.Fatalf("the machine's own namespace has an address on %s.0/24:\n%s", opts.Subnet, root)
	}
}

// TestCloseRemovesNamespacesAndProcesses: Close kills what still runs in
// the network's namespaces, stopped processes included, and deletes them.
func TestCloseRemovesNamespacesAndProcesses(t *testing.T) {
	if err := Available(); err != nil {
		t.Skip(err)
	}
	n, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close() })
	hosts, err := n.AddHosts(2)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Start(hosts[1].Command("sleep", "60"), filepath.Join(t.TempDir(), "sleep.log"))
	if err != nil {
		t.Fatal(err)
	}
	waitInside(t, hosts[1].NS, p.Pid())
	if err := p.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the process in h2 still runs after Close")
	}
	if left := namespaces(t, n.tag); len(left) > 0 {
		t.Fatalf("namespaces left after Close: %v", left)
	}
}

// TestSweepRemovesOnlyDeadRuns: a namespace named for a PID that no longer
// runs is removed with its processes; this process's own network, and
// another prefix's namespace, are kept.
func TestSweepRemovesOnlyDeadRuns(t *testing.T) {
	n := ForTest(t, opts)
	if _, err := n.Add("h1", 1); err != nil {
		t.Fatal(err)
	}
	dead := fmt.Sprintf("%s%d-1-h1", opts.Prefix, 1<<30) // above any pid_max
	other := fmt.Sprintf("ntx%d-1-h1", 1<<30)
	for _, ns := range []string{dead, other} {
		if err := ip("netns", "add", ns); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = remove(ns) })
	}
	p, err := Start(exec.Command("ip", "netns", "exec", dead, "sleep", "60"), filepath.Join(t.TempDir(), "sleep.log"))
	if err != nil {
		t.Fatal(err)
	}
	waitInside(t, dead, p.Pid())
	removed, err := Sweep(opts.Prefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0] != dead {
		t.Fatalf("swept %v, want only %s", removed, dead)
	}
	select {
	case <-p.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the process in the swept namespace still runs")
	}
	left := strings.Join(namespaces(t, ""), " ")
	if !strings.Contains(left, n.tag+"-h1") || !strings.Contains(left, other) || strings.Contains(left, dead) {
		t.Fatalf("namespaces after the sweep: %s", left)
	}
}

// waitInside waits until pid runs inside namespace ns: until then it is
// ip netns exec, still in the machine's own namespace, where Close and
// Sweep do not look.
func waitInside(t *testing.T, ns string, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		out, err := exec.Command("ip", "netns", "pids", ns).Output()
		if err == nil && slices.Contains(strings.Fields(string(out)), strconv.Itoa(pid)) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d not in %s after 5s: %v", pid, ns, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// namespaces lists the namespaces whose names start with prefix.
func namespaces(t *testing.T, prefix string) []string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], prefix) {
			names = append(names, f[0])
		}
	}
	return names
}
