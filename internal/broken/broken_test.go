package broken

import "testing"

// TestNormalBuildIsNeverBroken: without the tenure_broken tag no mode is
// ever on, whatever the environment says.
func TestNormalBuildIsNeverBroken(t *testing.T) {
	if Enabled {
		t.Skip("built with tenure_broken")
	}
	t.Setenv("TENURE_BROKEN", SkipMajority+","+StoreNoFence)
	for _, m := range []string{SkipMajority, RenewPastDeadline, RunKeepsChild, StoreNoFence, NoEpochBump, NoRelease, UndoHandOver} {
		if Is(m) {
			t.Fatalf("%s is on in a normal build", m)
		}
	}
}
