package leasing

// Count tells how far the voters for which granted holds are from a
// majority of r: the grants and the majority of Voters or, for a joint
// roster, of whichever of its two sets is further from its majority. So
// Have >= Need exactly when r.Satisfied(granted), for plain and joint
// rosters alike; a count of a failed round never looks like a quorum.
func (r Roster) Count(granted func(Node) bool) Quorum {
	q := countSet(r.Voters, granted)
	if r.Joint() {
		if p := countSet(r.Prev, granted); p.Have-p.Need < q.Have-q.Need {
			q = p
		}
	}
	return q
}

// Need is how many grants a lease needs under r: Count of no grants.
// For a joint roster it is the majority of the larger of its two sets.
func (r Roster) Need() int {
	if r.IsZero() {
		return 0
	}
	return r.Count(func(Node) bool { return false }).Need
}

func countSet(set []Node, granted func(Node) bool) Quorum {
	q := Quorum{Need: len(set)/2 + 1}
	for _, v := range set {
		if granted(v) {
			q.Have++
		}
	}
	return q
}

// Refusal is one voter's refusal in a round.
type Refusal struct {
	Voter  Node
	Reason Reason
	// Holder is whom the voter had promised, for ReasonPromised and
	// ReasonOtherInstance (zero when the voter did not say).
	Holder Node
}

// Refused returns the refusals so far, ordered by voter name.
func (r *Round) Refused() []Refusal {
	out := make([]Refusal, 0, len(r.reasons))
	for _, v := range r.Roster.Members() {
		if reason, ok := r.reasons[v.Name]; ok {
			out = append(out, Refusal{Voter: v, Reason: reason, Holder: r.holderOf[v.Name]})
		}
	}
	return out
}

// Silent returns the voters of the roster that have not replied, ordered
// by name.
func (r *Round) Silent() []Node {
	var out []Node
	for _, v := range r.Roster.Members() {
		if !r.replied[v.Name] {
			out = append(out, v)
		}
	}
	return out
}
