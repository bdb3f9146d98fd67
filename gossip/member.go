package gossip

import (
	"fmt"
	"maps"
	"strconv"
)

// Status is a member's state as this node's gossip sees it.
type Status int

const (
	// StatusAlive means the member answers probes.
	StatusAlive Status = iota
	// StatusLeaving means the member announced a graceful leave that has not
	// finished yet.
	StatusLeaving
	// StatusLeft means the member left gracefully. Serf forgets it after
	// Timing.TombstoneTimeout.
	StatusLeft
	// StatusFailed means the member stopped answering probes and did not
	// refute the suspicion in time. Serf keeps trying to reconnect to it until
	// Timing.ReconnectTimeout.
	StatusFailed
)

// String returns "alive", "leaving", "left" or "failed".
func (s Status) String() string {
	switch s {
	case StatusAlive:
		return "alive"
	case StatusLeaving:
		return "leaving"
	case StatusLeft:
		return "left"
	case StatusFailed:
		return "failed"
	}
	return "status(" + strconv.Itoa(int(s)) + ")"
}

// Member is one node of the cluster as this node's gossip sees it. A Member is
// a value: its Tags map is a copy that the receiver may keep or change.
type Member struct {
	// Name is the member's unique node name.
	Name string
	// ID is the member's node ID from its "id" tag; 0 if the tag is missing or
	// unparseable (a warning is logged once per member name).
	ID uint64
	// Addr is the member's gossip address, host:port.
	Addr string
	// PeerAddr is the peer transport address the member advertises ("" if
	// none).
	PeerAddr string
	// Voter reports whether the member grants leases.
	Voter bool
	// Eligible reports whether the member may lead.
	Eligible bool
	// Tags holds the member's extra tags, without the reserved ones. Never
	// nil.
	Tags map[string]string
	// Status is the member's state.
	Status Status
}

// EventType says what happened to a member.
type EventType int

const (
	// EventJoin reports a member that became alive: a new member, or a failed
	// or left one that came back.
	EventJoin EventType = iota
	// EventLeave reports a member that left gracefully.
	EventLeave
	// EventFailed reports a member declared failed.
	EventFailed
	// EventUpdate reports a member whose tags changed.
	EventUpdate
	// EventReap reports a failed or left member that serf forgot after
	// Timing.ReconnectTimeout or Timing.TombstoneTimeout.
	EventReap
)

// String returns "member-join", "member-leave", "member-failed",
// "member-update" or "member-reap".
func (t EventType) String() string {
	switch t {
	case EventJoin:
		return "member-join"
	case EventLeave:
		return "member-leave"
	case EventFailed:
		return "member-failed"
	case EventUpdate:
		return "member-update"
	case EventReap:
		return "member-reap"
	}
	return "event(" + strconv.Itoa(int(t)) + ")"
}

// Event is one membership change of one member. Member holds the member's
// state at the time of the event.
type Event struct {
	// Type says what happened.
	Type EventType
	// Member is the member it happened to.
	Member Member
}

// Reserved tag keys. They are short because serf limits a member's encoded
// tags to 512 bytes.
const (
	tagID       = "id"   // node ID, decimal
	tagPeer     = "peer" // peer transport address
	tagVoter    = "v"    // "1" voter, "0" observer
	tagEligible = "e"    // "1" may lead, "0" may not
	tagLeaving  = "l"    // "1" this run of the node is leaving, "0" it is not (see leaveWatch)
)

// isReservedTag reports whether k is one of the keys gossip sets itself.
func isReservedTag(k string) bool {
	switch k {
	case tagID, tagPeer, tagVoter, tagEligible, tagLeaving:
		return true
	}
	return false
}

// checkExtraTags rejects extra tags that use a reserved key.
func checkExtraTags(extra map[string]string) error {
	for k := range extra {
		if isReservedTag(k) {
			return fmt.Errorf("gossip: tag %q is reserved", k)
		}
	}
	return nil
}

// localIdentity is what the local node advertises in its reserved tags.
type localIdentity struct {
	id       uint64
	peerAddr string
	voter    bool
	eligible bool
	leaving  bool // Leave has begun: the last tags this run advertises
}

// encodeTags merges the reserved tags of id with the extra tags.
func encodeTags(id localIdentity, extra map[string]string) map[string]string {
	tags := make(map[string]string, len(extra)+5)
	maps.Copy(tags, extra)
	tags[tagID] = strconv.FormatUint(id.id, 10)
	tags[tagVoter] = flag(id.voter)
	tags[tagEligible] = flag(id.eligible)
	tags[tagLeaving] = flag(id.leaving)
	if id.peerAddr != "" {
		tags[tagPeer] = id.peerAddr
	}
	return tags
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// decodedTags is a member's tags split into reserved fields and extras.
type decodedTags struct {
	id       uint64
	idErr    error // set when the id tag is missing or unparseable
	peerAddr string
	voter    bool
	eligible bool
	extra    map[string]string
}

// decodeTags splits tags into the reserved fields and a fresh map of extras.
func decodeTags(tags map[string]string) decodedTags {
	d := decodedTags{
		peerAddr: tags[tagPeer],
		voter:    tags[tagVoter] == "1",
		eligible: tags[tagEligible] == "1",
		extra:    make(map[string]string, len(tags)),
	}
	if s, ok := tags[tagID]; !ok {
		d.idErr = fmt.Errorf("gossip: no %q tag", tagID)
	} else if id, err := strconv.ParseUint(s, 10, 64); err != nil {
		d.idErr = fmt.Errorf("gossip: bad %q tag %q: %w", tagID, s, err)
	} else {
		d.id = id
	}
	for k, v := range tags {
		if !isReservedTag(k) {
			d.extra[k] = v
		}
	}
	return d
}
