package gossip

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/tenurehq/tenure/internal/fsutil"
)

// readdressWatch brings this node's address to members that hold its name
// at another address: a host that restarted with a new address (a new
// DHCP lease, a rescheduled container) while the others still listed the
// old one.
//
// The others refuse the new address as a conflict while they hold the old
// one alive or suspect, and take it once they have declared the old one
// failed (Timing.DeadNodeReclaimTime), but only from a message sent after
// that: this node refuted their suspicion at once, and they refused the
// refutation, and then nothing more reached them until a full state sync
// (30 s apart on a LAN; serf's reconnect tries the old address).
// Measured: a node back on a new address 6 s after a crash was listed by
// the others 60 s after it started. So when this node refutes a
// suspicion of itself (memberlist logs it), it exchanges state with a
// member once the suspicion, wherever it began, has run out (the shortest
// and the longest suspicion, SuspicionTimeout, and two gossip intervals for
// the news): if the member had refused the refutation, it now takes the
// new address and passes it on. A suspicion refuted in time costs one or
// two state exchanges.
type readdressWatch struct {
	refuted chan string  // who suspected this node, from memberlist's log ("" when unknown)
	pending atomic.Int32 // greets scheduled and not yet made
}

func newReaddressWatch() *readdressWatch {
	return &readdressWatch{refuted: make(chan string, 1)}
}

// refutePrefix and refuteSuffix frame the name of the member that
// suspected this node in memberlist's log line when it refutes the
// suspicion. In a full state sync, memberlist names this node itself.
const (
	refutePrefix = "Refuting a suspect message (from: "
	refuteSuffix = ")"
)

// observe reads one of memberlist's log messages for a refuted suspicion
// of this node; it never blocks (it runs under memberlist's locks).
func (w *readdressWatch) observe(component, msg string) {
	passName(w.refuted, component, msg, refutePrefix, refuteSuffix) // one pending greets the same way
}

// noteRefuted schedules the greets that follow a refuted suspicion of
// this node by the member from, unless greets are still pending from an
// earlier one.
func (m *Membership) noteRefuted(from string) {
	if m.readdress.pending.Load() > 0 {
		return
	}
	lo, hi := m.cfg.Timing.SuspicionTimeout(m.serf.NumNodes())
	news := 2 * m.cfg.Timing.GossipInterval
	waits := []time.Duration{lo + news}
	if hi > lo {
		waits = append(waits, hi+news)
	}
	for _, d := range waits {
		m.readdress.pending.Add(1)
		time.AfterFunc(d, func() {
			defer m.readdress.pending.Add(-1)
			m.greetAfterRefute(from)
		})
	}
}

// greetAfterRefute exchanges state with the member from if it is listed
// alive, else with one picked at random: either passes this node's
// address on.
func (m *Membership) greetAfterRefute(from string) {
	if m.ctx.Err() != nil {
		return
	}
	var pick Member
	n := 0
	for _, mem := range m.Members() {
		if mem.Name == m.cfg.Name || mem.Status != StatusAlive {
			continue
		}
		if mem.Name == from {
			pick = mem
			break
		}
		if n++; rand.IntN(n) == 0 {
			pick = mem
		}
	}
	if pick.Name != "" {
		m.greet(pick.Name, pick.Addr)
	}
}

// errPreviousRun is the reason memberlist is given for ignoring news of
// this node at the address it had in its previous run.
var errPreviousRun = errors.New("news of this node's previous run, at the address it had then")

// previousRun reads the address file (Config.AddrFile) for the gossip
// address this node advertised in its previous run, "" when there is
// none. A file that cannot be read is an error; one that does not hold an
// address is reported and then replaced.
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
// (previousRun) and, when it is not the address it advertises now (the
// netLayer's final advertise address of mc), hands it to the conflict gate,
// which ignores news of it.
func (m *Membership) notePreviousRun(nl *netLayer, mc *memberlist.Config) error {
	prev, err := m.previousRun()
	if err != nil || !prev.IsValid() {
		return err
	}
	ip, port, err := nl.FinalAdvertiseAddr(mc.AdvertiseAddr, mc.AdvertisePort)
	if err != nil {
		return fmt.Errorf("gossip: advertise address: %w", err)
	}
	now, ok := netip.AddrFromSlice(ip)
	if !ok {
		return fmt.Errorf("gossip: advertise address %v", ip)
	}
	if cur := netip.AddrPortFrom(now.Unmap(), uint16(port)); cur != prev {
		m.conflict.previous = prev
		m.logger.Info("gossip: this node's address changed since its last run; news of the old one is ignored",
			"previous", prev.String(), "now", cur.String())
	}
	return nil
}

// recordAddr writes the gossip address this node advertises to the address
// file, unless it holds that address already.
func (m *Membership) recordAddr() error {
	if m.cfg.AddrFile == "" {
		return nil
	}
	now := m.LocalMember().Addr
	if b, err := os.ReadFile(m.cfg.AddrFile); err == nil && strings.TrimSpace(string(b)) == now {
		return nil
	}
	if err := fsutil.WriteFileAtomic(m.cfg.AddrFile, []byte(now+"\n"), 0o644); err != nil {
		return fmt.Errorf("gossip: address file: %w", err)
	}
	return nil
}

func unmapAddrPort(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}
