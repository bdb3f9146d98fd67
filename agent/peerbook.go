package agent

import (
	"sync"

	"github.com/tenurehq/tenure/bully"
	"github.com/tenurehq/tenure/gossip"
)

// addrBook maps member names to the peer addresses gossip advertises for
// them, rebuilt with the membership (syncMembers). Looking a peer up in
// it is O(1); converting and sorting every member for each message, as
// before, made a leader's COORDINATOR to n members cost O(n² log n). Safe
// for concurrent use.
type addrBook struct {
	mu    sync.Mutex
	addrs map[string]bookEntry
}

type bookEntry struct {
	id   uint64
	addr string
}

// set replaces the book with the members' peer addresses.
func (b *addrBook) set(members []gossip.Member) {
	addrs := make(map[string]bookEntry, len(members))
	for _, m := range members {
		if m.PeerAddr != "" {
			addrs[m.Name] = bookEntry{id: m.ID, addr: m.PeerAddr}
		}
	}
	b.mu.Lock()
	b.addrs = addrs
	b.mu.Unlock()
}

// lookup returns n's peer address, if the book has it.
func (b *addrBook) lookup(n bully.Node) (string, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	e, ok := b.addrs[n.Name]
	if !ok || e.id != n.ID {
		return "", false
	}
	return e.addr, true
}
