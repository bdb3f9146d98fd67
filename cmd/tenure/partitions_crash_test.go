package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/tenurehq/tenure/agent"
)

// TestGroupMemberStopsWhenItsAgentDies: when a member's agent crashes, its
// command is stopped and not started again with partitions it no longer
// holds.
func TestGroupMemberStopsWhenItsAgentDies(t *testing.T) {
	var agents []*agent.Agent
	socks := startAgentsWith(t, 3, nil, &agents)
	waitAgreed(t, socks)
	logPath := filepath.Join(t.TempDir(), "parts.log")
	cmd := exec.Command(binary, "run", "--socket", socks[0], "--grace", "500ms", "--group", "q", "--partitions", "2",
		"--", "sh", "-c", partitionRecorder)
	cmd.Env = append(os.Environ(), "PART_LOG="+logPath, "NODE=n1")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopProcess(cmd) })
	waitFor(t, 20*time.Second, "n1 running with both partitions", func() error {
		for _, s := range readPartitionLog(t, logPath) {
			if s.end == 0 && s.part == "1" {
				return nil
			}
		}
		return fmt.Errorf("not yet")
	})
	agents[0].Halt()
	crash := time.Now()
	waitFor(t, 10*time.Second, "the command stopped", func() error {
		for _, s := range readPartitionLog(t, logPath) {
			if s.end == 0 {
				return fmt.Errorf("still running: %+v", s)
			}
		}
		return nil
	})
	time.Sleep(5 * time.Second)
	for _, s := range readPartitionLog(t, logPath) {
		if s.start > crash.UnixNano() {
			t.Fatalf("the command was started again after its agent died: %+v", s)
		}
	}
}
