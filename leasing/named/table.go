package named

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/tenurehq/tenure/leasing"
)

// Config bounds what a Table accepts.
type Config struct {
	// MinTTL and MaxTTL bound a lease's TTL. A later leader's grace must
	// be at least MaxTTL.
	MinTTL, MaxTTL time.Duration
	// MaxNames bounds the names with a holder or a waiter (default 10000).
	MaxNames int
	// MaxWaiters bounds one name's queue (default 1000).
	MaxWaiters int
	// Gather is how long a free Spread name waits, from its first waiter,
	// for the other candidates to ask before the leader places it
	// (default 1s): tasks started on every host at once then spread.
	Gather time.Duration
}

func (c Config) withDefaults() Config {
	if c.MaxNames <= 0 {
		c.MaxNames = 10000
	}
	if c.MaxWaiters <= 0 {
		c.MaxWaiters = 1000
	}
	if c.Gather <= 0 {
		c.Gather = time.Second
	}
	return c
}

// Table is the leader's table of named leases for one term: who holds each
// name with which token until when (on the leader's clock), and who waits.
// It is deterministic over the caller's clock and not safe for concurrent
// use; the agent's driver owns it while the node leads, and drops it when
// the term ends (the next leader starts a table of its own).
type Table struct {
	cfg      Config
	term     uint64
	grants   uint32    // grants made this term: the low half of the next token
	graceEnd time.Time // before it, only re-claims are granted
	names    map[string]*entry
}

// entry is one name.
type entry struct {
	policy  Policy
	held    bool
	holder  Holder
	token   uint64
	ttl     time.Duration
	expiry  time.Time // on the leader's clock
	adopted bool      // re-claimed from an earlier term
	waiters []waiter
	// gathered is when a free Spread name may first be placed: Gather
	// after its first waiter came.
	gathered time.Time
	group    string // of a Share name
	revoking bool   // the holder was asked to give it back
}

// waiter is a queued acquire; it stays queued while its agent repeats it.
type waiter struct {
	who    Holder
	seq    uint64 // of its latest request: a grant counts from its send time
	ttl    time.Duration
	policy Policy
	group  string
	expiry time.Time // dropped unless refreshed before
}

// NewTable returns the table of the term with epoch term, which started
// (its lease won) at now. It grants names nobody re-claims only from
// now+grace on: grace must be at least the longest TTL any earlier leader
// can have granted (derived from the lease TTLs the voters recorded, see
// leasing.Round.LongestTTL).
func NewTable(cfg Config, term uint64, now time.Time, grace time.Duration) *Table {
	return &Table{cfg: cfg.withDefaults(), term: term, graceEnd: now.Add(grace), names: map[string]*entry{}}
}

// Term returns the epoch of the table's term.
func (t *Table) Term() uint64 { return t.term }

// GraceEnd returns when the table starts granting names nobody re-claimed.
func (t *Table) GraceEnd() time.Time { return t.graceEnd }

// Handle answers req, received at now. Besides the reply it returns the
// grants the request made to others (a release hands the name to the next
// waiter), to be pushed to their agents.
func (t *Table) Handle(now time.Time, req Request) (Reply, []Reply) {
	rep := Reply{Seq: req.Seq, Term: t.term, Name: req.Name, Holder: req.Holder}
	if req.Term != t.term {
		rep.Code, rep.Message = CodeNotLeader, fmt.Sprintf("this node leads term %d, not %d", t.term, req.Term)
		return rep, nil
	}
	if msg := t.invalid(req); msg != "" {
		rep.Code, rep.Message = CodeInvalid, msg
		return rep, nil
	}
	switch req.Op {
	case OpAcquire:
		return t.acquire(now, req, rep)
	case OpRenew:
		return t.renew(now, req, rep), nil
	default:
		return t.release(now, req, rep)
	}
}

// invalid says what is wrong with req, or "".
func (t *Table) invalid(req Request) string {
	if err := CheckName(req.Name); err != nil {
		return err.Error()
	}
	switch {
	case req.Op < OpAcquire || req.Op > OpRelease:
		return fmt.Sprintf("unknown op %d", req.Op)
	case req.Holder.Node.Name == "":
		return "no holder"
	case req.Op != OpRelease && (req.TTL < t.cfg.MinTTL || req.TTL > t.cfg.MaxTTL):
		return fmt.Sprintf("ttl %v is not between %v and %v", req.TTL, t.cfg.MinTTL, t.cfg.MaxTTL)
	case req.Policy > Share:
		return fmt.Sprintf("unknown policy %d", req.Policy)
	case req.Policy == Share && req.Group == "":
		return "a partition needs its group"
	case req.Policy == Share && CheckName(req.Group) != nil:
		return CheckName(req.Group).Error()
	case t.term > MaxEpoch:
		return fmt.Sprintf("epoch %d is beyond the tokens of named leases (at most %d)", t.term, uint64(MaxEpoch))
	}
	return ""
}

func (t *Table) acquire(now time.Time, req Request, rep Reply) (Reply, []Reply) {
	e := t.names[req.Name]
	if e == nil {
		if len(t.names) >= t.cfg.MaxNames {
			rep.Code, rep.Message = CodeInvalid, fmt.Sprintf("the leader holds its limit of %d names", t.cfg.MaxNames)
			return rep, nil
		}
		e = &entry{policy: req.Policy, group: req.Group}
		t.names[req.Name] = e
	}
	t.expire(now, req.Name, e)
	if e.held && e.holder == req.Holder {
		// The holder asking again (its grant's reply was lost): a renewal.
		req.Token = e.token
		return t.renew(now, req, rep), nil
	}
	if !e.held && len(e.waiters) == 0 && !now.Before(t.graceEnd) && req.Policy == FIFO {
		return t.grant(now, e, req.Name, waiter{who: req.Holder, seq: req.Seq, ttl: req.TTL, policy: req.Policy}), nil
	}
	if !e.held && len(e.waiters) == 0 {
		e.gathered = now.Add(t.cfg.Gather)
	}
	if !req.Wait {
		t.drop(req.Name, e)
		rep.Code, rep.Current = CodeBusy, e.holder.Node.Name
		if !e.held && now.Before(t.graceEnd) {
			rep.Message = fmt.Sprintf("the leader changed: names not re-claimed by their holders are granted in %v",
				t.graceEnd.Sub(now).Round(time.Millisecond))
		}
		return rep, nil
	}
	e.enqueue(waiter{who: req.Holder, seq: req.Seq, ttl: req.TTL, policy: req.Policy, group: req.Group, expiry: now.Add(req.TTL)})
	if len(e.waiters) > t.cfg.MaxWaiters {
		e.waiters = e.waiters[:len(e.waiters)-1]
		rep.Code, rep.Message = CodeInvalid, fmt.Sprintf("%d waiters already queue for %q", t.cfg.MaxWaiters, req.Name)
		return rep, nil
	}
	pushes := t.next(now, req.Name, e)
	for i, p := range pushes {
		if p.Holder == req.Holder {
			return p, slices.Delete(pushes, i, i+1)
		}
	}
	rep.Code, rep.Position, rep.Current = CodeQueued, e.position(req.Holder), e.holder.Node.Name
	return rep, pushes
}

// enqueue adds w to the end of the queue, or refreshes its place.
func (e *entry) enqueue(w waiter) {
	for i := range e.waiters {
		if e.waiters[i].who == w.who {
			e.waiters[i] = w
			return
		}
	}
	e.waiters = append(e.waiters, w)
}

func (e *entry) position(h Holder) int {
	for i, w := range e.waiters {
		if w.who == h {
			return i + 1
		}
	}
	return 0
}

func (t *Table) renew(now time.Time, req Request, rep Reply) Reply {
	e := t.names[req.Name]
	if e != nil {
		t.expire(now, req.Name, e)
	}
	switch {
	case e != nil && e.held && e.holder == req.Holder && e.token == req.Token:
		e.expiry, e.ttl = now.Add(req.TTL), req.TTL
		rep.Code, rep.Token, rep.TTL, rep.Revoke = CodeGranted, e.token, req.TTL, e.revoking
		return rep
	case e != nil && e.held:
		rep.Code, rep.Current = CodeLost, e.holder.Node.Name
		return rep
	case now.Before(t.graceEnd) && req.Token != 0 && TokenEpoch(req.Token) < t.term:
		// A re-claim: sent after its holder learnt of this term, while its
		// lease from an earlier term was valid. No other holder of the
		// name can still be valid (package doc), so it is adopted.
		if e == nil {
			if len(t.names) >= t.cfg.MaxNames {
				rep.Code, rep.Message = CodeInvalid, fmt.Sprintf("the leader holds its limit of %d names", t.cfg.MaxNames)
				return rep
			}
			e = &entry{policy: req.Policy, group: req.Group}
			t.names[req.Name] = e
		}
		e.held, e.holder, e.token, e.ttl, e.expiry, e.adopted = true, req.Holder, req.Token, req.TTL, now.Add(req.TTL), true
		e.remove(req.Holder)
		rep.Code, rep.Token, rep.TTL = CodeGranted, e.token, req.TTL
		return rep
	}
	rep.Code, rep.Message = CodeLost, "not held (it ran out, or was released)"
	return rep
}

func (t *Table) release(now time.Time, req Request, rep Reply) (Reply, []Reply) {
	rep.Code = CodeReleased
	e := t.names[req.Name]
	if e == nil {
		return rep, nil
	}
	if e.held && e.holder == req.Holder && (req.Token == 0 || req.Token == e.token) {
		e.held, e.holder, e.revoking = false, Holder{}, false
	}
	e.remove(req.Holder)
	pushes := t.next(now, req.Name, e)
	t.drop(req.Name, e)
	return rep, pushes
}

func (e *entry) remove(h Holder) {
	e.waiters = slices.DeleteFunc(e.waiters, func(w waiter) bool { return w.who == h })
}

// drop forgets a name nobody holds or waits for.
func (t *Table) drop(name string, e *entry) {
	if !e.held && len(e.waiters) == 0 {
		delete(t.names, name)
	}
}

// expire ends a lease and drops waiters whose time ran out at now.
func (t *Table) expire(now time.Time, name string, e *entry) {
	if e.held && !now.Before(e.expiry) {
		e.held, e.holder, e.revoking = false, Holder{}, false
	}
	e.waiters = slices.DeleteFunc(e.waiters, func(w waiter) bool { return !now.Before(w.expiry) })
}

// next grants a free name to the waiter its policy picks, after the grace.
func (t *Table) next(now time.Time, name string, e *entry) []Reply {
	if e.held || len(e.waiters) == 0 || now.Before(t.graceEnd) {
		return nil
	}
	i := 0
	switch e.waiters[0].policy {
	case Spread:
		if now.Before(e.gathered) {
			return nil
		}
		i = t.pick(name, e.waiters, t.load(func(o *entry) bool { return o.policy == Spread }))
	case Share:
		if now.Before(e.gathered) {
			return nil
		}
		i = t.pick(name, e.waiters, t.load(func(o *entry) bool { return o.policy == Share && o.group == e.group && !o.revoking }))
	}
	w := e.waiters[i]
	e.waiters = slices.Delete(e.waiters, i, i+1)
	return []Reply{t.grant(now, e, name, w)}
}

// grant gives name to w.
func (t *Table) grant(now time.Time, e *entry, name string, w waiter) Reply {
	rep := Reply{Seq: w.seq, Term: t.term, Name: name, Holder: w.who}
	if t.grants == 1<<32-1 {
		rep.Code, rep.Message = CodeInvalid, "this term has used all its tokens; a new term (tenure resign on the leader) starts over"
		return rep
	}
	t.grants++
	e.held, e.holder, e.token, e.ttl, e.expiry, e.adopted, e.policy, e.revoking = true, w.who, Token(t.term, t.grants), w.ttl, now.Add(w.ttl), false, w.policy, false
	if w.group != "" {
		e.group = w.group
	}
	rep.Code, rep.Token, rep.TTL = CodeGranted, e.token, w.ttl
	return rep
}

// load counts, by node, the held leases that count.
func (t *Table) load(counts func(*entry) bool) map[string]int {
	load := map[string]int{}
	for _, e := range t.names {
		if e.held && counts(e) {
			load[e.holder.Node.Name]++
		}
	}
	return load
}

// pick returns the index of the waiter to grant: on the node with the
// least load, ties broken by the highest rendezvous hash of (name, node),
// so that different names land on different nodes and a name's choice
// does not depend on the queue's order.
func (t *Table) pick(name string, ws []waiter, load map[string]int) int {
	best := 0
	for i := 1; i < len(ws); i++ {
		a, b := ws[i], ws[best]
		la, lb := load[a.who.Node.Name], load[b.who.Node.Name]
		if la < lb || la == lb && rendezvous(name, a.who.Node) > rendezvous(name, b.who.Node) {
			best = i
		}
	}
	return best
}

func rendezvous(name string, n leasing.Node) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%s\x00%d", name, n.Name, n.ID)
	return h.Sum64()
}

// Tick ends the leases and waits that ran out by now, asks members
// holding more than their share of a group to give some back, and grants
// the names that became free; it returns the grants, to be pushed to
// their agents.
func (t *Table) Tick(now time.Time) []Reply {
	var pushes []Reply
	for _, name := range t.sorted() {
		t.expire(now, name, t.names[name])
	}
	t.rebalance(now)
	for _, name := range t.sorted() {
		e := t.names[name]
		pushes = append(pushes, t.next(now, name, e)...)
		t.drop(name, e)
	}
	return pushes
}

// rebalance marks partitions to revoke, so that every member of a group
// (a node holding or waiting for its partitions) ends up with its share of
// the partitions rounded down or up: one at a time, a partition moves
// from a richer member to a poorer one, while the poorer holds less than
// its share rounded down and the richer more than it, or the richer more
// than its share rounded up and the poorer less. Only partitions that must
// move do; nothing moves while the group is within those bounds.
//
// A partition is revoked only for a member that waits for that very
// partition: the revoked partition goes to the least loaded of its own
// waiters, so revoking one the poorer member does not wait for would hand
// it back to its holder, and again at every tick. The poorest member that
// can be helped is served first, from the richest member holding one of
// the partitions it waits for (the last by name).
//
// Only members that wait can be given a partition. A member that holds
// partitions and waits for none is either holding every partition it
// asked for (then it is the richest) or gone (its agent failed, DropNode
// removed its waits, and its leases run out): revoking partitions for it
// would only hand them from one live member to the next until its last
// lease ran out.
func (t *Table) rebalance(now time.Time) {
	for _, g := range t.shareLoads() {
		for _, part := range g.moves() {
			t.names[part].revoking = true
		}
	}
}

// shareLoad is a Share group as rebalance sees it: how many partitions it
// has, and the members holding or waiting for them, by node name.
type shareLoad struct {
	parts   int
	members map[string]*shareMember
}

// shareMember is a node's part in a Share group.
type shareMember struct {
	held  []string        // not being revoked, sorted by name
	waits map[string]bool // the group's partitions it waits for
}

// shareLoads collects the load of the table's Share groups, by group name.
func (t *Table) shareLoads() map[string]*shareLoad {
	groups := map[string]*shareLoad{}
	for _, name := range t.sorted() {
		e := t.names[name]
		if e.policy != Share || e.group == "" {
			continue
		}
		g := groups[e.group]
		if g == nil {
			g = &shareLoad{members: map[string]*shareMember{}}
			groups[e.group] = g
		}
		g.parts++
		if e.held {
			m := g.member(e.holder.Node.Name)
			if !e.revoking {
				m.held = append(m.held, name)
			}
		}
		for _, w := range e.waiters {
			g.member(w.who.Node.Name).waits[name] = true
		}
	}
	return groups
}

// member returns node's entry in g, adding it if need be.
func (g *shareLoad) member(node string) *shareMember {
	m := g.members[node]
	if m == nil {
		m = &shareMember{waits: map[string]bool{}}
		g.members[node] = m
	}
	return m
}

// moves returns the partitions of g to revoke, in order.
func (g *shareLoad) moves() []string {
	n := len(g.members)
	if n == 0 {
		return nil // only names nobody holds or waits for, about to go
	}
	nodes := slices.Sorted(maps.Keys(g.members))
	// count is what each member holds once the moves made so far land (a
	// revoked partition goes to a waiter as poor as the one it was
	// revoked for, or poorer).
	count := map[string]int{}
	for _, node := range nodes {
		count[node] = len(g.members[node].held)
	}
	low, high := g.parts/n, (g.parts+n-1)/n
	var out []string
	for {
		poor, rich, part := g.nextMove(nodes, count, low, high)
		if part == "" {
			return out
		}
		out = append(out, part)
		m := g.members[rich]
		m.held = slices.DeleteFunc(m.held, func(s string) bool { return s == part })
		delete(g.members[poor].waits, part)
		count[rich]--
		count[poor]++
	}
}

// nextMove is the partition to move next: for the poorest member that can
// be helped, from the richest member holding one it waits for, the last
// such by name; ties go to the first member by name. part is "" when
// nothing must move.
func (g *shareLoad) nextMove(nodes []string, count map[string]int, low, high int) (poor, rich, part string) {
	byCount := func(sign int) []string {
		out := slices.Clone(nodes)
		slices.SortStableFunc(out, func(a, b string) int { return sign * cmp.Compare(count[a], count[b]) })
		return out
	}
	richest := byCount(-1)
	for _, to := range byCount(1) {
		for _, from := range richest {
			if !(count[to] < low && count[from] > low || count[from] > high && count[to] < high) {
				continue
			}
			for _, name := range slices.Backward(g.members[from].held) {
				if g.members[to].waits[name] {
					return to, from, name
				}
			}
		}
	}
	return "", "", ""
}

// DropNode removes every waiter on node (its agent failed or left): no
// grant goes to a node that cannot use it. Held leases stay until they run
// out: a node gossip calls failed may only be cut off, still acting.
func (t *Table) DropNode(now time.Time, node string) []Reply {
	var pushes []Reply
	for _, name := range t.sorted() {
		e := t.names[name]
		e.waiters = slices.DeleteFunc(e.waiters, func(w waiter) bool { return w.who.Node.Name == node })
		pushes = append(pushes, t.next(now, name, e)...)
		t.drop(name, e)
	}
	return pushes
}

func (t *Table) sorted() []string {
	names := make([]string, 0, len(t.names))
	for n := range t.names {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Info describes one name, for listings.
type Info struct {
	Name      string
	Policy    Policy
	Held      bool
	Holder    Holder
	Token     uint64
	Remaining time.Duration // of the holder's lease, on the leader's clock
	Adopted   bool          // re-claimed from an earlier term
	Waiters   []Holder
	Group     string // of a partition
	Revoking  bool   // the holder was asked to give it back
}

// List describes every name with a holder or a waiter at now, by name.
func (t *Table) List(now time.Time) []Info {
	var out []Info
	for _, name := range t.sorted() {
		e := t.names[name]
		t.expire(now, name, e)
		if !e.held && len(e.waiters) == 0 {
			continue
		}
		in := Info{Name: name, Policy: e.policy, Held: e.held, Adopted: e.adopted, Group: e.group, Revoking: e.revoking}
		if e.held {
			in.Holder, in.Token, in.Remaining = e.holder, e.token, e.expiry.Sub(now)
		}
		for _, w := range e.waiters {
			in.Waiters = append(in.Waiters, w.who)
		}
		out = append(out, in)
	}
	return out
}

// Next returns the earliest instant the table needs a Tick (a lease or a
// wait running out, the grace ending while someone waits), or zero.
func (t *Table) Next() time.Time {
	var next time.Time
	early := func(at time.Time) {
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	for _, e := range t.names {
		if e.held {
			early(e.expiry)
		}
		for _, w := range e.waiters {
			early(w.expiry)
		}
		if len(e.waiters) > 0 {
			early(t.graceEnd)
			if !e.gathered.IsZero() {
				early(e.gathered)
			}
		}
	}
	return next
}
