package agent

import (
	"fmt"
	"time"
)

// A write to the data dir that fails (a full or failing disk) does not stop
// the agent. The node stops being eligible to lead: a leader resigns as a
// drained one does, once the driver has asked its natural successor
// (takeDiskStepDown), a candidate stops, and the machine neither campaigns
// nor answers ELECTIONs, so no round uses an epoch that may not be on disk
// (I2). A vote that needs a write is refused (storage-error), as it always
// was. Otherwise the node goes on: it follows the leader, answers the
// socket's queries and gossip, and advertises the failure (storageTag), so
// status and members say why it does not lead. Every storageRetryInterval
// it writes the epoch file again and a probe file (retryStorage); once
// both succeed it is eligible again as configured (unless drained).
// Before, the agent stopped at the next write, which every agent makes at
// every new term in the cluster: under a service manager it restarted and
// stopped again at each term change, and the applications on the host
// lost the socket each time.

// diskHealth is what a core knows of its data dir's writes.
type diskHealth struct {
	err   error        // the last write that failed, nil while writes succeed
	retry time.Time    // when the next write is tried
	probe func() error // how (coreStores.probe)
	// stepDown: writes failed while this node led, and the driver has yet
	// to ask the natural successor before the leader steps down
	// (takeDiskStepDown).
	stepDown bool
}

// storageRetryInterval is how often a node whose writes failed tries again.
const storageRetryInterval = 5 * time.Second

// storageFailed records a failed write to the data dir. The first failure
// makes the node ineligible until a retry succeeds (retryStorage).
func (c *core) storageFailed(now time.Time, err error) {
	first := c.disk.err == nil
	c.disk.err = err
	if !first {
		return
	}
	c.disk.retry = now.Add(storageRetryInterval)
	c.count("storage.failed")
	c.log.Error("cannot write the data dir: this node does not lead or campaign until a write succeeds; it still follows and answers queries",
		"err", err, "retry_every", storageRetryInterval)
	if c.leading() {
		c.disk.stepDown = true // after the driver asked the successor (takeDiskStepDown)
		return
	}
	c.m.SetEligible(now, false)
}

// takeDiskStepDown reports, once, that this leader's data dir failed: the
// driver asks the natural successor whether it can take the term, passing
// over one that cannot (Agent.askSuccessor, as for a drain), then calls
// stepDownForDisk. Stepping down at once named a successor nobody had
// asked: in 9 of 2,000 random schedules it could not take the term (down
// or frozen, cut off from the voters, without a roster, or with a failed
// disk of its own), and the cluster had no leader for the transfer window,
// then elected a node nobody named. Meanwhile the leader keeps its term:
// its lease needs no new epoch, and no round may start while the disk
// fails (process).
func (c *core) takeDiskStepDown() bool {
	ok := c.disk.stepDown
	c.disk.stepDown = false
	return ok
}

// stepDownForDisk makes this node ineligible while its data dir cannot be
// written, as storageFailed does for a node that does not lead: a leader
// steps down naming its natural successor. It does nothing once a write
// succeeded again.
func (c *core) stepDownForDisk(now time.Time) {
	if c.disk.err == nil {
		return
	}
	c.m.SetEligible(now, false)
	c.process(now)
}

// retryStorage writes the epoch file again, and a probe file, once per
// storageRetryInterval while writes fail; when both succeed the node is
// eligible again as configured. The probe is written even when the epoch
// was on disk already (so the epoch write stores nothing): the write that
// failed may have been the voter file's, and before, a voter whose grants
// could not be stored was declared writable again every interval and
// failed at its next grant.
func (c *core) retryStorage(now time.Time) {
	if c.disk.err == nil || now.Before(c.disk.retry) {
		return
	}
	c.disk.retry = now.Add(storageRetryInterval)
	epoch := c.m.Status().Epoch
	if err := c.epochs.Raise(epoch); err != nil {
		c.disk.err = fmt.Errorf("persist epoch %d: %w", epoch, err)
		return
	}
	if c.disk.probe != nil {
		if err := c.disk.probe(); err != nil {
			c.disk.err = fmt.Errorf("probe the data dir: %w", err)
			return
		}
	}
	c.log.Info("the data dir can be written again", "epoch", epoch, "eligible", c.cfg.Eligible)
	c.disk.err = nil
	c.m.SetEligible(now, c.cfg.Eligible)
}

// storageFailure is the last failed write to the data dir, nil while writes
// succeed.
func (c *core) storageFailure() error { return c.disk.err }
