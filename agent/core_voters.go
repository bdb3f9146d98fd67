package agent

import (
	"cmp"
	"slices"
	"time"

	"github.com/tenurehq/tenure/leasing"
)

// The voter set manages itself: the leader keeps the roster at the target
// number of voters (--voters, else the roster's Seats, else
// defaultSeats), odd where it can, chosen from the nodes that may vote
// (--voter, the default) and spread over their zones. Every change is an
// ordinary roster step (joint, then final; core_change.go), so the rules
// below choose only WHICH voters; the joint steps keep every lease
// majority intersecting whatever they choose.
//
//   - A voter goes when it left gracefully, was force-left (a leaving
//     node asks for that before it leaves: removal before leave), or gossip
//     has reported it failed for DeadVoterTimeout.
//   - A node is promoted only to fill a vacancy or to spread the voters
//     over more zones, only once gossip has shown it alive for PromoteAfter
//     and it answered, over the peer transport, that its restart hold is
//     over: its first grant can count at once, so the leader's renewals do
//     not start to depend on a voter that refuses them.
//   - The set is odd where possible: an even set tolerates no more
//     failures than the odd set one smaller, and needs one more grant.
//     A live voter is demoted for that only when no live member that may
//     vote could fill the vacancy once stable (mayFill): until then the
//     set stays even, so a graceful stop of one of two voters still hands
//     its seat over.
//   - A step is proposed only while a majority of the current voters and
//     of the new set are alive, so it can commit.

// defaultSeats is the target without --voters in a roster that names none.
const defaultSeats = 5

// candidateFresh is how recent a candidate's answer must be to count.
const candidateFresh = 3 * time.Second

// candidateProbes bounds how many candidates one readiness probe asks.
const candidateProbes = 8

// seats is what the leader tracks about the members to manage the voter
// set.
type seats struct {
	liveSince    map[string]since     // continuously live since (its ID too)
	missingSince map[string]time.Time // roster voters gossip does not list alive
	answers      map[string]readiness // candidates' answers to FloorQuery
	probeAt      time.Time            // next readiness probe
}

type since struct {
	id uint64
	at time.Time
}

// readiness is a candidate's answer: whether it still holds its vote after
// a restart, and when the answer came.
type readiness struct {
	at      time.Time
	holding bool
}

func newSeats() seats {
	return seats{liveSince: map[string]since{}, missingSince: map[string]time.Time{}, answers: map[string]readiness{}}
}

// trackMembers updates when each member became live and when each voter
// went missing.
func (c *core) trackMembers(now time.Time) {
	st := &c.seats
	for name, mv := range c.live {
		if s, ok := st.liveSince[name]; !ok || s.id != mv.ID {
			st.liveSince[name] = since{id: mv.ID, at: now}
		}
	}
	for name := range st.liveSince {
		if _, ok := c.live[name]; !ok {
			delete(st.liveSince, name)
			delete(st.answers, name)
		}
	}
	r := c.roster()
	for _, v := range r.Members() {
		if _, ok := c.live[v.Name]; ok {
			delete(st.missingSince, v.Name)
		} else if _, ok := st.missingSince[v.Name]; !ok {
			st.missingSince[v.Name] = now
		}
	}
	for name := range st.missingSince {
		if !r.Contains(c.rosterNode(name)) {
			delete(st.missingSince, name)
		}
	}
	for name, at := range c.forced {
		s, live := st.liveSince[name]
		if !rosterHas(r, name) && (!live || s.at.After(at)) {
			delete(c.forced, name) // removed, and gone or back as a new start
		}
	}
}

// rosterNode is the roster's node of that name (zero when none).
func (c *core) rosterNode(name string) leasing.Node {
	for _, v := range c.roster().Members() {
		if v.Name == name {
			return v
		}
	}
	return leasing.Node{}
}

// targetSeats is how many voters this leader aims for.
func (c *core) targetSeats() int {
	t := c.cfg.Voters
	if t <= 0 {
		t = c.roster().Seats
	}
	if t <= 0 {
		t = defaultSeats
	}
	return min(t, leasing.MaxSeats)
}

// oddDown is n, or n-1 when n is even and above 1.
func oddDown(n int) int {
	if n > 1 && n%2 == 0 {
		return n - 1
	}
	return n
}

// mustGo reports whether voter v leaves the set: it left, was force-left,
// was restarted with --voter=false, or has been missing for
// DeadVoterTimeout. The leader itself never does.
func (c *core) mustGo(now time.Time, v leasing.Node) bool {
	if toBully(v) == c.cfg.Self {
		return false
	}
	if mv, live := c.live[v.Name]; c.left[v.Name] || (live && !mv.Voter) {
		return true
	}
	if _, ok := c.forced[v.Name]; ok {
		return true
	}
	at, missing := c.seats.missingSince[v.Name]
	return missing && c.cfg.DeadVoterTimeout > 0 && now.Sub(at) >= c.cfg.DeadVoterTimeout
}

// mayVote reports whether a live member not in the roster may become a
// voter at all: it runs as a voter of this cluster and was not force-left
// during its current run.
func (c *core) mayVote(r leasing.Roster, mv memberView) bool {
	_, forced := c.forced[mv.Name]
	return mv.Voter && !forced && !r.Contains(toLeasing(mv.Node)) &&
		(mv.Cluster == "" || mv.Cluster == r.ClusterID)
}

// stable reports whether gossip has shown name alive for PromoteAfter.
func (c *core) stable(now time.Time, name string) bool {
	s, ok := c.seats.liveSince[name]
	return ok && now.Sub(s.at) >= c.promoteAfter()
}

func (c *core) promoteAfter() time.Duration {
	if c.cfg.PromoteAfter > 0 {
		return c.cfg.PromoteAfter
	}
	return maxTTLFactor * c.cfg.Lease.TTL
}

// candidates are the members that could be promoted now: stable, and their
// fresh answer says their restart hold is over.
func (c *core) candidates(now time.Time, r leasing.Roster) []memberView {
	var out []memberView
	for _, name := range sortedNames(c.live) {
		if mv := c.live[name]; c.mayVote(r, mv) && c.stable(now, name) && c.readyToVote(now, mv) {
			out = append(out, mv)
		}
	}
	return out
}

// mayFill counts the live members that may become voters of r, stable and
// ready or not yet: the seats they can fill count towards the set's size
// before it is made odd. A live voter is demoted to make the set odd only
// when nobody can take the vacancy. Counting only the members ready now,
// a leader dropped a dead voter of three and demoted a live one in the
// same step (the node that could take the seat had just joined; a leader
// that has just taken over has seen nobody stable for PromoteAfter yet),
// and the graceful stop of the one voter left then left the cluster with
// no voter to grant a lease.
func (c *core) mayFill(r leasing.Roster) int {
	n := 0
	for _, mv := range c.live {
		if c.mayVote(r, mv) {
			n++
		}
	}
	return n
}

// readyToVote reports whether mv answered lately that its restart hold is over
// (this node knows its own).
func (c *core) readyToVote(now time.Time, mv memberView) bool {
	if mv.Node == c.cfg.Self {
		return !c.holdingVote(now)
	}
	a, ok := c.seats.answers[mv.Name]
	return ok && !a.holding && now.Sub(a.at) <= candidateFresh
}

// desiredVoters is the voter set the rules above want from roster r.
func (c *core) desiredVoters(now time.Time, r leasing.Roster) []leasing.Node {
	var set []leasing.Node
	for _, v := range r.Voters {
		if !c.mustGo(now, v) {
			set = append(set, v)
		}
	}
	cands := c.candidates(now, r)
	want := oddDown(min(c.targetSeats(), len(set)+c.mayFill(r)))
	for len(set) > max(want, 1) {
		d := c.demotee(now, set)
		set = slices.DeleteFunc(set, func(v leasing.Node) bool { return v == d })
	}
	for len(set) < want && len(cands) > 0 {
		i := c.bestCandidate(set, cands)
		set = append(set, toLeasing(cands[i].Node))
		cands = slices.Delete(cands, i, i+1)
	}
	// Spread over zones: swap a voter of the most crowded zone for a
	// candidate of a zone with at least two fewer voters, one at a time.
	if len(cands) > 0 {
		i := c.bestCandidate(set, cands)
		v := c.demotee(now, set)
		zones := c.zoneCounts(set)
		if !v.IsZero() && zones[c.zoneOf(v.Name)] >= zones[cands[i].Zone]+2 {
			set = slices.DeleteFunc(set, func(x leasing.Node) bool { return x == v })
			set = append(set, toLeasing(cands[i].Node))
		}
	}
	return set
}

// zoneOf is the zone a member advertises ("" when none, or not live).
func (c *core) zoneOf(name string) string {
	if name == c.cfg.Self.Name {
		return c.cfg.Zone
	}
	return c.live[name].Zone
}

func (c *core) zoneCounts(set []leasing.Node) map[string]int {
	z := map[string]int{}
	for _, v := range set {
		z[c.zoneOf(v.Name)]++
	}
	return z
}

// bestCandidate picks the candidate whose zone has the fewest voters in
// set; ties go to the one live longest, then by name.
func (c *core) bestCandidate(set []leasing.Node, cands []memberView) int {
	zones := c.zoneCounts(set)
	best := 0
	for i, mv := range cands[1:] {
		b := cands[best]
		if cmp.Or(cmp.Compare(zones[mv.Zone], zones[b.Zone]),
			c.seats.liveSince[mv.Name].at.Compare(c.seats.liveSince[b.Name].at)) < 0 {
			best = i + 1
		}
	}
	return best
}

// demotee picks the voter of set to give up first: never the leader; a
// missing one before a live one, then one of the most crowded zone, then
// the one live the shortest, then the last by name. Zero when only the
// leader is left.
func (c *core) demotee(now time.Time, set []leasing.Node) leasing.Node {
	zones := c.zoneCounts(set)
	var pick leasing.Node
	score := func(v leasing.Node) [2]int {
		_, live := c.live[v.Name]
		m := 0
		if !live {
			m = 1
		}
		return [2]int{m, zones[c.zoneOf(v.Name)]}
	}
	for _, v := range set {
		if toBully(v) == c.cfg.Self {
			continue
		}
		if pick.IsZero() {
			pick = v
			continue
		}
		sv, sp := score(v), score(pick)
		switch {
		case sv[0] != sp[0]:
			if sv[0] > sp[0] {
				pick = v
			}
		case sv[1] != sp[1]:
			if sv[1] > sp[1] {
				pick = v
			}
		default:
			tv, tp := c.seats.liveSince[v.Name].at, c.seats.liveSince[pick.Name].at
			if tv.After(tp) || (tv.Equal(tp) && v.Name > pick.Name) {
				pick = v
			}
		}
	}
	return pick
}

// aliveMajority reports whether a majority of set is live (this node
// counts for itself).
func (c *core) aliveMajority(set []leasing.Node) bool {
	n := 0
	for _, v := range set {
		if _, ok := c.live[v.Name]; ok || toBully(v) == c.cfg.Self {
			n++
		}
	}
	return n >= len(set)/2+1
}

// seatsChange is the roster step the voter-set rules want now, if any.
func (c *core) seatsChange(now time.Time, r leasing.Roster) (leasing.Roster, bool) {
	for _, v := range r.Voters {
		// A voter of a roster learned since the last membership change
		// that gossip does not list: missing from now on.
		if _, live := c.live[v.Name]; !live {
			if _, ok := c.seats.missingSince[v.Name]; !ok {
				c.seats.missingSince[v.Name] = now
			}
		}
	}
	want := c.desiredVoters(now, r)
	if len(want) == 0 || sameNodes(want, r.Voters) || !c.aliveMajority(r.Voters) || !c.aliveMajority(want) {
		return leasing.Roster{}, false
	}
	return r.To(want, c.lease.epoch, c.targetSeats()), true
}

func sameNodes(a, b []leasing.Node) bool {
	if len(a) != len(b) {
		return false
	}
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// probeCandidates asks, once a second, the members that could fill a seat
// whether their restart hold is over (FloorQuery; the answer's Holding).
// It asks only while the set could grow or spread, and at most
// candidateProbes members, those of the least represented zones first.
func (c *core) probeCandidates(now time.Time) {
	r := c.roster()
	if !c.quorumMode() || !c.leaseValid(now) || r.Joint() || now.Before(c.seats.probeAt) {
		return
	}
	c.seats.probeAt = now.Add(rosterFetchInterval)
	var set []leasing.Node
	for _, v := range r.Voters {
		if !c.mustGo(now, v) {
			set = append(set, v)
		}
	}
	zones := c.zoneCounts(set)
	crowded := 0
	for _, n := range zones {
		crowded = max(crowded, n)
	}
	var ask []memberView
	for _, name := range sortedNames(c.live) {
		mv := c.live[name]
		if mv.Node == c.cfg.Self || !c.mayVote(r, mv) || !c.stable(now, name) {
			continue
		}
		if len(set) < oddDown(c.targetSeats()) || zones[mv.Zone]+2 <= crowded {
			ask = append(ask, mv)
		}
	}
	slices.SortStableFunc(ask, func(a, b memberView) int { return cmp.Compare(zones[a.Zone], zones[b.Zone]) })
	for _, mv := range ask[:min(len(ask), candidateProbes)] {
		c.out = append(c.out, outMsg{to: mv.Node, env: envelope{FloorQuery: true}})
	}
}

// noteReadiness records a member's answer to a readiness probe.
func (c *core) noteReadiness(now time.Time, f floorReply) {
	if _, ok := c.live[f.From.Name]; ok && c.leading() {
		c.seats.answers[f.From.Name] = readiness{at: now, holding: f.Holding}
	}
}

// holdingVote reports whether this node would refuse to grant now because
// of its restart hold (or has no vote at all): the answer to a readiness
// probe.
func (c *core) holdingVote(now time.Time) bool {
	return c.grants == nil || c.amnesia.active || c.grants.Holding(now)
}

// successorExists reports whether another live member could take this
// node's seat: one that may vote, of this cluster.
func (c *core) successorExists() bool {
	r := c.roster()
	for _, mv := range c.live {
		if mv.Node != c.cfg.Self && mv.Voter && (mv.Cluster == "" || mv.Cluster == r.ClusterID) {
			return true
		}
	}
	return false
}
