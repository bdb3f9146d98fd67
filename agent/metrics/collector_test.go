package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tenurehq/tenure/rpc"
)

// source is a Source with a fixed status.
type source struct{ st rpc.Status }

func (s source) Status() rpc.Status        { return s.st }
func (source) Members() []rpc.Member       { return nil }
func (source) Counters() map[string]uint64 { return nil }
func (source) Done() <-chan struct{}       { return nil }

// TestStorageFailingGauge: tenure_storage_failing is 1 exactly while the
// status reports a failed write to the data dir, so an alert can fire on
// a node that stopped being eligible for a full disk.
func TestStorageFailingGauge(t *testing.T) {
	for _, c := range []struct {
		storage string
		want    float64
	}{{"", 0}, {"persist epoch 7: no space left on device", 1}} {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collector{source{rpc.Status{State: "follower", Storage: c.storage}}})
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
