package gossip

import (
	"os"
	"testing"
	"time"
)

// TestMeasureTiming measures failure detection and reconnection on 3
// loopback nodes for LocalTiming and LANTiming. It takes minutes, so it runs
// only with TENURE_MEASURE=1:
//
//	TENURE_MEASURE=1 go test -run MeasureTiming -v ./gossip/
func TestMeasureTiming(t *testing.T) {
	if os.Getenv("TENURE_MEASURE") == "" {
		t.Skip("set TENURE_MEASURE=1 to measure gossip timing")
	}
	profiles := []struct {
		name   string
		timing Timing
		rounds int
	}{
		{"local", LocalTiming(), 10},
		{"lan", LANTiming(), 2},
	}
	for _, p := range profiles {
		t.Run(p.name, func(t *testing.T) {
			for range p.rounds {
				detect, reconnect := measureOnce(t, p.timing)
				t.Logf("%s: failure seen by both others after %v (bound %v); restarted node alive everywhere after %v",
					p.name, detect.Round(time.Millisecond), p.timing.FailureDetectionBound(3), reconnect.Round(time.Millisecond))
			}
		})
	}
}

func measureOnce(t *testing.T, timing Timing) (detect, reconnect time.Duration) {
	t.Helper()
	nodes := startCluster(t, 3, func(_ int, c *Config) { c.Timing = timing })
	start := time.Now()
	nodes[2].Shutdown()
	for _, o := range nodes[:2] {
		waitStatus(t, time.Minute, o, nodes[2:], StatusFailed)
	}
	detect = time.Since(start)
	start = time.Now()
	back := restart(t, nodes[2])
	all := []*node{nodes[0], nodes[1], back}
	for _, nd := range all {
		waitStatus(t, 5*time.Minute, nd, all, StatusAlive)
	}
	reconnect = time.Since(start)
	for _, nd := range all {
		nd.Shutdown()
	}
	return detect, reconnect
}
