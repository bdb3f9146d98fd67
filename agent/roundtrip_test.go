package agent

import (
	"testing"
	"time"

	"github.com/tenurehq/tenure/bully"
	"github.com/tenurehq/tenure/leasing"
)

// TestRoundTripEstimate: the estimate follows RFC 6298's retransmission
// timeout: three times the first sample, close to a steady round trip,
// at once above one much slower answer, and forgotten roundTripMemory
// after the latest sample.
func TestRoundTripEstimate(t *testing.T) {
	const ms = time.Millisecond
	var r roundTrips
	now := time.Unix(1000, 0)
	if got := r.timeout(now); got != 0 {
		t.Fatalf("no samples: %v, want 0", got)
	}
	r.add(now, 100*ms)
	if got := r.timeout(now); got != 300*ms {
		t.Fatalf("one sample of 100ms: %v, want 300ms", got)
	}
	for range 50 {
		now = now.Add(time.Second)
		r.add(now, 100*ms)
	}
	if got := r.timeout(now); got < 100*ms || got > 110*ms {
		t.Fatalf("steady 100ms: %v, want about 100ms", got)
	}
	now = now.Add(time.Second)
	r.add(now, 1500*ms)
	if got := r.timeout(now); got < 1500*ms {
		t.Fatalf("after an answer that took 1.5s: %v, want at least that", got)
	}
	if got := r.timeout(now.Add(roundTripMemory - ms)); got < 1500*ms {
		t.Fatalf("just within the memory: %v, want it kept", got)
	}
	now = now.Add(roundTripMemory)
	if got := r.timeout(now); got != 0 {
		t.Fatalf("%v after the last sample: %v, want 0 (forgotten)", roundTripMemory, got)
	}
	r.add(now, 10*ms)
	if got := r.timeout(now); got != 30*ms {
		t.Fatalf("first sample after forgetting: %v, want 30ms (the old estimate gone)", got)
	}
}

// TestPeerWait: reach probes and acquire rounds wait the acquire budget, or
// the round-trip estimate when longer, at most the coordinator timeout and
// half of what a renewal interval leaves of the lease's validity.
func TestPeerWait(t *testing.T) {
	const ms = time.Millisecond
	lan := leasing.DefaultTiming().WithTTL(10 * time.Second)  // budget 1 s
	short := leasing.DefaultTiming().WithTTL(2 * time.Second) // budget 200 ms; (1.98 s - 667 ms)/2 = 657 ms
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		name   string
		lease  leasing.Timing
		sample time.Duration // one answered call (estimate: three times it); 0 none
		want   time.Duration
	}{
		{"no estimate", lan, 0, time.Second},
		{"short estimate", lan, 100 * ms, time.Second},
		{"long estimate", lan, 500 * ms, 1500 * ms},
		{"capped by the coordinator timeout", lan, 2 * time.Second, 2 * time.Second},
		{"capped by the lease", short, time.Second, 657 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &core{cfg: coreConfig{Lease: tc.lease, Election: bully.DefaultConfig()}}
			if tc.sample > 0 {
				c.rtt.add(now, tc.sample)
			}
			if got := c.peerWait(now).Round(ms); got != tc.want {
				t.Fatalf("peerWait = %v, want %v", got, tc.want)
			}
		})
	}
}
