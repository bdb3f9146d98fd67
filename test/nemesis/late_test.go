//go:build nemesis

package nemesis

import (
	"os"
	"path/filepath"
	"testing"
)

// TestLateRequestsAreCounted: the counts of the agents' late-request
// lines are summed over every node's log, other lines ignored.
func TestLateRequestsAreCounted(t *testing.T) {
	dir := t.TempDir()
	logs := map[string]string{
		"h1": `time=2026-12-05T07:44:39.939Z level=INFO msg="gossip: peer requests that came after their callers had given up (held by a cut link, or a stalled host) were answered with an error, not handled" node=h1 count=1 total=1 interval=30s late=1 last_remote=10.215.0.4:52054
time=2026-12-05T07:45:09.939Z level=INFO msg="gossip: peer requests that came after their callers had given up (held by a cut link, or a stalled host) were answered with an error, not handled" node=h1 count=12 total=13 interval=30s late=12 last_remote=10.215.0.5:1
time=2026-12-05T07:45:10.000Z level=INFO msg="leader changed" node=h1 leader=h5 epoch=3
`,
		"h2": `time=2026-12-05T07:44:39.939Z level=INFO msg="gossip: peer requests that came after their callers had given up (held by a cut link, or a stalled host) were answered with an error, not handled" node=h2 count=4 total=4 interval=30s late=4
`,
		"h3": "",
	}
	for node, text := range logs {
		if err := os.MkdirAll(filepath.Join(dir, node), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, node, "agent.log"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := countLateRequests(dir); err != nil || n != 17 {
		t.Fatalf("counted %d (%v), want 17", n, err)
	}
}
