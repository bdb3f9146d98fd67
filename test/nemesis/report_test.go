//go:build nemesis

package nemesis

import (
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/test/nemesis/check"
)

// TestHandOverTallyAligns: the tally's counts stand in one column, however
// long an act's label grows.
func TestHandOverTallyAligns(t *testing.T) {
	var b strings.Builder
	writeHandOvers(&b, []check.HandOver{
		{Act: "stop", From: "h5", To: "h4", Gap: 15 * time.Millisecond},
		{Act: "tenure transfer h3", From: "h5", To: "h5", Gap: 3 * time.Second, Faulted: true, Refused: true},
	})
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("tally:\n%s", b.String())
	}
	col := func(l string) int { return strings.Index(l, "  1  median") }
	if c := col(lines[1]); c < 0 || c != col(lines[2]) {
		t.Fatalf("the counts are not in one column:\n%s", b.String())
	}
}
