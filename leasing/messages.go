package leasing

import "time"

// Kind is the kind of a lease request.
type Kind uint8

// The lease requests a candidate or leader sends to voters.
const (
	// Acquire asks for a new term's lease at a new, higher epoch.
	Acquire Kind = iota + 1
	// Renew extends the holder's promise at the same epoch.
	Renew
	// Release drops the holder's promise at once (resign, preemption,
	// graceful leave), so the next leader need not wait for it to expire.
	Release
)

var kindNames = map[Kind]string{Acquire: "acquire", Renew: "renew", Release: "release"}

// String returns the lower-case name of k.
func (k Kind) String() string {
	if s, ok := kindNames[k]; ok {
		return s
	}
	return "kind?"
}

// Request is a lease request from a candidate (or leader) to one voter.
type Request struct {
	Kind Kind `msgpack:"kind"`
	// Seq numbers the candidate's rounds; the reply echoes it, so a late
	// reply is never counted in a later round.
	Seq       uint64        `msgpack:"seq"`
	Candidate Node          `msgpack:"candidate"`
	Epoch     uint64        `msgpack:"epoch"`
	TTL       time.Duration `msgpack:"ttl"`
	// ClusterID and RosterVersion name the roster the candidate counts its
	// majority in.
	ClusterID     string `msgpack:"cluster"`
	RosterVersion uint64 `msgpack:"roster_version"`
	RosterEpoch   uint64 `msgpack:"roster_epoch"`
	// Relayed, on an acquire, is the release of an earlier term that the
	// candidate relays from its holder: the voter applies it before it
	// decides, as though the holder's own release had already arrived.
	// A leader that resigns sends its release to the voters and its
	// RESIGN to the others at once, each on its own connection; on a
	// loaded host the RESIGN can reach the successor, and the successor's
	// acquire a voter, before the release does, and the voter would
	// refuse the successor for a promise its holder has let go. Carrying
	// the release along makes that order impossible. Any other field of
	// the request does not apply to it.
	Relayed *Released `msgpack:"relayed,omitempty"`
	// Instance is the candidate's agent process: a random number it drew
	// at its start. Previous is the instance of the agent that ran on the
	// candidate's data dir before it, zero when none is known. A voter
	// promising the candidate's name to one instance refuses another
	// (ReasonOtherInstance) until that promise ends, unless the request
	// names that instance as its Previous (a restart on the same data
	// dir): two agents given one name and ID, each with a data dir of its
	// own, then never both hold a lease, whatever the network between
	// them. Zero (an older agent) is taken for any instance.
	Instance uint64 `msgpack:"instance,omitempty"`
	Previous uint64 `msgpack:"previous,omitempty"`
}

// Released names a term its holder released: a release relayed by another
// node (Request.Relayed).
type Released struct {
	Holder Node   `msgpack:"holder"`
	Epoch  uint64 `msgpack:"epoch"`
}

// Valid reports whether r names a holder and a term.
func (r Released) Valid() bool { return r.Holder.Name != "" && r.Epoch > 0 }

// Request returns r as the holder's own release.
func (r Released) Request() Request {
	return Request{Kind: Release, Candidate: r.Holder, Epoch: r.Epoch}
}

// Reason says why a voter refused.
type Reason string

// The reasons a voter refuses a request.
const (
	// ReasonPromised: the voter holds an unexpired promise to another node.
	ReasonPromised Reason = "promised"
	// ReasonOtherInstance: the voter holds an unexpired promise to another
	// agent process with the candidate's name and ID (Request.Instance):
	// two agents share a name, or the candidate restarted with its data
	// dir lost and waits for its earlier run's promise to end.
	ReasonOtherInstance Reason = "other-instance"
	// ReasonStaleEpoch: the epoch is not above the highest the voter granted.
	ReasonStaleEpoch Reason = "stale-epoch"
	// ReasonRestarting: the voter started less than one TTL ago and may have
	// forgotten a promise.
	ReasonRestarting Reason = "restarting"
	// ReasonOtherCluster: the candidate's roster belongs to another cluster.
	ReasonOtherCluster Reason = "other-cluster"
	// ReasonStaleRoster: the candidate's roster is older than the voter's;
	// the reply carries the newer one.
	ReasonStaleRoster Reason = "stale-roster"
	// ReasonNotVoter: the voter is not in its own roster (an observer, or
	// removed).
	ReasonNotVoter Reason = "not-voter"
	// ReasonNotHolder: a renewal from a node that does not hold the promise.
	ReasonNotHolder Reason = "not-holder"
	// ReasonStorage: the voter could not persist the epoch.
	ReasonStorage Reason = "storage-error"
	// ReasonTTL: the requested TTL is out of bounds.
	ReasonTTL Reason = "bad-ttl"
	// ReasonEpochJump: the epoch is far above anything the voter has seen:
	// a forged request, or a candidate far out of date.
	ReasonEpochJump Reason = "epoch-jump"
)

// Reply is a voter's answer.
type Reply struct {
	// Seq and Epoch echo the request's.
	Seq     uint64 `msgpack:"seq"`
	Epoch   uint64 `msgpack:"epoch"`
	Voter   Node   `msgpack:"voter"`
	Granted bool   `msgpack:"granted"`
	Reason  Reason `msgpack:"reason,omitempty"`
	// Highest is the highest epoch the voter has granted.
	Highest uint64 `msgpack:"highest"`
	// Holder is who the voter has promised, zero when nobody; Remaining is
	// how long that promise still runs.
	Holder    Node          `msgpack:"holder"`
	Remaining time.Duration `msgpack:"remaining"`
	// Acquiring says the promise to Holder was given to its acquire and
	// the holder has not renewed it since; Age is how long ago that
	// acquire was granted. Such a holder's round may still be deciding: if
	// it fails, the holder releases the promise when its budget ends, so a
	// candidate refused for it need not wait for the whole promise.
	Acquiring bool          `msgpack:"acquiring,omitempty"`
	Age       time.Duration `msgpack:"age,omitempty"`
	// Roster is the voter's roster when it is newer than the candidate's.
	Roster *Roster `msgpack:"roster,omitempty"`
	// Longest is the longest TTL the voter has ever promised (recorded
	// before each grant), 0 when its record has none: a new leader waits
	// that long before it grants names nobody re-claimed (package named).
	Longest time.Duration `msgpack:"longest,omitempty"`
	// First says the voter had granted nothing before this grant (its
	// record of the highest epoch granted was 0): no earlier term can have
	// counted it.
	First bool `msgpack:"first,omitempty"`
}
