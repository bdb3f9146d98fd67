//go:build nemesis

package nemesis

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// lateRequestsLine marks the agents' log line about peer requests that
// came after their callers had given up (gossip's peer transport logs
// them at most once per 30 s with their count, and the rest when it
// closes).
const lateRequestsLine = "came after their callers had given up"

// countLateRequests sums the counts of the agents' lines about late peer
// requests in the agent.log of every node in the run directory dir. An
// agent killed loses the count of its last 30 s, so it is a lower bound.
func countLateRequests(dir string) (int, error) {
	logs, err := filepath.Glob(filepath.Join(dir, "*", "agent.log"))
	if err != nil {
		return 0, fmt.Errorf("nemesis: late requests: %w", err)
	}
	total := 0
	for _, path := range logs {
		n, err := lateRequestsIn(path)
		if err != nil {
			return total, err
		}
		total += n
	}
	return total, nil
}

// lateRequestsIn sums the count= of the late-request lines in one log.
func lateRequestsIn(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("nemesis: late requests: %w", err)
	}
	defer f.Close()
	total := 0
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.Contains(line, lateRequestsLine) {
			continue
		}
		_, rest, ok := strings.Cut(line, " count=")
		if !ok {
			return total, fmt.Errorf("nemesis: late requests: no count in %s: %q", path, line)
		}
		digits, _, _ := strings.Cut(rest, " ")
		n, err := strconv.Atoi(digits)
		if err != nil {
			return total, fmt.Errorf("nemesis: late requests: count in %s: %w", path, err)
		}
		total += n
	}
	if err := sc.Err(); err != nil {
		return total, fmt.Errorf("nemesis: late requests: read %s: %w", path, err)
	}
	return total, nil
}
