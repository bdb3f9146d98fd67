package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tenurehq/tenure/internal/loopports"
)

// proc is one child process of the suite: a tenure agent, an etcd member
// or an etcd candidate. Every child runs in its own process group and gets
// SIGKILL when the suite's process dies (Pdeathsig), so a crashed or
// interrupted run leaves no agent behind.
type proc struct {
	name   string
	cmd    *exec.Cmd
	log    *os.File
	exited chan struct{} // closed when the process has exited
	killed bool          // stopped by the suite (not exited by itself)

	mu    sync.Mutex
	lines []stampedLine // stdout lines, for children that report (etcd candidates)
}

// stampedLine is one line a child printed, with the time it was read.
type stampedLine struct {
	at   time.Time
	text string
}

// startProc starts bin with args; its stderr (and stdout unless
// readStdout) goes to logPath. With readStdout, each stdout line is kept
// for lines().
func startProc(name, logPath string, readStdout bool, bin string, args ...string) (*proc, error) {
	log, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("start %s: log: %w", name, err)
	}
	p := &proc{name: name, log: log, exited: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stderr = log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var out io.ReadCloser
	if readStdout {
		if out, err = p.cmd.StdoutPipe(); err != nil {
			log.Close()
			return nil, fmt.Errorf("start %s: %w", name, err)
		}
	} else {
		p.cmd.Stdout = log
	}
	if err := p.cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	var reading sync.WaitGroup
	if out != nil {
		reading.Add(1)
		go func() {
			defer reading.Done()
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				p.mu.Lock()
				p.lines = append(p.lines, stampedLine{time.Now(), sc.Text()})
				p.mu.Unlock()
			}
		}()
	}
	go func() {
		reading.Wait() // Wait closes the pipe: read it to the end first
		p.cmd.Wait()
		log.Close()
		close(p.exited)
	}()
	return p, nil
}

// pid is the child's process ID.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// linesSince returns a copy of the stdout lines read so far, from line i
// on.
func (p *proc) linesSince(i int) []stampedLine {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i >= len(p.lines) {
		return nil
	}
	return append([]stampedLine(nil), p.lines[i:]...)
}

// alive reports whether the process has not exited.
func (p *proc) alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// signal sends sig to the child's whole process group and returns the
// instant just before it was sent.
func (p *proc) signal(sig syscall.Signal) time.Time {
	p.killed = true
	at := time.Now()
	if err := syscall.Kill(-p.pid(), sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		slog.Warn("signal child", "child", p.name, "signal", sig, "err", err)
	}
	return at
}

// stop sends sig, waits up to grace for the exit, then kills the group.
func (p *proc) stop(sig syscall.Signal, grace time.Duration) {
	if !p.alive() {
		return
	}
	p.signal(sig)
	select {
	case <-p.exited:
	case <-time.After(grace):
		p.signal(syscall.SIGKILL)
		<-p.exited
	}
}

// stopAll kills every process of ps and waits for them.
func stopAll(ps []*proc) {
	for _, p := range ps {
		if p != nil && p.alive() {
			p.signal(syscall.SIGKILL)
		}
	}
	for _, p := range ps {
		if p != nil {
			<-p.exited
		}
	}
}

// procUsage is what /proc says a process has used.
type procUsage struct {
	cpu time.Duration // utime + stime
	rss float64       // VmRSS, MiB
}

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat.
const clockTicks = 100

// readUsage reads pid's CPU time and resident set from /proc.
func readUsage(pid int) (procUsage, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procUsage{}, fmt.Errorf("read usage: %w", err)
	}
	// The command name (field 2) may hold spaces: count from after it.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return procUsage{}, fmt.Errorf("read usage: /proc/%d/stat has %d fields", pid, len(f))
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return procUsage{}, fmt.Errorf("read usage: /proc/%d/stat: %w", pid, err)
	}
	u := procUsage{cpu: time.Duration(ut+st) * time.Second / clockTicks}
	b, err = os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return procUsage{}, fmt.Errorf("read usage: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			u.rss = kb / 1024
		}
	}
	return u, nil
}

// idleCost measures groups of processes over one window: for each group,
// the mean CPU (percent of one core) and the mean and largest RSS at the
// end.
func idleCost(ctx context.Context, window time.Duration, groups ...[]*proc) ([]IdleCost, error) {
	before := make([][]procUsage, len(groups))
	for g, ps := range groups {
		for _, p := range ps {
			u, err := readUsage(p.pid())
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p.name, err)
			}
			before[g] = append(before[g], u)
		}
	}
	begin := time.Now()
	if err := sleep(ctx, window); err != nil {
		return nil, err
	}
	el := time.Since(begin)
	out := make([]IdleCost, len(groups))
	for g, ps := range groups {
		c := IdleCost{Procs: len(ps), Seconds: el.Seconds()}
		for i, p := range ps {
			u, err := readUsage(p.pid())
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p.name, err)
			}
			c.CPUTotalPct += 100 * (u.cpu - before[g][i].cpu).Seconds() / el.Seconds()
			c.RSSTotalMiB += u.rss
			c.RSSMaxMiB = max(c.RSSMaxMiB, u.rss)
		}
		if len(ps) > 0 {
			c.CPUPct = c.CPUTotalPct / float64(len(ps))
			c.RSSMiB = c.RSSTotalMiB / float64(len(ps))
		}
		out[g] = c
	}
	return out, nil
}

// IdleCost is the cost of a set of processes over an idle window.
type IdleCost struct {
	Procs       int     `json:"procs"`
	Seconds     float64 `json:"seconds"`
	CPUPct      float64 `json:"cpu_pct"`       // mean per process, percent of one core
	CPUTotalPct float64 `json:"cpu_total_pct"` // all of them
	RSSMiB      float64 `json:"rss_mib"`       // mean per process
	RSSMaxMiB   float64 `json:"rss_max_mib"`
	RSSTotalMiB float64 `json:"rss_total_mib"`
}

// sleep waits for d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ports hands out ports on 127.0.0.1 below Linux's ephemeral range
// (32768-60999), so that the children's own outgoing connections never
// take a port a child started later wants to listen on.
type ports struct{ next int }

// newPorts picks a random start for a block of count free ports.
func newPorts(count int) (*ports, error) {
	for try := 0; try < 50; try++ {
		base := 10000 + int(time.Now().UnixNano()%int64(32768-10000-count))
		if loopports.Free(base, count) {
			return &ports{next: base}, nil
		}
	}
	return nil, fmt.Errorf("no %d free consecutive ports on 127.0.0.1", count)
}

// take returns the next port, checked free for TCP and UDP.
func (p *ports) take() (int, error) {
	for ; p.next < 32768; p.next++ {
		if loopports.Free(p.next, 1) {
			p.next++
			return p.next - 1, nil
		}
	}
	return 0, errors.New("ports: ran out below 32768")
}

// loadAverage is the first three fields of /proc/loadavg.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
