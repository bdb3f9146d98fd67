package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"
)

// Results is everything one run of the suite measured; `compare report`
// turns one or more of these files into tables and a chart.
type Results struct {
	Started time.Time `json:"started"`
	Seconds float64   `json:"seconds"` // how long the run took
	Machine string    `json:"machine"`
	Commit  string    `json:"commit"`
	Command string    `json:"command"`
	Timing  string    `json:"timing"`
	// EtcdStart is how long the 3-member etcd cluster took to serve; the
	// etcd fleets' time to agree starts after it, from the candidates'
	// start.
	EtcdStart float64         `json:"etcd_start_s"`
	Crash     []FailoverTrial `json:"crash,omitempty"`
	Graceful  []FailoverTrial `json:"graceful,omitempty"`
	Queries   []QueryResult   `json:"queries,omitempty"`
	Fleets    []FleetResult   `json:"fleets,omitempty"`
}

// FailoverTrial is one crash (SIGKILL) or graceful (SIGTERM) stop of the
// leader, from the signal until another node leads.
type FailoverTrial struct {
	System    string   `json:"system"` // tenure or etcd
	TTL       float64  `json:"ttl_s"`
	Trial     int      `json:"trial"`
	Failover  float64  `json:"failover_s"`
	Floor     float64  `json:"floor_s,omitempty"` // crash: until the dead leader's last lease can end
	Agree     float64  `json:"agree_s,omitempty"` // tenure: until every agent names the new leader
	OldLeader string   `json:"old_leader"`
	NewLeader string   `json:"new_leader"`
	Epoch     uint64   `json:"epoch,omitempty"`
	Traffic   *Traffic `json:"traffic,omitempty"` // tenure: peer messages from the signal to agreement
	Load      string   `json:"load"`
	Error     string   `json:"error,omitempty"` // the trial measured nothing
}

// QueryResult is a closed loop of clients asking who leads.
type QueryResult struct {
	System  string  `json:"system"`
	Clients int     `json:"clients"`
	Seconds float64 `json:"seconds"`
	Queries int     `json:"queries"`
	QPS     float64 `json:"qps"`
	P50     float64 `json:"p50_us"`
	P99     float64 `json:"p99_us"`
	Errors  int     `json:"errors"`
}

// FleetResult is one fleet of n agents (tenure) or n candidates on a
// 3-member cluster (etcd): the time to agree, the idle cost, and a crash
// failover with the peer messages it took.
type FleetResult struct {
	System   string    `json:"system"`
	N        int       `json:"n"`
	Voters   int       `json:"voters,omitempty"`
	TTL      float64   `json:"ttl_s"`
	Agree    float64   `json:"agree_s"` // -1: no agreement within the wait
	Wait     float64   `json:"wait_s"`
	Leader   string    `json:"leader,omitempty"`
	Epoch    uint64    `json:"epoch,omitempty"`
	Idle     IdleCost  `json:"idle"`              // per agent or candidate
	Members  *IdleCost `json:"members,omitempty"` // etcd: the 3 members
	Failover float64   `json:"failover_s"`        // -1: not measured or none
	Traffic  *Traffic  `json:"traffic,omitempty"`
	Load     [2]string `json:"load"`
	Note     string    `json:"note,omitempty"`
}

// problems lists what measured nothing: failed trials, query runs without
// an answer, fleets that did not agree or fail over.
func (r *Results) problems() error {
	var errs []error
	for _, t := range append(append([]FailoverTrial(nil), r.Crash...), r.Graceful...) {
		if t.Error != "" {
			errs = append(errs, fmt.Errorf("%s trial %d at TTL %.0f s: %s", t.System, t.Trial, t.TTL, t.Error))
		}
	}
	for _, q := range r.Queries {
		if q.Queries == 0 {
			errs = append(errs, fmt.Errorf("%s queries with %d clients: no answer", q.System, q.Clients))
		}
	}
	for _, f := range r.Fleets {
		if f.Agree < 0 || f.Failover < 0 {
			errs = append(errs, fmt.Errorf("%s fleet of %d: %s", f.System, f.N, f.Note))
		}
	}
	return errors.Join(errs...)
}

// save writes r to path as indented JSON.
func (r *Results) save(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("save results: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("save results: %w", err)
	}
	return nil
}

// loadResults reads results files and merges them in order: the sections a
// later file has replace those of earlier ones, so a late run of the big
// fleets can be added to an earlier run of the rest.
func loadResults(paths []string) (*Results, error) {
	var out Results
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("load results: %w", err)
		}
		var r Results
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("load results %s: %w", p, err)
		}
		if out.Started.IsZero() {
			out = r
			continue
		}
		if len(r.Crash) > 0 {
			out.Crash = r.Crash
		}
		if len(r.Graceful) > 0 {
			out.Graceful = r.Graceful
		}
		if len(r.Queries) > 0 {
			out.Queries = r.Queries
		}
		out.Fleets = mergeFleets(out.Fleets, r.Fleets)
		out.Seconds += r.Seconds
	}
	return &out, nil
}

// mergeFleets replaces the fleets of old with those of add of the same
// system and size, and appends the rest.
func mergeFleets(old, add []FleetResult) []FleetResult {
	out := append([]FleetResult(nil), old...)
	for _, a := range add {
		replaced := false
		for i := range out {
			if out[i].System == a.System && out[i].N == a.N {
				out[i], replaced = a, true
			}
		}
		if !replaced {
			out = append(out, a)
		}
	}
	return out
}
