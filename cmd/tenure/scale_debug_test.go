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
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
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
