package agent

import (
	"fmt"
	"strings"
	"time"

	"github.com/tenurehq/tenure/bully"
	"github.com/tenurehq/tenure/leasing"
)

// peerBook is what the core knows of each peer's reach over the peer
// transport, for the reasons status and logs give: the peer address gossip
// last advertised for it (kept after it stops being listed alive), and the
// last failure to deliver a message to it, until a reply from it shows the
// path works again. The driver reports both (sendFailed, peerReplied);
// nothing in the protocol depends on them.
type peerBook struct {
	addr   map[string]string      // by node name
	failed map[string]peerFailure // by node name
	logged string                 // the last failed acquire's reason logged
}

// peerFailure is the last failure to deliver a message to a peer.
type peerFailure struct {
	at    time.Time
	cause string // in a few words: "connection refused", "i/o timeout"
}

// maxNamed bounds how many voters one reason names; the rest are counted.
const maxNamed = 5

// oldFailure is the age from which a peer failure is shown with its age: a
// peer that has not been tried for that long may have been repaired.
const oldFailure = time.Minute

// learnAddrs records the peer addresses the members advertise. It keeps
// what it knows of the roster's voters that gossip no longer lists, and
// forgets the other nodes it no longer lists, so that churn does not
// make it grow.
func (p *peerBook) learnAddrs(members []memberView, r leasing.Roster) {
	keep := map[string]bool{}
	for _, v := range r.Members() {
		keep[v.Name] = true
	}
	addr := map[string]string{}
	for _, mv := range members {
		keep[mv.Name] = true
		if mv.PeerAddr != "" {
			addr[mv.Name] = mv.PeerAddr
		}
	}
	for name, a := range p.addr {
		if _, ok := addr[name]; !ok && keep[name] {
			addr[name] = a
		}
	}
	p.addr = addr
	for name, f := range p.failed {
		// A failure for want of an address ends when gossip brings one: the
		// reasons showed the address beside "no peer address" until the
		// peer next replied.
		if !keep[name] || addr[name] != "" && f.cause == noAddrCause {
			delete(p.failed, name)
		}
	}
}

// noAddrCause is the cause recorded for a message not sent for want of a
// peer address.
var noAddrCause = peerCause(errNoPeerAddr)

// sendFailed records that a message to `to` could not be delivered at now
// (err is the driver's error: a refused connection, a timeout, a failed
// TLS handshake, an error answered by the peer). The first failure after a
// working path is logged.
func (c *core) sendFailed(now time.Time, to bully.Node, err error) {
	p := &c.peers
	if p.failed == nil {
		p.failed = map[string]peerFailure{}
	}
	_, was := p.failed[to.Name]
	cause := peerCause(err)
	p.failed[to.Name] = peerFailure{at: now, cause: cause}
	if !was {
		c.log.Warn("peer messages to a member are not delivered", "member", to.Name,
			"peer_addr", p.addr[to.Name], "err", cause)
	}
}

// peerReplied records that `from` answered a message at now, took after
// it was sent: a sample of the peers' round trip (the election takes the
// estimate at its next tick), and the end of the peer's failure; it
// reports whether there was one. A call whose time counts more than a
// round trip is no sample; its round trip would raise the estimate, and
// slow this node's elections and lease rounds, for up to
// roundTripMemory. The caller says so (held) for a call whose connect,
// request or answer the kernel retransmitted (gossip.Transport.
// CallRetried; Karn's rule, as TCP itself applies it), which counts a cut
// that held it: after a cut of 1-1.5 s between one node and the others
// such answers raised the estimate of one node or more from the
// simulation's 50-110 ms round trips past 600 ms (0.73-1.65 s) in each of
// the 100 runs of TestCutIsNoRoundTrip. And for one whose answer says
// the peer woke from a freeze of its own during the call (stampWake,
// TestFrozenPeerIsNoRoundTrip). This node finds the third kind itself: a
// call in flight across its own freeze (the caller was frozen too, and
// read the answer its kernel held only on waking), and such samples
// raised the estimate of a node frozen for 1-1.5 s, with a 2 s TTL, from
// about 80 ms to 1.4-3.8 s (TestOwnFreezeIsNoRoundTrip).
func (c *core) peerReplied(now time.Time, from bully.Node, took time.Duration, held bool) bool {
	if !held && !c.spansOwnFreeze(now, took) {
		c.rtt.add(now, took)
	}
	if _, ok := c.peers.failed[from.Name]; !ok {
		return false
	}
	delete(c.peers.failed, from.Name)
	c.log.Info("peer messages to a member are delivered again", "member", from.Name)
	return true
}

// describePeer names a voter for a reason: its peer address (or that none
// is known), whether gossip lists it alive, and the last failure to reach
// it, e.g. "n2 (10.0.0.12:7947): connection refused".
func (c *core) describePeer(now time.Time, name string) string {
	addr := c.peers.addr[name]
	if addr == "" {
		addr = "no peer address known"
	}
	if _, live := c.live[name]; !live {
		addr += ", not alive in gossip"
	}
	s := name + " (" + addr + ")"
	if f, ok := c.peers.failed[name]; ok {
		s += ": " + f.cause
		if age := now.Sub(f.at); age >= oldFailure {
			s += fmt.Sprintf(" (%v ago)", age.Truncate(time.Minute))
		}
	}
	return s
}

// describeSilent says which voters did not answer, of how many: "no reply
// from 2 of 3 voters: n2 (10.0.0.12:7947): connection refused; n3
// (10.0.0.13:7947): i/o timeout". It names at most maxNamed.
func (c *core) describeSilent(now time.Time, silent []leasing.Node, voters int) string {
	return fmt.Sprintf("no reply from %d of %d voters: %s", len(silent), voters,
		c.listSilent(now, silent))
}

// describeUnanswered is describeSilent for a round that ended before its
// budget (the refusals already made a majority impossible): the silent
// voters had no reply yet.
func (c *core) describeUnanswered(now time.Time, silent []leasing.Node, voters int) string {
	return fmt.Sprintf("no reply yet from %d of %d voters: %s", len(silent), voters,
		c.listSilent(now, silent))
}

// listSilent names silent voters as describeSilent does, without the count.
func (c *core) listSilent(now time.Time, silent []leasing.Node) string {
	return joinBounded(len(silent), "; ", func(i int) string { return c.describePeer(now, silent[i].Name) })
}

// listRefused names the voters that refused, with their reasons and, for
// a promise, its holder: "n2 (promised to n5), n4 (stale-epoch)". While a
// fleet starts, which candidate holds the voters is what tells a round
// that collided with another from one that found a leader.
func listRefused(refused []leasing.Refusal) string {
	return joinBounded(len(refused), ", ", func(i int) string {
		r := refused[i]
		if r.Reason == leasing.ReasonOtherInstance {
			return fmt.Sprintf("%s (promised to another agent named %s)", r.Voter.Name, r.Holder.Name)
		}
		if r.Reason == leasing.ReasonPromised && r.Holder.Name != "" {
			return fmt.Sprintf("%s (%s to %s)", r.Voter.Name, r.Reason, r.Holder.Name)
		}
		return fmt.Sprintf("%s (%s)", r.Voter.Name, r.Reason)
	})
}

// joinBounded joins the first maxNamed of n items, then "and k more".
func joinBounded(n int, sep string, item func(int) string) string {
	parts := make([]string, 0, min(n, maxNamed)+1)
	for i := 0; i < n && i < maxNamed; i++ {
		parts = append(parts, item(i))
	}
	if n > maxNamed {
		parts = append(parts, fmt.Sprintf("and %d more", n-maxNamed))
	}
	return strings.Join(parts, sep)
}

// describeRound says why a lease round failed: the grants against the
// need, who refused and why, and who did not answer, e.g. "1 of 2 needed
// grants; refused: n2 (promised to n1); no reply from 1 of 3 voters: n3
// (10.0.0.13:7947): connection refused".
func (c *core) describeRound(now time.Time, rd *leasing.Round) string {
	q := rd.Quorum()
	msg := fmt.Sprintf("%d of %d needed grants", q.Have, q.Need)
	if rd.Roster.Joint() {
		msg += " (a voter change is under way: a majority of the old voters and of the new ones is needed)"
	}
	if refused := rd.Refused(); len(refused) > 0 {
		msg += "; refused: " + listRefused(refused)
	}
	switch silent := rd.Silent(); {
	case len(silent) == 0:
	case now.Before(rd.Budget):
		msg += "; " + c.describeUnanswered(now, silent, len(rd.Roster.Members()))
	default:
		msg += "; " + c.describeSilent(now, silent, len(rd.Roster.Members()))
	}
	return msg
}

// acquireFailed records why an acquire round failed, for status, and logs
// the reason when it differs from the last one logged.
func (c *core) acquireFailed(now time.Time, rd *leasing.Round) {
	c.rounds.noQuorum = "no quorum: " + c.describeRound(now, rd)
	if _, twin := rd.Refusals()[leasing.ReasonOtherInstance]; twin && !c.warned["instance"] {
		c.warned["instance"] = true
		c.log.Warn("voters promise this node's name to another agent process: another agent runs with this name and ID, "+
			"or this node restarted without the data dir of its previous run and waits for that run's promise to end",
			"name", c.cfg.Self.Name, "id", c.cfg.Self.ID)
	}
	if c.rounds.noQuorum != c.peers.logged {
		c.peers.logged = c.rounds.noQuorum
		c.log.Info("lease not acquired", "epoch", rd.Epoch, "reason", c.rounds.noQuorum)
	}
}

// renewalFailed logs a failed renewal of the lease this node holds: the
// grants against the need, who refused (and why), who did not answer.
func (c *core) renewalFailed(now time.Time, rd *leasing.Round) {
	q := rd.Quorum()
	c.log.Warn("lease renewal failed; retrying", "epoch", rd.Epoch, "granted", q.Have, "need", q.Need,
		"refused", listRefused(rd.Refused()), "no_reply", c.listSilent(now, rd.Silent()),
		"remaining", c.lease.deadline.Sub(now))
}

// probeSilent returns the other voters of the roster that did not answer
// the reach probe in flight.
func (c *core) probeSilent() []leasing.Node {
	var out []leasing.Node
	for _, v := range c.roster().Members() {
		if toBully(v) != c.cfg.Self && !c.reach.replied[v.Name] {
			out = append(out, v)
		}
	}
	return out
}

// forgetMootReasons drops why this node could not lead, and its last
// round's count, once another node leads: they no longer describe the
// cluster, and would show again, stale, when that leader is gone.
func (c *core) forgetMootReasons() {
	if l := c.m.Status().Leader; !l.IsZero() && l != c.cfg.Self {
		c.rounds.noQuorum, c.rounds.quorum = "", leasing.Quorum{}
	}
}

// statusQuorum is the count status reports: the last round of this node's
// lease or campaign, or none, against the need of the roster.
func (c *core) statusQuorum() leasing.Quorum {
	q := c.rounds.quorum
	if q.Need == 0 {
		q.Need = c.roster().Need()
	}
	return q
}
