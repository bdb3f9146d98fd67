package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tenurehq/tenure/rpc"
)

// source is a Source with a fixed status and counters.
type source struct {
	st       rpc.Status
	counters map[string]uint64
}

func (s source) Status() rpc.Status          { return s.st }
func (source) Members() []rpc.Member         { return nil }
func (s source) Counters() map[string]uint64 { return s.counters }
func (source) Done() <-chan struct{}         { return nil }

// TestPeerCounters: the peer transport's counters land in their families,
// late exchanges apart from connections.
func TestPeerCounters(t *testing.T) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{source{counters: map[string]uint64{
		"peer.dialed": 3, "peer.late": 2, "peer.late_request": 1,
	}}})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "tenure_peer_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			got[mf.GetName()+"/"+m.GetLabel()[0].GetValue()] = m.GetCounter().GetValue()
		}
	}
	want := map[string]float64{
		"tenure_peer_connections_total/dialed": 3,
		"tenure_peer_late_total/response":      2,
		"tenure_peer_late_total/request":       1,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("metrics %v, want only %v", got, want)
	}
}

// TestStorageFailingGauge: tenure_storage_failing is 1 exactly while the
// status reports a failed write to the data dir, so an alert can fire on
// a node that stopped being eligible for a full disk.
func TestStorageFailingGauge(t *testing.T) {
	for _, c := range []struct {
		storage string
		want    float64
	}{{"", 0}, {"persist epoch 7: no space left on device", 1}} {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collector{source{st: rpc.Status{State: "follower", Storage: c.storage}}})
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := -1.0
		for _, mf := range mfs {
			if mf.GetName() == "tenure_storage_failing" {
				got = mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		if got != c.want {
			t.Errorf("storage %q: tenure_storage_failing = %v, want %v", c.storage, got, c.want)
		}
	}
}
