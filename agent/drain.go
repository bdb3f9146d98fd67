package agent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/tenurehq/tenure/internal/fsutil"
)

// A drained node is not eligible to lead, whatever its --eligible says,
// until the drain is lifted; it still votes. The drain is persisted as
// the file drainedFile in the data dir: its existence is the whole state
// (its content is a note for people and is never read), so there is
// nothing in it to be torn or misread. Drain writes it atomically before
// the node stops being eligible; lifting the drain removes it (and fsyncs
// the directory) before the node is eligible again. The node advertises
// the drain in gossip: the reserved eligibility tag says it may not lead,
// and drainedTag says why.

const (
	// drainedFile, in the data dir, marks the node drained.
	drainedFile = "drained"
	// drainedTag advertises that the node is drained ("1").
	drainedTag = "d"
	// storageTag advertises that the node cannot write its data dir ("1"):
	// it does not lead until a write succeeds (core_storage.go).
	storageTag = "wf"
)

const drainedNote = "this node is drained: it does not lead until `tenure drain --off` (or this file is removed while the agent is stopped)\n"

func (a *Agent) drainedPath() string { return filepath.Join(a.cfg.DataDir, drainedFile) }

// loadDrained reads whether the node was drained before it (re)started.
// Preflight has refused a drained file that is not a regular file.
func (a *Agent) loadDrained() error {
	_, err := os.Lstat(a.drainedPath())
	switch {
	case err == nil:
		a.drained.Store(true)
		a.log.Warn("this node is drained: it does not lead; tenure drain --off lifts it", "file", a.drainedPath())
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("agent: drain state: %w", err)
	}
	return nil
}

// mayLead reports whether this node may lead as configured: eligible, and
// not drained. The core adds whether it can write its data dir.
func (a *Agent) mayLead() bool { return a.cfg.Eligible && !a.drained.Load() }

// eligible reports whether this node may lead now, as gossip advertises it:
// mayLead, and able to write its data dir.
func (a *Agent) eligible() bool { return a.mayLead() && !a.storageDown.Load() }

// Drained reports whether this node is drained (Drain). The socket's
// status op reports it as drained.
func (a *Agent) Drained() bool { return a.drained.Load() }

// Drain makes this node ineligible to lead (drained true) or lifts the drain
// (false), at once and across restarts. A leader that is drained resigns
// through the same path as Resign: it asks its natural successor first
// (askSuccessor), stops leading now, and releases its lease once the local
// work of its term has stopped. A node started with
// --eligible=false stays ineligible when its drain is lifted.
func (a *Agent) Drain(ctx context.Context, drained bool) error {
	if drained {
		if err := a.askSuccessor(ctx); err != nil {
			return err
		}
	}
	var err error
	if derr := a.do(ctx, func() { err = a.setDrained(drained) }); derr != nil {
		return derr
	}
	return err
}

// setDrained persists the drain state, then tells the election and gossip.
// It runs on the driver.
func (a *Agent) setDrained(drained bool) error {
	if err := a.storeDrained(drained); err != nil {
		return fmt.Errorf("agent: drain: %w", err)
	}
	if a.drained.Swap(drained) != drained {
		a.log.Info("drain changed", "drained", drained, "eligible", a.cfg.Eligible && !drained)
	}
	a.core.setEligible(a.cfg.Clock.Now(), a.mayLead())
	a.flush()
	a.publishTags()
	return nil
}

// storeDrained writes or removes the drained file, durably.
func (a *Agent) storeDrained(drained bool) error {
	if drained {
		return fsutil.WriteFileAtomic(a.drainedPath(), []byte(drainedNote), 0o600)
	}
	return fsutil.RemoveFile(a.drainedPath())
}

// drainTags adds the drained tag to tags when this node is drained.
func (a *Agent) drainTags(tags map[string]string) {
	if a.drained.Load() {
		tags[drainedTag] = "1"
	}
}
