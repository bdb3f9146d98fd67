package leasing

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
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

// Roster is the set of voters whose majority grants a lease. It changes one
// voter at a time, each version stored on a majority of the old and of the
// new roster before it counts, so any two majorities ever used intersect.
type Roster struct {
	// ClusterID names the cluster; rosters of different clusters never mix.
	ClusterID string `msgpack:"cluster" json:"cluster_id"`
	// Version grows by one with every change.
	Version uint64 `msgpack:"version" json:"version"`
	// Voters, sorted by name.
	Voters []Node `msgpack:"voters" json:"voters"`
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
	return Roster{ClusterID: hex.EncodeToString(h.Sum(nil))[:16], Version: 1, Voters: vs}
}

// IsZero reports whether r is no roster (a node not yet bootstrapped or
// admitted).
func (r Roster) IsZero() bool { return r.Version == 0 }

// Majority is how many grants a lease needs: more than half the voters.
func (r Roster) Majority() int { return len(r.Voters)/2 + 1 }

// Contains reports whether n is a voter of r.
func (r Roster) Contains(n Node) bool { return slices.Contains(r.Voters, n) }

// With returns the next version with n added.
func (r Roster) With(n Node) Roster {
	return Roster{ClusterID: r.ClusterID, Version: r.Version + 1, Voters: sortedNodes(append(slices.Clone(r.Voters), n))}
}

// Without returns the next version with n removed.
func (r Roster) Without(n Node) Roster {
	vs := slices.DeleteFunc(slices.Clone(r.Voters), func(v Node) bool { return v == n })
	return Roster{ClusterID: r.ClusterID, Version: r.Version + 1, Voters: vs}
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
	return fmt.Sprintf("%s v%d [%s]", r.ClusterID, r.Version, strings.Join(r.Names(), " "))
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
	s := &RosterStore{path: path}
	data, err := readBounded(path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("leasing: read roster file: %w", err)
	}
	if s.roster, err = decodeRoster(data); err != nil {
		return nil, fmt.Errorf("%w: %s: %v (refusing to start: restore the file, or remove it only to re-admit this node as a fresh one)", ErrCorrupt, path, err)
	}
	return s, nil
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
	if err := writeFileAtomic(s.path, data, 0o600); err != nil {
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
	return r, nil
}
