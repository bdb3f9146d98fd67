package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestPercentileIsNearestRank(t *testing.T) {
	xs := []float64{1, 2, 3, 4, 5}
	if got := percentile(xs, 0.5); got != 3 {
		t.Errorf("p50 of 1..5 = %v, want 3", got)
	}
	if got := percentile(xs, 0.99); got != 5 {
		t.Errorf("p99 of 1..5 = %v, want 5 (the worst of five)", got)
	}
	if got := percentile([]float64{7}, 0.5); got != 7 {
		t.Errorf("p50 of one = %v, want 7", got)
	}
}

func TestSafetyFloorFromJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal")
	// A lead and an extend; the kill comes after the extend, so the floor
	// follows the extend's deadline, plus the drift margin of the TTL.
	lines := `{"t":1000000000,"node":"n5","event":"start","epoch":0,"until":0}
{"t":2000000000,"node":"n5","event":"lead","epoch":1,"until":3980000000}
{"t":2700000000,"node":"n5","event":"extend","epoch":1,"until":4660000000}
{"t":9000000000,"node":"n5","event":"extend","epoch":1,"until":10000000000}
`
	if err := os.WriteFile(path, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	kill := time.Unix(0, 3000000000)
	floor, err := safetyFloor(path, kill, 2*time.Second, 0.01)
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Unix(0, 4680000000); !floor.Equal(want) {
		t.Errorf("floor = %v, want %v (the extend's until + 1%% of the TTL; the later line is after the kill)", floor.UnixNano(), want.UnixNano())
	}
	if _, err := safetyFloor(path, time.Unix(1, 500), time.Second, 0.01); err == nil {
		t.Error("no lease before the kill: want an error")
	}
}

func TestTrafficCountsRequestsAndReplies(t *testing.T) {
	before := map[string]uint64{"send.election": 1, "send.lease.renew": 10, "send_bytes.lease.renew": 1000}
	after := map[string]uint64{"send.election": 3, "reply.answer": 2, "send.coordinator": 4, "send.lease.renew": 14,
		"reply.lease_reply": 4, "send_bytes.lease.renew": 1400, "send_bytes.coordinator": 400, "gossip.member-failed": 4}
	tr := traffic(before, after)
	if tr.Messages != 2+2+4+4+4 {
		t.Errorf("messages = %d, want 16", tr.Messages)
	}
	if tr.ElectionMessages != 2+2+4 {
		t.Errorf("election messages = %d, want 8", tr.ElectionMessages)
	}
	if tr.RequestBytes != 800 {
		t.Errorf("request bytes = %d, want 800", tr.RequestBytes)
	}
}

func TestParseEvent(t *testing.T) {
	e, ok := parseEvent("leader 1796100288375599686 e002")
	if !ok || e.name != "leader" || e.arg != "e002" || e.at.UnixNano() != 1796100288375599686 {
		t.Errorf("parseEvent = %+v, %v", e, ok)
	}
	if _, ok := parseEvent("{\"level\":\"warn\"}"); ok {
		t.Error("a log line parsed as an event")
	}
}

func TestMergeFleetsReplacesSameSystemAndSize(t *testing.T) {
	old := []FleetResult{{System: "tenure", N: 3, Agree: 1}, {System: "etcd", N: 3, Agree: 2}}
	got := mergeFleets(old, []FleetResult{{System: "tenure", N: 3, Agree: 5}, {System: "tenure", N: 100, Agree: -1}})
	if len(got) != 3 || got[0].Agree != 5 || got[1].Agree != 2 || got[2].N != 100 {
		t.Errorf("merged = %+v", got)
	}
}

func TestReportWritesTablesAndChart(t *testing.T) {
	paths, err := filepath.Glob("results/*.json")
	if err != nil || len(paths) == 0 {
		t.Skip("no results in results/")
	}
	dir := t.TempDir()
	md, png := filepath.Join(dir, "r.md"), filepath.Join(dir, "r.png")
	if err := runReport([]string{"-md", md, "-png", png, paths[0]}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{md, png} {
		if fi, err := os.Stat(p); err != nil || fi.Size() == 0 {
			t.Errorf("%s: not written (%v)", p, err)
		}
	}
}
