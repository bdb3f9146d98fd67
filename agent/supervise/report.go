package supervise

import (
	"context"

	"github.com/tenurehq/tenure/rpc"
)

// Run registers with the agent as a runner (rpc.Client.WatchAsRunner): when
// a term this node led ends, the agent releases its lease, letting the next
// leader start, only once Run has reported that its command for the term is
// not running. Run owes that report for every term its event stream said
// this node leads, and sends it once the stream has said the term ended and
// no command of the term runs: after stopping it (SIGTERM, SIGKILL after
// Grace, the whole group gone), or at once when none ran.

// noteTerm records a term the event stream says this node leads.
func (s *supervisor) noteTerm(ev rpc.Event) {
	if epoch, ok := selfLeads(ev); ok && s.conn != nil {
		s.owed[epoch] = true
	}
}

// reportStopped reports every owed term whose end the stream has told and
// whose command is not running.
func (s *supervisor) reportStopped() {
	for epoch := range s.owed {
		if s.view.streamLeads(epoch) || (s.child != nil && s.child.term.epoch == epoch) {
			continue
		}
		delete(s.owed, epoch)
		s.sendStopped(epoch)
	}
}

// sendStopped tells the agent that the command of term epoch is not
// running. A failure needs no retry: it breaks the connection, and the
// agent stops waiting for a runner that left.
func (s *supervisor) sendStopped(epoch uint64) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.callTimeout())
	defer cancel()
	if err := s.conn.Stopped(ctx, epoch); err != nil {
		s.log.Warn("supervise: cannot tell the agent the command stopped; it stops waiting once the connection is gone",
			"epoch", epoch, "err", err)
		return
	}
	s.log.Debug("supervise: told the agent the command of the term is not running", "epoch", epoch)
}

// sendRunning registers the running command's process group with the
// agent (rpc.Watcher.Running), so that the agent stops the group if Run
// dies without stopping it (kill -9: the command itself gets SIGKILL from
// its parent-death signal, its children do not) or does not report its
// term stopped within the grace. A failure breaks the connection, as for
// sendStopped.
func (s *supervisor) sendRunning() {
	if s.conn == nil || s.child == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.callTimeout())
	defer cancel()
	epoch, pgid := s.child.term.epoch, s.child.pid()
	if err := s.conn.Running(ctx, epoch, pgid); err != nil {
		s.log.Warn("supervise: cannot register the command's process group with the agent", "epoch", epoch, "pgid", pgid, "err", err)
		return
	}
	s.registered = epoch
}

// reportFinal, as Run returns with no command running, reports every term
// owed and the term of the registered group stopped: nothing of Run's will
// start again, so the agent need neither wait for those terms nor stop the
// group when the connection closes.
func (s *supervisor) reportFinal() {
	if s.conn == nil {
		return
	}
	if s.registered != 0 {
		s.owed[s.registered] = true
	}
	for epoch := range s.owed {
		delete(s.owed, epoch)
		s.sendStopped(epoch)
	}
}
