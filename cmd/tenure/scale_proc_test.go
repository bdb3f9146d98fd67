//go:build scale

package main

import (
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat
// (100 on every Linux platform Go supports).
const clockTicks = 100

// idleResult is the cost of the agents over an idle window.
type idleResult struct {
	Seconds     float64 `json:"seconds"`
	CPUMeanPct  float64 `json:"cpu_mean_pct"` // of one core
	CPUMaxPct   float64 `json:"cpu_max_pct"`
	CPUSumPct   float64 `json:"cpu_sum_pct"`
	RSSMeanMiB  float64 `json:"rss_mean_mib"`
	RSSMaxMiB   float64 `json:"rss_max_mib"`
	SocketsMean float64 `json:"sockets_mean"` // open socket file descriptors
	SocketsMax  int     `json:"sockets_max"`
	MaxCPUAgent string  `json:"max_cpu_agent"`
	WakeupsMean float64 `json:"wakeups_mean"` // context switches per second, all threads
}

// measureIdle samples every live agent's CPU time at the start and end of
// the window, and its RSS and open sockets at the end.
func measureIdle(t *testing.T, agents []*scaleAgent, window time.Duration) idleResult {
	before, switches := map[string]uint64{}, map[string]uint64{}
	for _, a := range agents {
		before[a.name], _ = cpuTicks(a.cmd.Process.Pid)
		switches[a.name] = contextSwitches(a.cmd.Process.Pid)
	}
	begin := time.Now()
	time.Sleep(window)
	el := time.Since(begin).Seconds()
	r := idleResult{Seconds: el}
	var live int
	for _, a := range agents {
		pid := a.cmd.Process.Pid
		after, err := cpuTicks(pid)
		if err != nil {
			t.Logf("%s: %v", a.name, err)
			continue
		}
		live++
		r.WakeupsMean += float64(contextSwitches(pid)-switches[a.name]) / el
		pct := float64(after-before[a.name]) / clockTicks / el * 100
		r.CPUSumPct += pct
		if pct > r.CPUMaxPct {
			r.CPUMaxPct, r.MaxCPUAgent = pct, a.name
		}
		rss := rssMiB(pid)
		r.RSSMeanMiB += rss
		r.RSSMaxMiB = max(r.RSSMaxMiB, rss)
		s := sockets(pid)
		r.SocketsMean += float64(s)
		r.SocketsMax = max(r.SocketsMax, s)
	}
	if live > 0 {
		r.CPUMeanPct = r.CPUSumPct / float64(live)
		r.RSSMeanMiB /= float64(live)
		r.SocketsMean /= float64(live)
		r.WakeupsMean /= float64(live)
	}
	t.Logf("idle %.0fs: CPU per agent mean %.2f%% max %.2f%% (%s), all %.0f%%; RSS mean %.1f MiB max %.1f MiB; sockets mean %.1f max %d; context switches %.0f/s (load %s)",
		el, r.CPUMeanPct, r.CPUMaxPct, r.MaxCPUAgent, r.CPUSumPct, r.RSSMeanMiB, r.RSSMaxMiB, r.SocketsMean, r.SocketsMax, r.WakeupsMean, loadAverage())
	return r
}

// cpuTicks is utime + stime of pid, in clock ticks.
func cpuTicks(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: fields count from after it.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad utime or stime", pid)
	}
	return ut + st, nil
}

// rssMiB is VmRSS of pid.
func rssMiB(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// sockets counts pid's open socket descriptors (TCP, UDP and Unix).
func sockets(pid int) int {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink(dir + "/" + e.Name()); err == nil && strings.HasPrefix(l, "socket:") {
			n++
		}
	}
	return n
}

// contextSwitches sums the voluntary and involuntary context switches of
// every thread of pid.
func contextSwitches(pid int) uint64 {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	var n uint64
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, task.Name()))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) == 2 && strings.HasSuffix(f[0], "ctxt_switches:") {
				v, _ := strconv.ParseUint(f[1], 10, 64)
				n += v
			}
		}
	}
	return n
}

// cpuSeconds is the mean CPU time, in seconds, the live agents have used
// since they started.
func cpuSeconds(agents []*scaleAgent) float64 {
	var sum float64
	used := cpuUsed(agents)
	for _, u := range used {
		sum += u.secs
	}
	return sum / float64(max(len(used), 1))
}

// agentCPU is the CPU time, in seconds, one agent has used since it
// started.
type agentCPU struct {
	name string
	secs float64
}

// cpuUsed is the CPU time of each live agent whose /proc entry reads.
func cpuUsed(agents []*scaleAgent) []agentCPU {
	var out []agentCPU
	for _, a := range agents {
		if a.dead {
			continue
		}
		if ticks, err := cpuTicks(a.cmd.Process.Pid); err == nil {
			out = append(out, agentCPU{a.name, float64(ticks) / clockTicks})
		}
	}
	return out
}

// busiest names the k live agents that have used the most CPU since they
// started, with their CPU seconds, busiest first.
func busiest(agents []*scaleAgent, k int) string {
	all := cpuUsed(agents)
	slices.SortFunc(all, func(x, y agentCPU) int { return cmp.Compare(y.secs, x.secs) })
	var b strings.Builder
	for i, u := range all[:min(k, len(all))] {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %.2f s", u.name, u.secs)
	}
	return b.String()
}

// versionCPU is the mean CPU time (user and system, the exec included) of
// `bin --version` over runs starts, taken on the idle machine before the
// fleet starts. A process start is the first cost of every agent, and the
// figure tells runs on a slower day apart from a slower build: the start
// is CPU-bound, so the time to agree moves with it.
func versionCPU(bin string, runs int) (time.Duration, error) {
	var sum time.Duration
	for range runs {
		cmd := exec.Command(bin, "--version")
		if err := cmd.Run(); err != nil {
			return 0, fmt.Errorf("%s --version: %w", bin, err)
		}
		sum += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	return sum / time.Duration(runs), nil
}
