package netns

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
)

// Options names a network's namespaces and numbers its addresses.
type Options struct {
	// Prefix starts the name of every namespace the network makes, followed
	// by the creating process's PID: "nm" gives "nm4242-1-h3". Suites that
	// may run at once use different prefixes, and Sweep(Prefix) removes
	// only that suite's leftovers. Letters only.
	Prefix string
	// Subnet is the first three octets of the network's /24, "10.213.0".
	Subnet string
}

// Network is a bridge in a namespace of its own and the hosts joined to it.
// Its methods are safe for concurrent use.
type Network struct {
	opts   Options
	tag    string // Prefix, PID and a per-process sequence number
	bridge string // the bridge's namespace

	mu     sync.Mutex
	hosts  []Host
	closed bool
}

// Host is a network namespace with one address on the network.
type Host struct {
	// Label names the host within its network ("h1").
	Label string
	// NS is the namespace's name, for ip netns.
	NS string
	// Addr is the host's one address, without a port.
	Addr string
}

// seq numbers the networks of one process, so one that was not closed
// cannot collide with the next.
var seq atomic.Uint64

var prefixRE = regexp.MustCompile(`^[a-z]+$`)

// Available reports why networks cannot be made here (not root, no ip), or
// nil.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("netns: needs root to create network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("netns: needs iproute2 (ip)")
	}
	return nil
}

// New makes the bridge of a network; Add joins hosts to it.
func New(opts Options) (*Network, error) {
	if !prefixRE.MatchString(opts.Prefix) {
		return nil, fmt.Errorf("netns: prefix %q: want lowercase letters only", opts.Prefix)
	}
	if len(strings.Split(opts.Subnet, ".")) != 3 {
		return nil, fmt.Errorf("netns: subnet %q: want three octets, as 10.213.0", opts.Subnet)
	}
	n := &Network{opts: opts, tag: fmt.Sprintf("%s%d-%d", opts.Prefix, os.Getpid(), seq.Add(1))}
	n.bridge = n.tag + "-br"
	if err := ip("netns", "add", n.bridge); err != nil {
		return nil, err
	}
	for _, args := range [][]string{
		{"-n", n.bridge, "link", "add", "br0", "type", "bridge"},
		{"-n", n.bridge, "link", "set", "br0", "up"},
	} {
		if err := ip(args...); err != nil {
			_ = remove(n.bridge)
			return nil, err
		}
	}
	return n, nil
}

// Add makes a host named label with address Subnet.octet (1-254; each
// octet once per network) and joins it to the bridge.
func (n *Network) Add(label string, octet int) (Host, error) {
	if octet < 1 || octet > 254 {
		return Host{}, fmt.Errorf("netns: host %s: octet %d out of 1-254", label, octet)
	}
	h := Host{Label: label, NS: n.tag + "-" + label, Addr: fmt.Sprintf("%s.%d", n.opts.Subnet, octet)}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return Host{}, errors.New("netns: network closed")
	}
	if err := ip("netns", "add", h.NS); err != nil {
		return Host{}, err
	}
	n.hosts = append(n.hosts, h)
	veth := fmt.Sprintf("p%d", octet)
	for _, args := range [][]string{
		{"-n", n.bridge, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", h.NS},
		{"-n", n.bridge, "link", "set", veth, "master", "br0", "up"},
		{"-n", h.NS, "addr", "add", h.Addr + "/24", "dev", "eth0"},
		{"-n", h.NS, "link", "set", "eth0", "up"},
		{"-n", h.NS, "link", "set", "lo", "up"},
	} {
		if err := ip(args...); err != nil {
			return Host{}, fmt.Errorf("netns: host %s: %w", label, err)
		}
	}
	return h, nil
}

// AddHosts adds n hosts labelled h1..hn with octets 1..n.
func (n *Network) AddHosts(count int) ([]Host, error) {
	var hosts []Host
	for i := 1; i <= count; i++ {
		h, err := n.Add(fmt.Sprintf("h%d", i), i)
		if err != nil {
			return nil, err
		}
		hosts = append(hosts, h)
	}
	return hosts, nil
}

// Close kills every process still running in the network's namespaces
// and deletes them (their links go with them). It returns the first
// error and carries on past it; closing twice is a no-op.
func (n *Network) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	var first error
	for _, h := range n.hosts {
		if err := remove(h.NS); err != nil && first == nil {
			first = err
		}
	}
	if err := remove(n.bridge); err != nil && first == nil {
		first = err
	}
	return first
}

// Command is a command that runs name with args inside the host's
// namespace. (ip netns exec execs name itself, so the command's process
// is name's: signals sent to it reach name.)
func (h Host) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", h.NS, name}, args...)...)
}

// Run runs name with args inside the host's namespace and waits for it;
// the error carries its output.
func (h Host) Run(name string, args ...string) error {
	if out, err := h.Command(name, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("netns: %s: %s %s: %w: %s", h.Label, name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// Sweep removes what earlier processes left behind: every namespace whose
// name starts with prefix and a PID that is no longer running (its
// processes are killed first). It returns the namespaces it removed.
func Sweep(prefix string) ([]string, error) {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return nil, fmt.Errorf("netns: ip netns list: %w", err)
	}
	re := regexp.MustCompile(`^` + regexp.QuoteMeta(prefix) + `(\d+)-\d+-\S+$`)
	var removed []string
	var first error
	for _, line := range strings.Split(string(out), "\n") {
		fields := strings.Fields(line) // "name (id: 3)"
		if len(fields) == 0 {
			continue
		}
		m := re.FindStringSubmatch(fields[0])
		if m == nil {
			continue
		}
		if pid, _ := strconv.Atoi(m[1]); pid == os.Getpid() || Alive(pid) {
			continue
		}
		if err := remove(fields[0]); err != nil && first == nil {
			first = err
		}
		removed = append(removed, fields[0])
	}
	return removed, first
}

// Alive reports whether a process with this PID exists: whether the
// process that made a namespace, or another leftover of a test run, is
// still running.
func Alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// remove kills the processes in namespace ns and deletes it.
func remove(ns string) error {
	out, _ := exec.Command("ip", "netns", "pids", ns).Output()
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL) // a stopped process dies of SIGKILL too
		}
	}
	return ip("netns", "del", ns)
}

// ip runs iproute2's ip; the error carries its output.
func ip(args ...string) error {
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("netns: ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}
