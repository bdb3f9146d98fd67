//go:build scale

package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testlog"
)

var scaleProfile = flag.String("scale.profile", "", "write CPU profiles of a voter, an observer and the leader to this directory: during the start (from 5 s, for 20 s) and the idle window")

// counterSet is every agent's counters at one instant, by agent name.
type counterSet map[string]map[string]uint64

// fetchCounters reads the counters of every live agent.
func fetchCounters(agents []*scaleAgent) counterSet {
	out := counterSet{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	cl := http.Client{Timeout: 5 * time.Second}
	for _, a := range agents {
		if a.dead || a.debug == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := cl.Get("http://" + a.debug + "/debug/tenure/counters")
			if err != nil {
				return
			}
			defer resp.Body.Close()
			var m map[string]uint64
			if json.NewDecoder(resp.Body).Decode(&m) == nil {
				mu.Lock()
				out[a.name] = m
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return out
}

// rates is, per counter, the mean and the maximum per agent per second
// between two counter sets, for the agents in group.
type rate struct {
	Mean, Max float64
	MaxAgent  string
}

func counterRates(before, after counterSet, secs float64, group func(string) bool) map[string]rate {
	out := map[string]rate{}
	n := 0
	for name, a := range after {
		if !group(name) {
			continue
		}
		n++
		for k, v := range a {
			d := float64(v-before[name][k]) / secs
			r := out[k]
			r.Mean += d
			if d > r.Max {
				r.Max, r.MaxAgent = d, name
			}
			out[k] = r
		}
	}
	for k, r := range out {
		r.Mean /= float64(max(n, 1))
		out[k] = r
	}
	return out
}

// logRates logs the counters that moved, per agent per second.
func logRates(t *testing.T, what, unit string, rs map[string]rate) {
	var keys []string
	for k, r := range rs {
		if r.Max > 0 {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		r := rs[k]
		fmt.Fprintf(&b, "\n    %-28s mean %8.2f%s  max %8.2f%s (%s)", k, r.Mean, unit, r.Max, unit, r.MaxAgent)
	}
	t.Logf("%s, per agent:%s", what, b.String())
}

// profile writes a CPU profile of agent a over d to dir/label-NAME.pprof,
// in the background.
func profile(t *testing.T, wg *sync.WaitGroup, a *scaleAgent, d time.Duration, label string) {
	if *scaleProfile == "" || a == nil || a.debug == "" {
		return
	}
	os.MkdirAll(*scaleProfile, 0o755)
	wg.Add(1)
	go func() {
		defer wg.Done()
		cl := http.Client{Timeout: d + 10*time.Second}
		resp, err := cl.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", a.debug, int(d.Seconds())))
		if err != nil {
			t.Logf("profile %s: %v", a.name, err)
			return
		}
		defer resp.Body.Close()
		path := filepath.Join(*scaleProfile, label+"-"+a.name+".pprof")
		f, err := os.Create(path)
		if err != nil {
			t.Logf("profile %s: %v", a.name, err)
			return
		}
		defer f.Close()
		io.Copy(f, resp.Body)
	}()
}

// pathSteps are the log lines of an agent's way to its first term: each
// step is the first line with its message. What the step is called in the
// run's output comes first.
var pathSteps = []struct{ name, msg string }{
	{"started", `msg="agent started"`},
	{"joined", `msg="gossip: joined the cluster"`},
	{"roster", `msg="learned the voter roster"`},
	{"led", `msg="leader changed"`},
}

// logPaths logs, in seconds from the first launch, how the highest agent
// and the agreed leader got there: when the run launched the process,
// and when its log says it started, joined, learned the roster and first
// named a leader (that leader and epoch follow). A slow start shows here
// whether the launch, the process start, the join or the election took
// the time.
func logPaths(t *testing.T, start time.Time, agents []*scaleAgent, leader string) {
	for _, a := range agents {
		if a != agents[len(agents)-1] && a.name != leader {
			continue
		}
		steps, err := agentPath(a.logPath(), start)
		if err != nil {
			t.Logf("the path of %s: %v", a.name, err)
			continue
		}
		launched := fmt.Sprintf("launched %.1f", a.launched.Sub(start).Seconds())
		t.Logf("the path of %s (s from the first launch): %s", a.name, strings.Join(append([]string{launched}, steps...), ", "))
	}
}

// agentPath reads an agent's log for pathSteps, in their order; a step
// not logged is left out.
func agentPath(log string, start time.Time) ([]string, error) {
	b, err := os.ReadFile(log)
	if err != nil {
		return nil, err
	}
	found := make([]string, len(pathSteps))
	for line := range strings.Lines(string(b)) {
		for i, st := range pathSteps {
			if found[i] != "" || !strings.Contains(line, st.msg) {
				continue
			}
			ts, _, _ := strings.Cut(strings.TrimPrefix(line, "time="), " ")
			at, err := time.Parse(time.RFC3339Nano, ts)
			if err != nil {
				return nil, fmt.Errorf("%s: time of %q: %w", log, st.name, err)
			}
			found[i] = fmt.Sprintf("%s %.1f", st.name, at.Sub(start).Seconds())
			if st.name == "led" {
				found[i] += " (" + testlog.Field(line, "leader") + " epoch " + testlog.Field(line, "epoch") + ")"
			}
		}
	}
	return slices.DeleteFunc(found, func(s string) bool { return s == "" }), nil
}

// logMarks are log lines worth counting across the fleet after a start:
// what the run's output calls them, and what the line contains.
var logMarks = []struct{ name, msg string }{
	{"suspicions", `has failed, no acks received`},     // memberlist suspected a member
	{"refutations", `msg="Refuting a suspect message`}, // a member refuted one about itself
	{"undelivered", `msg="peer messages to a member are not delivered"`},
	// of which timed out before the request went out, or after
	{"of them connecting", `err="i/o timeout while connecting"`},
	{"waiting for a reply", `err="i/o timeout waiting for the reply"`},
	{"rounds lost", `msg="lease not acquired"`},
}

// logFleetMarks logs how often the agents' logs have each of logMarks so
// far: gossip's failure detector at work (a start that loads the machine
// so much that probes time out costs every agent the suspicion's gossip
// and its refutation), peer messages that did not get through, and lease
// rounds that failed.
func logFleetMarks(t *testing.T, agents []*scaleAgent) {
	counts := make([]int, len(logMarks))
	for _, a := range agents {
		b, err := os.ReadFile(a.logPath())
		if err != nil {
			t.Logf("the log of %s: %v", a.name, err)
			continue
		}
		for line := range strings.Lines(string(b)) {
			for i, m := range logMarks {
				if strings.Contains(line, m.msg) {
					counts[i]++
				}
			}
		}
	}
	var parts []string
	for i, m := range logMarks {
		parts = append(parts, fmt.Sprintf("%s %d", m.name, counts[i]))
	}
	t.Logf("in the agents' logs so far: %s", strings.Join(parts, ", "))
}
