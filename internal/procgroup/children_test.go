//go:build linux

package procgroup

import (
	"os/exec"
	"slices"
	"syscall"
	"testing"
	"time"
)

// TestChildrenListsLiveChildren: a shell's two background children are
// listed; once they are killed, none is.
func TestChildrenListsLiveChildren(t *testing.T) {
	sh := exec.Command("sh", "-c", "sleep 30 & sleep 30 & wait")
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sh.Process.Kill(); _ = sh.Wait() }()
	var kids []int
	for deadline := time.Now().Add(5 * time.Second); len(kids) != 2; time.Sleep(10 * time.Millisecond) {
		if kids = Children(sh.Process.Pid); time.Now().After(deadline) {
			t.Fatalf("children of the shell: %v, want two", kids)
		}
	}
	if slices.Contains(kids, sh.Process.Pid) {
		t.Fatalf("the shell is listed as its own child: %v", kids)
	}
	for _, k := range kids {
		_ = syscall.Kill(k, syscall.SIGKILL)
	}
	for deadline := time.Now().Add(5 * time.Second); len(Children(sh.Process.Pid)) > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("children still listed after they died: %v", Children(sh.Process.Pid))
		}
	}
}
