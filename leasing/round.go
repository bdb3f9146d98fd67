package leasing

import (
	"time"
)

// Quorum is a round's count of grants against the majority it needs.
type Quorum struct {
	Have int `json:"have" msgpack:"have"`
	Need int `json:"need" msgpack:"need"`
}

// Round is one acquire or renew round of a candidate: the requests went to
// every voter of Roster at Sent; replies are added as they come. It is a
// plain value with no I/O and no clock of its own.
type Round struct {
	Seq    uint64
	Kind   Kind
	Epoch  uint64
	Roster Roster
	// Sent is when the requests were sent, on the candidate's clock; the
	// lease's validity is counted from here.
	Sent time.Time
	// Budget ends the round: no majority by then is a failure. It is
	// counted from Sent, or from when the requests left (Dispatched).
	Budget time.Time

	budget     time.Duration
	dispatched bool // Dispatched was called

	granted  map[string]bool
	replied  map[string]bool
	highest  uint64
	newer    *Roster
	maxWait  time.Duration // longest promise to another holder among refusals
	refusals map[Reason]int
	reasons  map[string]Reason // each refusing voter's reason, by name
	holderOf map[string]Node   // whom each voter that refused as promised had promised
	longest  time.Duration     // longest TTL any granting voter ever promised
	unknown  bool              // a granting voter's record has no TTL
	earlier  bool              // a granting voter had granted before
}

// NewRound starts round seq at sent.
func NewRound(seq uint64, kind Kind, epoch uint64, r Roster, sent time.Time, budget time.Duration) *Round {
	return &Round{
		Seq: seq, Kind: kind, Epoch: epoch, Roster: r, Sent: sent, Budget: sent.Add(budget), budget: budget,
		granted: map[string]bool{}, replied: map[string]bool{}, refusals: map[Reason]int{},
		reasons: map[string]Reason{}, holderOf: map[string]Node{},
	}
}

// Dispatched records that the requests left at `at`, after Sent: the
// candidate builds them, then persists the round's epoch before it may
// send them, and on a loaded host that write can take most of a budget.
// The budget counts from `at`, so the voters get all of it to answer;
// Sent, from which the lease's validity counts, stays (earlier is the
// safe side). The requests leave once: later calls change nothing.
func (r *Round) Dispatched(at time.Time) {
	if r.dispatched {
		return
	}
	r.dispatched = true
	if b := at.Add(r.budget); b.After(r.Budget) {
		r.Budget = b
	}
}

// Request returns the request this round sends.
func (r *Round) Request(candidate Node, ttl time.Duration) Request {
	return Request{Kind: r.Kind, Seq: r.Seq, Candidate: candidate, Epoch: r.Epoch, TTL: ttl,
		ClusterID: r.Roster.ClusterID, RosterVersion: r.Roster.Version, RosterEpoch: r.Roster.Epoch}
}

// Add records a reply, and reports whether it counted it as a grant.
// Replies to another round, from nodes outside the roster, and repeats
// are ignored.
func (r *Round) Add(rep Reply) (granted bool) {
	if rep.Seq != r.Seq || rep.Epoch != r.Epoch || !r.Roster.Contains(rep.Voter) || r.replied[rep.Voter.Name] {
		return false
	}
	r.replied[rep.Voter.Name] = true
	r.highest = max(r.highest, rep.Highest)
	if rep.Granted {
		r.granted[rep.Voter.Name] = true
		r.longest = max(r.longest, rep.Longest)
		r.unknown = r.unknown || rep.Longest == 0
		r.earlier = r.earlier || !rep.First
		return true
	}
	r.refusals[rep.Reason]++
	r.reasons[rep.Voter.Name] = rep.Reason
	if rep.Reason == ReasonPromised || rep.Reason == ReasonOtherInstance {
		r.maxWait = max(r.maxWait, r.promiseWait(rep))
		r.holderOf[rep.Voter.Name] = rep.Holder
	}
	if rep.Roster != nil && rep.Roster.ClusterID == r.Roster.ClusterID &&
		rep.Roster.Newer(r.Roster) && (r.newer == nil || rep.Roster.Newer(*r.newer)) {
		r.newer = rep.Roster
	}
	return false
}

// LongestTTL returns the longest TTL the granting voters ever promised,
// and false when one of them has no record of it (a lost disk, an older
// version). A won acquire's majority shares a voter with the majority of
// every earlier term, which recorded that term's TTL before granting, so
// no earlier leader's lease, nor a named lease it granted (at most its
// TTL), lasted longer.
func (r *Round) LongestTTL() (time.Duration, bool) { return r.longest, !r.unknown && r.longest > 0 }

// First reports that no granting voter had granted anything before: no
// earlier term was ever won, since its majority would share a voter with
// this round's, which persisted that grant (or, after losing its disk,
// learnt a floor above it) before this one.
func (r *Round) First() bool { return len(r.granted) > 0 && !r.earlier }

// Won reports whether a majority granted (of both sets of a joint roster).
func (r *Round) Won() bool {
	return r.Roster.Satisfied(func(n Node) bool { return r.granted[n.Name] })
}

// Lost reports whether the round can no longer be won: too many refusals, or
// the budget is over at now.
func (r *Round) Lost(now time.Time) bool {
	if r.Won() {
		return false
	}
	possible := r.Roster.Satisfied(func(n Node) bool { return r.granted[n.Name] || !r.replied[n.Name] })
	return !possible || !now.Before(r.Budget)
}

// Quorum returns the grants so far against the majority needed, as
// Roster.Count does: for a joint roster, of the set further from its
// majority. Have >= Need exactly when the round is won.
func (r *Round) Quorum() Quorum {
	return r.Roster.Count(func(n Node) bool { return r.granted[n.Name] })
}

// Granted returns the names of the voters that granted.
func (r *Round) Granted() []string {
	out := make([]string, 0, len(r.granted))
	for _, v := range r.Roster.Members() {
		if r.granted[v.Name] {
			out = append(out, v.Name)
		}
	}
	return out
}

// Highest is the highest epoch any voter reported.
func (r *Round) Highest() uint64 { return r.highest }

// NewerRoster is a newer roster of the same cluster that a voter reported.
func (r *Round) NewerRoster() (Roster, bool) {
	if r.newer == nil {
		return Roster{}, false
	}
	return *r.newer, true
}

// RetryAfter is how long a failed candidate should wait: until the longest
// reported promise to another node has run out, or, for a promise to
// another candidate's acquire that may still be deciding, until that
// round's budget ends.
func (r *Round) RetryAfter() time.Duration { return r.maxWait }

// promiseWait is how long a refusal for a promise to another node asks
// this candidate to wait. A promise given to an acquire less than a budget
// ago belongs to a round that may still be deciding (its requests went out
// before the grant, so it ends within a budget of it): if it wins, its
// COORDINATOR arrives meanwhile; if it fails, its holder releases the
// promise at the end of the round, and waiting out the whole promise (a
// TTL) would leave the cluster without a leader for that long. Candidates
// are assumed to share one acquire budget; a holder that won and has not
// renewed yet is waited out in full once its budget has passed.
func (r *Round) promiseWait(rep Reply) time.Duration {
	if rep.Acquiring && rep.Age < r.budget {
		return min(rep.Remaining, r.budget-rep.Age)
	}
	return rep.Remaining
}

// PromisedTo returns the holders of the promises that refused the round,
// one for each voter that refused it as promised, in the roster's order.
func (r *Round) PromisedTo() []Node {
	var out []Node
	for _, v := range r.Roster.Members() {
		if h, ok := r.holderOf[v.Name]; ok {
			out = append(out, h)
		}
	}
	return out
}

// Refusals counts the refusals by reason.
func (r *Round) Refusals() map[Reason]int { return r.refusals }
