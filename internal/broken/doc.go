// Package broken lets a test build of tenure break its own guarantees on
// purpose, so that the fault-injection harness (test/nemesis) can show
// that its checker catches each violation it claims to check.
//
// In a normal build Is always returns false and the compiler drops the
// code it guards. Only a binary built with the build tag tenure_broken
// reads the environment variable TENURE_BROKEN, a comma-separated list of
// the modes below, once at start. Never ship such a binary.
package broken

// The modes a tenure_broken build understands.
const (
	// SkipMajority: a lease round (acquire or renew) counts as won without
	// a majority of grants, so an isolated leader keeps leading (breaks I1).
	SkipMajority = "skip-majority"
	// RenewPastDeadline: a leader whose lease deadline passed extends it
	// instead of stepping down (breaks I1).
	RenewPastDeadline = "renew-past-deadline"
	// RunKeepsChild: `tenure run` never stops its command when the lease
	// ends or the agent cannot be reached (breaks I3).
	RunKeepsChild = "run-keeps-child"
	// StoreNoFence: the example fenced store accepts every token (breaks I4).
	StoreNoFence = "store-no-fence"
	// NoEpochBump: a node that wins an election campaigns with the highest
	// epoch it knows instead of the next one (breaks I2 where the lease
	// round does not refuse it, as with SkipMajority).
	NoEpochBump = "no-epoch-bump"
	// NoRelease: a leader that steps down (a resign, a drain, a graceful
	// stop) does not release its lease, so the next leader waits for the
	// voters' promises to run out (fails the checker's hand-over check).
	NoRelease = "no-release"
	// UndoHandOver: a node that handed its term over (a resign, a drain, a
	// transfer) claims leadership back from the node after it by
	// preemption once its hold ends (fails the checker's hand-over check:
	// the hand-over is undone).
	UndoHandOver = "undo-hand-over"
)
