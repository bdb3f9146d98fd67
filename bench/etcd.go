package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// etcdCluster is a 3-member etcd cluster on 127.0.0.1, one child process
// per member.
type etcdCluster struct {
	members   []*proc
	endpoints []string // client URLs, by member
}

// startEtcd starts the members and waits until each serves.
func startEtcd(ctx context.Context, self, dir string) (*etcdCluster, error) {
	pp, err := newPorts(8)
	if err != nil {
		return nil, err
	}
	var peers, clients, initial []string
	for i := 1; i <= 3; i++ {
		pport, err := pp.take()
		if err != nil {
			return nil, err
		}
		cport, err := pp.take()
		if err != nil {
			return nil, err
		}
		peers = append(peers, fmt.Sprintf("http://127.0.0.1:%d", pport))
		clients = append(clients, fmt.Sprintf("http://127.0.0.1:%d", cport))
		initial = append(initial, fmt.Sprintf("m%d=%s", i, peers[i-1]))
	}
	c := &etcdCluster{endpoints: clients}
	for i := 1; i <= 3; i++ {
		name := fmt.Sprintf("m%d", i)
		p, err := startProc(name, filepath.Join(dir, name+".log"), true, self, "child", "etcd-member",
			"--name", name, "--dir", filepath.Join(dir, name), "--peer-url", peers[i-1],
			"--client-url", clients[i-1], "--initial-cluster", strings.Join(initial, ","))
		if err != nil {
			c.stop()
			return nil, err
		}
		c.members = append(c.members, p)
	}
	for _, m := range c.members {
		if _, err := waitLine(ctx, m, 0, "ready", time.Minute); err != nil {
			c.stop()
			return nil, fmt.Errorf("etcd member %s (log in %s): %w", m.name, dir, err)
		}
	}
	return c, nil
}

// stop stops the members (SIGTERM, then SIGKILL after 5 s).
func (c *etcdCluster) stop() {
	for _, m := range c.members {
		m.stop(syscall.SIGTERM, 5*time.Second)
	}
}

// event is one line an etcd child printed: "EVENT UNIXNANO [ARG]".
type event struct {
	name string
	at   time.Time
	arg  string
}

func parseEvent(line string) (event, bool) {
	f := strings.Fields(line)
	if len(f) < 2 {
		return event{}, false
	}
	ns, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return event{}, false
	}
	e := event{name: f[0], at: time.Unix(0, ns)}
	if len(f) > 2 {
		e.arg = f[2]
	}
	return e, true
}

// events parses the event lines p printed from line from on.
func events(p *proc, from int) []event {
	var out []event
	for _, l := range p.linesSince(from) {
		if e, ok := parseEvent(l.text); ok {
			out = append(out, e)
		}
	}
	return out
}

// waitLine waits until p prints an event named name (from line from on).
func waitLine(ctx context.Context, p *proc, from int, name string, timeout time.Duration) (event, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, e := range events(p, from) {
			if e.name == name {
				return e, nil
			}
		}
		if !p.alive() {
			return event{}, fmt.Errorf("%s exited before it printed %q", p.name, name)
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return event{}, err
		}
	}
	return event{}, fmt.Errorf("%s printed no %q within %v", p.name, name, timeout)
}

// etcdCandidates is a set of candidate processes campaigning in one
// election, candidate i talking to member i mod 3.
type etcdCandidates struct {
	ps      []*proc
	started time.Time
}

// buildCandidate builds cmd/etcd-candidate into dir and returns its path.
func buildCandidate(ctx context.Context, dir string) (string, error) {
	bin := filepath.Join(dir, "etcd-candidate")
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/etcd-candidate").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build ./cmd/etcd-candidate: %w\n%s", err, out)
	}
	return bin, nil
}

// startCandidates starts n candidates (the program bin) with sessions of
// ttl under a fresh election prefix.
func startCandidates(bin, dir string, c *etcdCluster, n int, ttl time.Duration, prefix string) (*etcdCandidates, error) {
	cs := &etcdCandidates{started: time.Now()}
	for i := 1; i <= n; i++ {
		name := fmt.Sprintf("e%03d", i)
		p, err := startProc(name, filepath.Join(dir, name+".log"), true, bin,
			"--name", name, "--endpoint", c.endpoints[(i-1)%len(c.endpoints)],
			"--ttl", fmt.Sprint(int(ttl.Seconds())), "--prefix", prefix)
		if err != nil {
			cs.stop()
			return nil, err
		}
		cs.ps = append(cs.ps, p)
	}
	return cs, nil
}

// stop stops the candidates gracefully (resign and revoke), then kills
// what is left.
func (cs *etcdCandidates) stop() {
	for _, p := range cs.ps {
		if p.alive() {
			p.signal(syscall.SIGTERM)
		}
	}
	for _, p := range cs.ps {
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			p.signal(syscall.SIGKILL)
			<-p.exited
		}
	}
}

// byName returns the candidate named name, or nil.
func (cs *etcdCandidates) byName(name string) *proc {
	for _, p := range cs.ps {
		if p.name == name {
			return p
		}
	}
	return nil
}

// live lists the candidates not stopped by the suite.
func (cs *etcdCandidates) live() []*proc {
	var out []*proc
	for _, p := range cs.ps {
		if !p.killed && p.alive() {
			out = append(out, p)
		}
	}
	return out
}

// waitAgree waits until every live candidate's latest observed leader is
// the same one, other than not, and returns it and the instant the last
// of them observed it.
func (cs *etcdCandidates) waitAgree(ctx context.Context, not string, timeout time.Duration) (string, time.Time, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		leader, at, ok := "", time.Time{}, true
		for _, p := range cs.live() {
			var last event
			for _, e := range events(p, 0) {
				if e.name == "leader" {
					last = e
				}
			}
			if last.arg == "" || last.arg == not || (leader != "" && last.arg != leader) {
				ok = false
				break
			}
			leader = last.arg
			if last.at.After(at) {
				at = last.at
			}
		}
		if ok && leader != "" {
			return leader, at, nil
		}
		for _, p := range cs.ps {
			if !p.killed && !p.alive() {
				return "", time.Time{}, fmt.Errorf("etcd candidate %s exited by itself (see its log)", p.name)
			}
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return "", time.Time{}, err
		}
	}
	return "", time.Time{}, fmt.Errorf("etcd candidates did not agree on a leader within %v", timeout)
}

// waitElected waits until a live candidate other than not prints
// "elected" after since.
func (cs *etcdCandidates) waitElected(ctx context.Context, not string, since time.Time, timeout time.Duration) (string, time.Time, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, p := range cs.live() {
			if p.name == not {
				continue
			}
			for _, e := range events(p, 0) {
				if e.name == "elected" && e.at.After(since) {
					return p.name, e.at, nil
				}
			}
		}
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return "", time.Time{}, err
		}
	}
	return "", time.Time{}, fmt.Errorf("no etcd candidate but %s was elected within %v", not, timeout)
}

// lastKeepalive is the last keepalive answer p reported before at.
func lastKeepalive(p *proc, at time.Time) (time.Time, error) {
	var last time.Time
	for _, e := range events(p, 0) {
		if e.name == "ka" && e.at.Before(at) {
			last = e.at
		}
	}
	if last.IsZero() {
		return time.Time{}, errors.New("no keepalive answer recorded")
	}
	return last, nil
}
