package leasing

import (
	"fmt"
	"time"
)

// GrantStore durably records what a voter has promised: the highest epoch
// it granted and the longest TTL it promised. *VoterStore (from
// OpenVoterStore) implements it.
type GrantStore interface {
	// Epoch returns the highest stored epoch.
	Epoch() uint64
	// LongestTTL returns the longest TTL stored.
	LongestTTL() time.Duration
	// Raise stores epoch if higher, returning once it is durable.
	Raise(epoch uint64) error
	// Record stores epoch and ttl where higher, returning once durable.
	Record(epoch uint64, ttl time.Duration) error
}

// VoterConfig configures a Voter.
type VoterConfig struct {
	// TTL is this node's own lease TTL: the shortest restart hold.
	TTL time.Duration
	// MaxTTL is the longest TTL a request may ask for; longer requests are
	// refused. It bounds every promise this voter gives.
	MaxTTL time.Duration
	// Restarted says the voter may have promised something before now that
	// it no longer remembers (its data dir names it in a roster). A voter
	// whose store holds a grant or a TTL is taken as restarted anyway.
	Restarted bool
}

// Voter is the voter side of the lease protocol: a deterministic state
// machine over the caller's clock. Its only I/O is the GrantStore, written
// before a grant of a new epoch is returned. It is not safe for concurrent
// use; the agent's driver owns it.
type Voter struct {
	self    Node
	store   GrantStore
	started time.Time
	maxTTL  time.Duration
	holder  Node
	epoch   uint64
	expiry  time.Time
	granted time.Time // when the holder's last request was granted
	renewed bool      // the holder's last granted request was a renewal
	// instance is the holder's agent process (Request.Instance), zero
	// when its requests named none.
	instance uint64
	// released is, by holder, the highest term it released: a renewal of
	// it that arrives late (reordered after the release) is refused, so a
	// resigned leader is not promised again. It remembers at most
	// maxReleasers holders (forgetOldReleases): one slot for the last
	// release alone let any other node's release (a failed candidate's)
	// make the voter forget the resigned leader's. lastHolder is the node
	// last promised, whose release Standing reports.
	released   map[Node]uint64
	lastHolder Node
	// releasedFloor is the highest epoch any release named. An acquire
	// at or below it is refused: it is a candidate's request that arrived
	// after the same candidate gave the round up and released it (on an
	// overloaded host the release can overtake the acquire on another
	// connection), and granted it would hold this voter for a whole TTL
	// for a term nobody will use. Kept in memory only: after a restart the
	// restart hold outlasts any such request.
	releasedFloor uint64
	// storeErr is why the last grant could not be recorded (StoreErr).
	storeErr error
}

// StoreErr returns why the voter's last attempt to record a grant failed
// (it then refused with ReasonStorage), or nil when it succeeded.
func (v *Voter) StoreErr() error { return v.storeErr }

// NewVoter returns a voter that starts at now. A voter that may have
// promised before (cfg.Restarted, or its store holds a grant or a TTL)
// grants nothing until the longest promise it can have given has run out:
// the longest TTL its store recorded, and at least cfg.TTL. Every grant
// records its epoch and TTL in the store before the reply, so the hold
// always covers the promises of the voter's previous life.
func NewVoter(self Node, store GrantStore, now time.Time, cfg VoterConfig) *Voter {
	hold := time.Duration(0)
	if cfg.Restarted || store.Epoch() > 0 || store.LongestTTL() > 0 {
		hold = max(cfg.TTL, store.LongestTTL())
	}
	return &Voter{self: self, store: store, started: now.Add(hold), maxTTL: cfg.MaxTTL}
}

// Handle answers req, received at now, for a voter whose roster is r. An
// acquire's relayed release (Request.Relayed) is applied first.
func (v *Voter) Handle(now time.Time, req Request, r Roster) Reply {
	if rel := req.Relayed; rel != nil && req.Kind == Acquire && rel.Valid() {
		v.release(now, rel.Request())
	}
	rep := v.decide(now, req, r)
	rep.Seq, rep.Epoch = req.Seq, req.Epoch
	return rep
}

func (v *Voter) decide(now time.Time, req Request, r Roster) Reply {
	if req.Kind == Release {
		v.release(now, req)
		return v.reply(now, true, "")
	}
	if reason, roster := v.check(now, req, r); reason != "" {
		rep := v.reply(now, false, reason)
		rep.Roster = roster
		return rep
	}
	// Record the grant (an acquire's epoch, a renewal's too, and the TTL)
	// before promising, so a restart holds for as long as this promise.
	first := v.store.Epoch() == 0
	if err := v.store.Record(req.Epoch, req.TTL); err != nil {
		v.storeErr = fmt.Errorf("leasing: record the grant of epoch %d to %s: %w", req.Epoch, req.Candidate.Name, err)
		return v.reply(now, false, ReasonStorage)
	}
	v.storeErr = nil
	v.holder, v.epoch, v.expiry, v.granted = req.Candidate, req.Epoch, now.Add(req.TTL), now
	v.instance = req.Instance
	v.lastHolder = req.Candidate
	v.renewed = req.Kind == Renew
	rep := v.reply(now, true, "")
	rep.First = first
	return rep
}

// check returns why req must be refused, or "".
func (v *Voter) check(now time.Time, req Request, r Roster) (Reason, *Roster) {
	switch {
	case req.TTL <= 0 || req.TTL > v.maxTTL:
		return ReasonTTL, nil
	case r.IsZero() || !r.Contains(v.self):
		return ReasonNotVoter, nil
	case req.ClusterID != r.ClusterID:
		return ReasonOtherCluster, nil
	case r.Newer(Roster{Version: req.RosterVersion, Epoch: req.RosterEpoch}):
		return ReasonStaleRoster, &r
	case now.Before(v.started):
		return ReasonRestarting, nil
	case v.promisedElsewhere(now, req.Candidate):
		return ReasonPromised, nil
	case v.promisedOtherInstance(now, req):
		return ReasonOtherInstance, nil
	case req.Kind == Renew && req.Epoch <= v.released[req.Candidate]:
		return ReasonStaleEpoch, nil // a late renewal of a released term
	case req.Kind == Renew && req.Candidate == v.holder && req.Epoch < v.epoch:
		// A late renewal of an earlier term of the holder's, which has
		// moved to a later one: granted, it lowered the promise to that
		// term, and the term's late release then dropped the promise the
		// later term counts on.
		return ReasonStaleEpoch, nil
	}
	if req.Kind == Renew {
		// A renewal joins the leader's term: from the holder, or from a leader
		// this voter has not promised (it missed the acquire, its promise ran
		// out, or it granted a later epoch to a candidate that then failed),
		// once it has promised nobody else (checked above). Renewals come
		// only from a leader whose term already holds a majority, so this
		// adds promises to that term and cannot make a second leader. The
		// epoch rules apply to new terms: Acquire.
		return "", nil
	}
	if req.Epoch <= v.highest() {
		return ReasonStaleEpoch, nil
	}
	return "", nil
}

// highest is the epoch a new term must exceed: the highest stored, or
// released, whichever is higher.
func (v *Voter) highest() uint64 { return max(v.store.Epoch(), v.releasedFloor) }

// Floor returns the epoch a new term must exceed at this voter: the
// highest it stored, or any release it applied named (a failed round
// released without a grant here raises it too). Its refusals carry the
// same value (Reply.Highest).
func (v *Voter) Floor() uint64 { return v.highest() }

func (v *Voter) promisedElsewhere(now time.Time, c Node) bool {
	return !v.holder.IsZero() && v.holder != c && now.Before(v.expiry)
}

// promisedOtherInstance reports whether the voter promises req's
// candidate as another agent process (Request.Instance) than the one that
// sent req, and req does not name that process as its Previous. Without
// it, an agent given another's name and ID (a host cloned with its
// hostname), cut off from the other's gossip so that serf's resolution of
// the name never stopped either, took the term from it as the same
// holder at the next epoch, each twin then took it back, and both led at
// once for most of the time (cmd/tenure: TestTwinsNeverLeadTogether).
func (v *Voter) promisedOtherInstance(now time.Time, req Request) bool {
	return v.holder == req.Candidate && now.Before(v.expiry) &&
		v.instance != 0 && req.Instance != 0 && req.Instance != v.instance && req.Previous != v.instance
}

// release drops the promise if req comes from its holder for its epoch.
// A release from another process of the holder's name (an acquire it
// gave up: promisedOtherInstance) changes nothing, not even the released
// terms, which would refuse the holder's renewals.
func (v *Voter) release(now time.Time, req Request) {
	if v.promisedOtherInstance(now, req) {
		return
	}
	if v.holder == req.Candidate && v.epoch == req.Epoch {
		v.holder, v.epoch, v.expiry, v.granted, v.instance = Node{}, 0, time.Time{}, time.Time{}, 0
	}
	if req.Epoch > v.released[req.Candidate] {
		if v.released == nil {
			v.released = map[Node]uint64{}
		}
		v.released[req.Candidate] = req.Epoch
		v.forgetOldReleases(req.Candidate)
	}
	if req.Epoch <= v.store.Epoch()+maxReleasedJump {
		v.releasedFloor = max(v.releasedFloor, req.Epoch)
	}
}

// maxReleasers is how many holders' releases a voter remembers.
const maxReleasers = 8

// forgetOldReleases keeps the releases of the maxReleasers holders with
// the highest epochs, and always those of keep (the node that just
// released) and of the node this voter promised last, whose overtaken
// renewal is the one to refuse: failed candidates' releases, however
// many, do not push it out.
func (v *Voter) forgetOldReleases(keep Node) {
	for len(v.released) > maxReleasers {
		var low Node
		found := false
		for n, e := range v.released {
			if n == keep || n == v.lastHolder {
				continue
			}
			if !found || e < v.released[low] || e == v.released[low] && n.Name < low.Name {
				low, found = n, true
			}
		}
		if !found {
			return
		}
		delete(v.released, low)
	}
}

// maxReleasedJump bounds how far above the stored epoch a release may
// raise the floor of new terms: a candidate releases the epoch it just
// tried, the highest it had seen plus one, never one far above every
// voter's.
const maxReleasedJump = 1024

// Promise returns the current holder and when its promise ends, if any.
func (v *Voter) Promise(now time.Time) (Node, time.Time, bool) {
	if v.holder.IsZero() || !now.Before(v.expiry) {
		return Node{}, time.Time{}, false
	}
	return v.holder, v.expiry, true
}

// Standing is a voter's promise as it stands at an instant, all on the
// voter's clock: whom it promised, for which term, until when, when the
// holder last renewed it, and from when the voter may grant a new term.
type Standing struct {
	// Holder and Epoch name the term promised; zero when no promise runs.
	Holder Node
	Epoch  uint64
	// Expiry ends the promise; Granted is when the holder's last request
	// (its acquire or latest renewal) was granted.
	Expiry  time.Time
	Granted time.Time
	// Free is the instant from which the voter may grant another node a
	// new term as far as time goes: its promise and its restart hold are
	// over (the epoch and roster rules still apply).
	Free time.Time
	// Released and ReleasedEpoch name the last term released by the node
	// this voter promised last (zero when none): a promise that ended
	// early, not one that ran out. Another node's release, such as a
	// failed candidate's, does not hide it.
	Released      Node
	ReleasedEpoch uint64
}

// Standing returns the voter's promise at now. A candidate that asks for
// a new term before Free is refused (promised or restarting).
func (v *Voter) Standing(now time.Time) Standing {
	st := Standing{Free: now}
	if e, ok := v.released[v.lastHolder]; ok {
		st.Released, st.ReleasedEpoch = v.lastHolder, e
	}
	if v.started.After(st.Free) {
		st.Free = v.started
	}
	if h, exp, ok := v.Promise(now); ok {
		st.Holder, st.Epoch, st.Expiry, st.Granted = h, v.epoch, exp, v.granted
		if exp.After(st.Free) {
			st.Free = exp
		}
	}
	return st
}

// LastRelease returns the highest epoch n has released to this voter
// since it started, 0 when none it remembers (it remembers the releases
// of the maxReleasers nodes with the highest epochs).
func (v *Voter) LastRelease(n Node) uint64 { return v.released[n] }

// Holding reports whether the voter is still in its startup hold at now.
func (v *Voter) Holding(now time.Time) bool { return now.Before(v.started) }

// HoldsPromiseFor reports whether v has an unexpired promise to c.
func (v *Voter) HoldsPromiseFor(now time.Time, c Node) bool {
	h, _, ok := v.Promise(now)
	return ok && h == c
}

func (v *Voter) reply(now time.Time, granted bool, reason Reason) Reply {
	rep := Reply{Voter: v.self, Granted: granted, Reason: reason, Highest: v.highest(), Longest: v.store.LongestTTL()}
	if h, exp, ok := v.Promise(now); ok {
		rep.Holder, rep.Remaining = h, exp.Sub(now)
		if !v.renewed {
			rep.Acquiring, rep.Age = true, now.Sub(v.granted)
		}
	}
	return rep
}

// String formats the voter's promise for logs.
func (v *Voter) String() string {
	return fmt.Sprintf("voter %s: holder=%s epoch=%d highest=%d", v.self.Name, v.holder.Name, v.epoch, v.store.Epoch())
}
