package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// partitionRecorder is a member's command: it appends "start NANOS NODE
// PARTITIONS" when started and "end NANOS NODE PARTITIONS" when stopped.
const partitionRecorder = `echo "start $(date +%s%N) $NODE $TENURE_PARTITIONS" >> "$PART_LOG"
trap 'echo "end $(date +%s%N) $NODE $TENURE_PARTITIONS" >> "$PART_LOG"; kill $! 2>/dev/null; exit 0' TERM
sleep 600 & wait`

// partitionSpan is one run of a member's command with one partition.
type partitionSpan struct {
	node       string
	part       string
	token      string
	start, end int64
}

func readPartitionLog(t *testing.T, path string) []partitionSpan {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	open := map[string]*partitionSpan{} // node/partition → running span
	var spans []partitionSpan
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 {
			t.Fatalf("bad line %q", sc.Text())
		}
		var at int64
		fmt.Sscan(fields[1], &at)
		node := fields[2]
		var pairs []string
		if len(fields) > 3 {
			pairs = strings.Split(fields[3], ",")
		}
		for _, pt := range pairs {
			part, token, _ := strings.Cut(pt, ":")
			k := node + "/" + part
			if fields[0] == "start" {
				open[k] = &partitionSpan{node: node, part: part, token: token, start: at}
			} else if s := open[k]; s != nil {
				s.end = at
				spans = append(spans, *s)
				delete(open, k)
			}
		}
	}
	for _, s := range open {
		spans = append(spans, *s)
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].start < spans[j].start })
	return spans
}

// TestPartitionsDividedAndMovedWithoutOverlap: members of a six-partition
// group on three agents share the partitions (two each once all three
// run), a member that stops hands its partitions to the others, and no
// partition is ever used by two members' commands at once; `tenure
// partitions` shows the assignment.
func TestPartitionsDividedAndMovedWithoutOverlap(t *testing.T) {
	socks := startAgents(t, 3, nil)
	waitAgreed(t, socks)
	logPath := filepath.Join(t.TempDir(), "parts.log")
	var members []*exec.Cmd
	start := func(i int) *exec.Cmd {
		cmd := exec.Command(binary, "run", "--socket", socks[i], "--grace", "500ms", "--group", "queue", "--partitions", "6",
			"--", "sh", "-c", partitionRecorder)
		cmd.Env = append(os.Environ(), "PART_LOG="+logPath, fmt.Sprintf("NODE=n%d", i+1))
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stopProcess(cmd) })
		members = append(members, cmd)
		return cmd
	}
	// The current assignment, from the running spans.
	current := func() map[string]string {
		owner := map[string]string{}
		for _, s := range readPartitionLog(t, logPath) {
			if s.end == 0 {
				owner[s.part] = s.node
			}
		}
		return owner
	}
	waitShares := func(want map[string]int) {
		t.Helper()
		waitFor(t, 40*time.Second, fmt.Sprintf("shares %v", want), func() error {
			count := map[string]int{}
			owner := current()
			for _, n := range owner {
				count[n]++
			}
			if len(owner) != 6 || fmt.Sprint(count) != fmt.Sprint(want) {
				return fmt.Errorf("assignment %v", owner)
			}
			return nil
		})
	}
	start(0)
	waitShares(map[string]int{"n1": 6})
	start(1)
	waitShares(map[string]int{"n1": 3, "n2": 3})
	start(2)
	waitShares(map[string]int{"n1": 2, "n2": 2, "n3": 2})
	out, _, code := tenure(t, "partitions", "--socket", socks[0], "queue")
	if code != 0 || strings.Count(out, "\n") != 7 {
		t.Fatalf("tenure partitions (exit %d):\n%s", code, out)
	}
	_ = members[0].Process.Signal(syscall.SIGTERM)
	_ = members[0].Wait()
	waitShares(map[string]int{"n2": 3, "n3": 3})

	byPart := map[string][]partitionSpan{}
	for _, s := range readPartitionLog(t, logPath) {
		byPart[s.part] = append(byPart[s.part], s)
	}
	for part, spans := range byPart {
		for i := 1; i < len(spans); i++ {
			a, b := spans[i-1], spans[i]
			if a.end == 0 || b.start < a.end {
				t.Fatalf("partition %s used at once by %+v and %+v", part, a, b)
			}
			var ta, tb uint64
			fmt.Sscan(a.token, &ta)
			fmt.Sscan(b.token, &tb)
			if tb < ta || tb == ta && b.node != a.node {
				t.Fatalf("partition %s token went from %d (%s) to %d (%s)", part, ta, a.node, tb, b.node)
			}
		}
	}
}
