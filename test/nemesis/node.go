//go:build nemesis

package nemesis

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/tenurehq/tenure/internal/netns"
	"github.com/tenurehq/tenure/internal/procgroup"
	"github.com/tenurehq/tenure/rpc"
	"github.com/tenurehq/tenure/test/nemesis/check"
)

// Node is one host of the cluster: its namespace, its agent and the
// `tenure run` supervisor (with its writer child) beside it.
type Node struct {
	// Name is the agent's --name, "h3"; ID its --id (3).
	Name string
	ID   int
	Host netns.Host

	dir      string // <run dir>/<name>: its disk (with the data dir), socket, logs
	mounted  bool   // its disk is mounted
	expect   int    // --expect: the bootstrap's size, or 0 for a node that joins later
	eligible bool

	agent       *netns.Proc // nil while the agent is down
	run         *netns.Proc
	watch       *netns.Proc // tenure watch --json: the leader the agent names, over time
	paused      bool        // the agent is stopped (SIGSTOP)
	pausedHost  bool        // the agent, the supervisor and the writers are stopped
	pausedGroup []int       // the writers' process groups stopped with the host
	diskFull    bool        // FillDisk filled its disk, FreeDisk has not freed it
}

// disk is the mount point of the node's own small file system (a tmpfs),
// which holds its data dir, so that a fault can fill it (FillDisk).
func (n *Node) disk() string { return filepath.Join(n.dir, "disk") }

func (n *Node) dataDir() string { return filepath.Join(n.disk(), "data") }

// filler is the file that fills the node's disk.
func (n *Node) filler() string { return filepath.Join(n.disk(), "filler") }

// Socket is the agent's Unix socket.
func (n *Node) Socket() string { return filepath.Join(n.dir, "tenure.sock") }

// Up reports whether the agent runs and is not stopped.
func (n *Node) Up() bool { return n.agent != nil && !n.paused && !n.pausedHost }

// Status asks the agent for its status, bounded by a second (a stopped
// agent accepts the connection but never answers).
func (n *Node) Status() (rpc.Status, error) { return ask(n, (*rpc.Client).Status) }

// Members asks the agent for its member list, bounded as Status.
func (n *Node) Members() ([]rpc.Member, error) { return ask(n, (*rpc.Client).Members) }

// ask makes one call to n's agent on a connection of its own, bounded by
// a second.
func ask[T any](n *Node, call func(*rpc.Client, context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	cl, err := rpc.Dial(ctx, n.Socket())
	if err != nil {
		var zero T
		return zero, err
	}
	defer cl.Close()
	return call(cl, ctx)
}

// stopHost stops the supervisor first (so it starts no new child), then
// every writer process group it has, then the agent.
func (n *Node) stopHost() error {
	if err := n.run.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	n.pausedGroup = nil
	for _, pid := range procgroup.Children(n.run.Pid()) {
		if err := procgroup.Signal(pid, syscall.SIGSTOP); err == nil {
			n.pausedGroup = append(n.pausedGroup, pid)
		}
	}
	return n.agent.Signal(syscall.SIGSTOP)
}

// continueHost resumes what stopHost stopped in the order least favourable
// to fencing: the writers first, which then act on the term they believed
// in before the pause; once one has recorded a write it invoked after the
// resume (or after writerHeadStart) the supervisor, which stops a writer
// whose lease is over, then the agent.
func (n *Node) continueHost(history string) error {
	from, resumed := fileSize(history), time.Now().UnixNano()
	for _, pgid := range n.pausedGroup {
		_ = procgroup.Signal(pgid, syscall.SIGCONT)
	}
	if len(n.pausedGroup) > 0 {
		deadline := time.Now().Add(writerHeadStart)
		for !wroteSince(history, from, resumed) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	n.pausedGroup = nil
	if err := n.run.Signal(syscall.SIGCONT); err != nil {
		return err
	}
	return n.agent.Signal(syscall.SIGCONT)
}

// writerHeadStart bounds how long a resumed host's writers run before its
// supervisor and agent are resumed (well within check.DefaultResumeGrace,
// which excuses their writes for I3).
const writerHeadStart = 300 * time.Millisecond

// wroteSince reports whether the history, from byte offset from on, holds
// a write invoked at or after t.
func wroteSince(history string, from, t int64) bool {
	b, err := os.ReadFile(history)
	if err != nil || int64(len(b)) <= from {
		return false
	}
	for _, line := range bytes.Split(b[max(from, 0):], []byte("\n")) {
		var op check.Op
		if json.Unmarshal(line, &op) == nil && op.Op == check.OpWrite && op.Invoke >= t {
			return true
		}
	}
	return false
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return -1
	}
	return fi.Size()
}
