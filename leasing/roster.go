package leasing

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"github.com/tenurehq/tenure/internal/fsutil"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Node identifies a voter or candidate: the same (ID, Name) pair the
// election ranks.
type Node struct {
	ID   uint64 `msgpack:"id" json:"id"`
	Name string `msgpack:"name" json:"name"`
}

// IsZero reports whether n is no node.
func (n Node) IsZero() bool { return n == Node{} }

// Roster is the set of voters whose majority grants a lease.
//
// It changes one voter at a time, in two steps, as Raft's joint consensus
// does: first a joint roster (Voters is the new set, Prev the old one) under
// which a lease needs a majority of both sets; once a majority of both has
// stored it, the final roster (Prev empty). Rosters are ordered by
// (Version, Epoch): the epoch of the term that proposed the change breaks
// the tie between two leaders' competing proposals. Voters refuse requests
// under an older roster, so any two majorities ever used intersect.
type Roster struct {
	// ClusterID names the cluster; rosters of different clusters never mix.
	ClusterID string `msgpack:"cluster" json:"cluster_id"`
	// Version grows with every step of a change.
	Version uint64 `msgpack:"version" json:"version"`
	// Epoch is the term that proposed this roster (0 for a bootstrap).
	Epoch uint64 `msgpack:"epoch" json:"epoch"`
	// Voters, sorted by name.
	Voters []Node `msgpack:"voters" json:"voters"`
	// Prev is the old voter set of a joint roster, empty otherwise.
	Prev []Node `msgpack:"prev,omitempty" json:"prev,omitempty"`
	// Seats is how many voters the cluster aims for: the bootstrap's
	// --expect, or the --voters of the leader that proposed this roster.
	// 0 in rosters written before it existed.
	Seats int `msgpack:"seats,omitempty" json:"seats,omitempty"`
}

// Bootstrap returns version 1 of a roster of voters, with a cluster ID
// derived from the voters, so that nodes bootstrapping from the same set
// agree on it without talking.
func Bootstrap(voters []Node) Roster {
	vs := sortedNodes(voters)
	h := sha256.New()
	for _, v := range vs {
		fmt.Fprintf(h, "%d/%s\n", v.ID, v.Name)
	}
	return Roster{ClusterID: hex.EncodeToString(h.Sum(nil))[:16], Version: 1, Voters: vs, Seats: len(vs)}
}

// MaxSeats bounds Roster.Seats (and --voters): more voters than this only
// slow every lease round down.
const MaxSeats = 99

// IsZero reports whether r is no roster (a node not yet bootstrapped or
// admitted).
func (r Roster) IsZero() bool { return r.Version == 0 }

// Majority is how many grants of Voters a lease needs: more than half.
func (r Roster) Majority() int { return len(r.Voters)/2 + 1 }

// Joint reports whether r is the joint step of a change.
func (r Roster) Joint() bool { return len(r.Prev) > 0 }

// Contains reports whether n is a voter of r (of either set of a joint
// roster).
func (r Roster) Contains(n Node) bool {
	return slices.Contains(r.Voters, n) || slices.Contains(r.Prev, n)
}

// Members returns every voter of r: Voters and Prev together.
func (r Roster) Members() []Node { return sortedNodes(append(slices.Clone(r.Voters), r.Prev...)) }

// Satisfied reports whether the voters in granted make a majority under r:
// of Voters, and of Prev too for a joint roster.
func (r Roster) Satisfied(granted func(Node) bool) bool {
	return majorityOf(r.Voters, granted) && (!r.Joint() || majorityOf(r.Prev, granted))
}

func majorityOf(set []Node, granted func(Node) bool) bool {
	n := 0
	for _, v := range set {
		if granted(v) {
			n++
		}
	}
	return n >= len(set)/2+1
}

// Newer reports whether r supersedes o: a later version, or the same
// version proposed in a later term.
func (r Roster) Newer(o Roster) bool {
	return r.Version > o.Version || (r.Version == o.Version && r.Epoch > o.Epoch)
}

// With returns the joint step of adding n, proposed in term epoch.
func (r Roster) With(n Node, epoch uint64) Roster {
	return r.joint(sortedNodes(append(slices.Clone(r.Voters), n)), epoch)
}

// Without returns the joint step of removing n, proposed in term epoch.
func (r Roster) Without(n Node, epoch uint64) Roster {
	return r.joint(slices.DeleteFunc(slices.Clone(r.Voters), func(v Node) bool { return v == n }), epoch)
}

// To returns the joint step of changing r's voters to voters (any number
// added and removed at once), proposed in term epoch by a leader that aims
// for seats voters.
func (r Roster) To(voters []Node, epoch uint64, seats int) Roster {
	j := r.joint(sortedNodes(voters), epoch)
	j.Seats = seats
	return j
}

func (r Roster) joint(voters []Node, epoch uint64) Roster {
	return Roster{ClusterID: r.ClusterID, Version: r.Version + 1, Epoch: epoch, Voters: voters, Prev: slices.Clone(r.Voters), Seats: r.Seats}
}

// Final returns the final step of the joint roster r, in term epoch.
func (r Roster) Final(epoch uint64) Roster {
	return Roster{ClusterID: r.ClusterID, Version: r.Version + 1, Epoch: epoch, Voters: slices.Clone(r.Voters), Seats: r.Seats}
}

// Names returns the voters' names.
func (r Roster) Names() []string {
	out := make([]string, len(r.Voters))
	for i, v := range r.Voters {
		out[i] = v.Name
	}
	return out
}

// String formats r for logs.
func (r Roster) String() string {
	s := fmt.Sprintf("%s v%d [%s]", r.ClusterID, r.Version, strings.Join(r.Names(), " "))
	if r.Joint() {
		prev := Roster{Voters: r.Prev}
		s += " joint with [" + strings.Join(prev.Names(), " ") + "]"
	}
	return s
}

func sortedNodes(ns []Node) []Node {
	out := slices.Clone(ns)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return slices.Compact(out)
}

const rosterHeader = "tenure-roster v1"

// RosterStore keeps a node's roster in a file, replaced atomically. It is
// safe for concurrent use.
type RosterStore struct {
	path string

	mu     sync.Mutex
	roster Roster
}

// OpenRosterStore reads the roster file at path; a missing file is the zero
// roster, a corrupt one an error wrapping ErrCorrupt that names the file.
func OpenRosterStore(path string) (*RosterStore, error) {
	r, _, err := readStateFile(path, "roster",
		"refusing to start: restore the file, or remove it only to re-admit this node as a fresh one",
		decodeRoster)
	if err != nil {
		return nil, err
	}
	return &RosterStore{path: path, roster: r}, nil
}

// Roster returns the stored roster.
func (s *RosterStore) Roster() Roster {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.roster
}

// Save durably stores r.
func (s *RosterStore) Save(r Roster) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	data, err := encodeRoster(r)
	if err != nil {
		return err
	}
	if err := fsutil.WriteFileAtomic(s.path, data, 0o600); err != nil {
		return fmt.Errorf("leasing: store roster v%d: %w", r.Version, err)
	}
	s.roster = r
	return nil
}

func encodeRoster(r Roster) ([]byte, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("leasing: encode roster: %w", err)
	}
	return encodeChecked(rosterHeader, append(b, '\n')), nil
}

func decodeRoster(data []byte) (Roster, error) {
	body, err := decodeChecked(rosterHeader, data)
	if err != nil {
		return Roster{}, err
	}
	var r Roster
	if err := json.Unmarshal(body, &r); err != nil {
		return Roster{}, fmt.Errorf("bad roster: %w", err)
	}
	if r.Version == 0 || r.ClusterID == "" || len(r.Voters) == 0 {
		return Roster{}, fmt.Errorf("incomplete roster %+v", r)
	}
	if r.Seats < 0 || r.Seats > MaxSeats {
		return Roster{}, fmt.Errorf("roster seats %d outside 0..%d", r.Seats, MaxSeats)
	}
	return r, nil
}
