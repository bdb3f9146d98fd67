package testwait

import (
	"testing"
	"time"
)

// TestForReturnsOnceTrue: For returns as soon as cond holds.
func TestForReturnsOnceTrue(t *testing.T) {
	n := 0
	For(t, time.Second, "the third poll", func() string {
		if n++; n < 3 {
			return "not yet"
		}
		return ""
	})
	if n != 3 {
		t.Fatalf("polled %d times, want 3", n)
	}
}
