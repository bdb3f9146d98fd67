package gossip

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/tenurehq/tenure/internal/fsutil"
)

// announceNewAddress brings this node's address, which changed since its
// previous run, to the members that hold its name at the old one: a host
// back with a new address (a new DHCP lease, a rescheduled container)
// before the others noticed it gone.
//
// The others refuse the new address as a conflict while they hold the
// old one alive or suspect, and take it once they have declared the old
// one failed (Timing.DeadNodeReclaimTime), but only from a message sent
// after that, and they send this node nothing (they list only the old
// address): it hears of their suspicion only if a message of theirs
// happens to carry it, and then refutes it at once, too early. Otherwise
// nothing more reached them until a full state sync (30 s apart on a LAN):
// the others listed such a node 49-60 s after it started. So it exchanges
// state with a random live member every two probe intervals until the old
// address has surely been declared failed (Timing.earlierRunGone after
// its start, for the cluster's size then):
// the first exchange after that teaches the member the new address, which
// it passes on. Its cost, a state exchange every 2 s for 12 s with three
// LAN members and a minute with six, is paid only after such a restart.
func (m *Membership) announceNewAddress(start time.Time) {
	defer m.wg.Done()
	t := m.cfg.Timing
	tick := time.NewTicker(2 * t.ProbeInterval)
	defer tick.Stop()
	for {
		select {
		case <-m.ctx.Done():
			return
		case now := <-tick.C:
			if now.Sub(start) > t.earlierRunGone(m.serf.NumNodes()) {
				m.logger.Debug("gossip: stopped announcing this node's new address", "after", now.Sub(start))
				return
			}
			m.greetRandomPeer()
		}
	}
}

// greetRandomPeer exchanges state with a random live member.
func (m *Membership) greetRandomPeer() {
	if peer, ok := m.randomLivePeer(nil); ok {
		if addr, ok := memberAddr(peer); ok {
			m.greet(peer.Name, addr.String())
		}
	}
}

// startAnnouncing starts announceNewAddress, once.
func (m *Membership) startAnnouncing() {
	if !m.announcing.Swap(true) && m.track() {
		go m.announceNewAddress(time.Now())
	}
}

// claimPings is how many pings checkClaims sends to an address before it
// takes the address for one where nothing answers.
const claimPings = 3

// checkClaims pings, under this node's name, each other address from
// which news of that name came (conflictGate.claimAt), and tells the gate
// what it found. Where nothing answers, the news was of an earlier run of
// this node, and it announces its new address, as after a restart the
// address file names (announceNewAddress). Where a node answers, it is
// another node given this node's name, and this node exchanges state
// with a live member so that the news comes again, now to serf's
// resolution. A node at that address under another name does not answer
// (memberlist acks only pings for its own name).
func (m *Membership) checkClaims() {
	defer m.wg.Done()
	for {
		select {
		case <-m.ctx.Done():
			return
		case at := <-m.conflict.pings:
			answered := m.pingSelfAt(at)
			if m.conflict.settle(time.Now(), at, answered, m.serf.NumNodes()) {
				m.logger.Warn("gossip: news of this node's name still comes from another address, where nothing answers, after an earlier run of this node there would have been declared failed: taken for another node with this name that this node cannot reach; serf resolves the conflict, and one of the two stops",
					"other", at.String(), "this", m.conflict.self.String())
				m.greetRandomPeer()
				continue
			}
			if !answered {
				m.logger.Info("gossip: the others list this node's name at another address, where nothing answers: taken for an earlier run of this node; announcing its address now",
					"previous", at.String(), "now", m.conflict.self.String())
				m.startAnnouncing()
				continue
			}
			m.logger.Warn("gossip: another node answers under this node's name; serf resolves the conflict, and one of the two stops",
				"other", at.String(), "this", m.conflict.self.String())
			m.greetRandomPeer()
		}
	}
}

// pingSelfAt reports whether a node answers a ping for this node's name
// at at, of claimPings sent one probe timeout apart.
func (m *Membership) pingSelfAt(at netip.AddrPort) bool {
	for range claimPings {
		if m.ctx.Err() != nil {
			return false
		}
		_, err := m.serf.Memberlist().Ping(m.cfg.Name, net.UDPAddrFromAddrPort(at))
		if err == nil {
			return true
		}
		var silent memberlist.NoPingResponseError
		if !errors.As(err, &silent) {
			m.logger.Debug("gossip: ping of another address of this node's name", "at", at.String(), "err", err)
			select { // a send that failed at once: wait as a timeout would
			case <-m.ctx.Done():
			case <-time.After(m.cfg.Timing.ProbeTimeout):
			}
		}
	}
	return false
}

// errPreviousRun is the reason memberlist is given for ignoring news of
// this node at an address where nothing answers: an earlier run's.
var errPreviousRun = errors.New("news of this node's previous run, at the address it had then")

// previousRun reads the address file (Config.AddrFile) for the gossip
// address this node advertised in its previous run, the zero AddrPort
// when there is none. A file that cannot be read is an error; one that
// does not hold an address is reported and then replaced (recordAddr).
func (m *Membership) previousRun() (netip.AddrPort, error) {
	if m.cfg.AddrFile == "" {
		return netip.AddrPort{}, nil
	}
	b, err := os.ReadFile(m.cfg.AddrFile)
	if errors.Is(err, fs.ErrNotExist) {
		return netip.AddrPort{}, nil
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("gossip: address file: %w", err)
	}
	ap, err := netip.ParseAddrPort(strings.TrimSpace(string(b)))
	if err != nil {
		m.logger.Warn("gossip: the address file does not hold an address; replacing it", "file", m.cfg.AddrFile, "err", err)
		return netip.AddrPort{}, nil
	}
	return unmapAddrPort(ap), nil
}

// notePreviousRun reads the address this node had in its previous run
// (previousRun) and records it; adv is the address it advertises now.
func (m *Membership) notePreviousRun(adv netip.AddrPort) error {
	prev, err := m.previousRun()
	if err != nil {
		return err
	}
	m.recorded = prev
	if m.moved() {
		m.logger.Info("gossip: this node's address changed since its last run; announcing the new one",
			"previous", prev.String(), "now", adv.String())
	}
	return nil
}

// moved reports whether the address file named another address than the
// one this node advertises: the node then announces its new address from
// the start (announceNewAddress), rather than once a ping of the old one
// has found nothing there (checkClaims).
func (m *Membership) moved() bool {
	return m.recorded.IsValid() && m.recorded != m.conflict.self
}

// recordAddr writes the gossip address this node advertises to the address
// file, unless it held that address at start.
func (m *Membership) recordAddr() error {
	if m.cfg.AddrFile == "" {
		return nil
	}
	now := m.LocalMember().Addr
	if m.recorded.IsValid() && m.recorded.String() == now {
		return nil
	}
	if err := fsutil.WriteFileAtomic(m.cfg.AddrFile, []byte(now+"\n"), 0o644); err != nil {
		return fmt.Errorf("gossip: address file: %w", err)
	}
	return nil
}
