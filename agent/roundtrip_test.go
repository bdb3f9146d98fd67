package agent

import (
	"testing"
	"time"
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
