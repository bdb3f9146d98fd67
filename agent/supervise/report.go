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
