package gossip

import (
	"net/netip"
	"strings"
	"time"
)

// heardBuffer bounds the packets from watched members reported to the
// pump and not read yet; more are dropped (later packets report again).
const heardBuffer = 16

// healWatch ends, as soon as a link heals, the suspicions and failures
// that memberlist would otherwise keep after it. While a link works one
// way only, a member reads this node's suspicion on its probes and refutes
// it, but the refutation is lost on the way back; once the link heals, the
// probes carry the suspicion of the older incarnation, which the member
// ignores, and a probe answered does not end a suspicion. So it runs out:
// this node declares the member failed, after the heal, and takes it back
// only when the member refutes the news of its failure or at a reconnect
// or full sync (5 s and 30 s apart on a LAN). The fault harness saw members failed 4 and
// 21 s after a heal, and back 29 s after it, with the LAN profile
// (docs/RELIABILITY.md, "Production timing"). So this node watches the
// members it holds suspect (it began suspecting them: memberlist says so
// only in its log) or failed, and when a packet arrives from one of them
// (netLayer.noteHeard), the link works again: it exchanges state with the
// member (greet), and learns of the refutation, or the member reads that
// it is suspected or failed here and refutes at once. Each watched member
// is greeted at most once per regreet, and, as a returning member is
// (noteReturns), by greetFanout/n of the members on average. Not healed
// this way: two sides that both declared the other failed, which send each
// other nothing; serf's reconnect (every 5 s on a LAN) remains for them.
//
// Members that left are watched too, from quickLeaveBound after their
// leave (a leaving member still gossips for LeavePropagateDelay): a
// packet from one means that it is back and that this node missed its
// return. That happens when the return's incarnation is not above the
// leave's. The leave carries the incarnation of the member's last alive
// message, one above the one before it (the leaving mark is an update);
// a member that missed both (it was paused) keeps the member alive at the
// older one, and a new run that joins through it reads that and refutes
// it one above: the leave's. Memberlist lets a leave win a tie, sends
// nothing to a member it holds left and does not probe it, so the members
// that hold the leave would count the new run gone until one of them
// happened to pick it for a full state sync (30 s apart on a LAN; the
// fault harness saw a restarted leader held failed for 34 s,
// docs/RELIABILITY.md, "A returned node marked failed at once"). The
// greet hands it the leave, and it refutes above it. A member whose
// address another member now holds is not watched: greeting it would
// reach the other.
//
// Owned by the pump goroutine, but for suspects, which the log observer
// feeds.
type healWatch struct {
	timing    Timing
	suspects  chan string          // names memberlist began suspecting, from its log
	suspected map[string]time.Time // watched since
	failed    map[string]bool      // members last reported failed: the pump's, kept by noteReturns
	left      map[string]time.Time // members last reported left, and when
	addrs     map[string]string    // gossip address of each watched member (suspected, failed or left)
	greeted   map[string]time.Time // last greet of each member
}

func newHealWatch(t Timing) *healWatch {
	return &healWatch{timing: t, suspects: make(chan string, heardBuffer), suspected: map[string]time.Time{},
		failed: map[string]bool{}, left: map[string]time.Time{}, addrs: map[string]string{}, greeted: map[string]time.Time{}}
}

// suspectPrefix and suspectSuffix frame the name in memberlist's log line
// when one of its probes of a member failed and it suspects the member.
const (
	suspectPrefix = "Suspect "
	suspectSuffix = " has failed, no acks received"
)

// observe reads one of memberlist's log messages (newStdLogger) and
// passes on the name of a member it began suspecting; it never blocks.
func (w *healWatch) observe(component, msg string) {
	if component != "memberlist" || !strings.HasPrefix(msg, suspectPrefix) || !strings.HasSuffix(msg, suspectSuffix) {
		return
	}
	select {
	case w.suspects <- strings.TrimSuffix(strings.TrimPrefix(msg, suspectPrefix), suspectSuffix):
	default:
	}
}

// regreet is the least time between two greets of one watched member.
func (w *healWatch) regreet() time.Duration { return 4 * w.timing.ProbeInterval }

// suspect starts watching name, whose gossip address is addr ("" if this
// node does not list it), as suspected at now. It reports whether the
// watched addresses changed.
func (w *healWatch) suspect(name, addr string, now time.Time) bool {
	if addr == "" {
		return false
	}
	_, known := w.suspected[name]
	w.suspected[name], w.addrs[name] = now, addr
	return !known
}

// note updates the watch from membership events at now: a member that
// failed or left is watched, one that joined (alive again) or was reaped
// is not, nor is any other watched member at the address of one that
// joined or changed (the failed set itself is noteReturns'). It reports
// whether the watched addresses changed.
func (w *healWatch) note(evs []Event, now time.Time) bool {
	changed := false
	for _, e := range evs {
		name := e.Member.Name
		switch e.Type {
		case EventFailed:
			w.addrs[name] = e.Member.Addr
			delete(w.left, name)
			changed = true
		case EventLeave:
			delete(w.suspected, name)
			w.addrs[name], w.left[name] = e.Member.Addr, now
			changed = true
		case EventJoin, EventReap:
			changed = w.forget(name) || changed
		}
		if e.Type == EventJoin || e.Type == EventUpdate {
			for other, addr := range w.addrs {
				if other != name && addr == e.Member.Addr {
					changed = w.forget(other) || changed
				}
			}
		}
	}
	return changed
}

// forget stops watching name; it reports whether it was watched.
func (w *healWatch) forget(name string) bool {
	_, watched := w.addrs[name]
	delete(w.suspected, name)
	delete(w.left, name)
	delete(w.addrs, name)
	delete(w.greeted, name)
	return watched
}

// expire stops watching suspicions older than the longest a suspicion of
// a cluster of n members lasts (by then the member was refuted or
// failed), and forgets old greets. It reports whether the watched
// addresses changed.
func (w *healWatch) expire(now time.Time, n int) bool {
	_, longest := w.timing.SuspicionTimeout(n)
	changed := false
	for name, since := range w.suspected {
		if now.Sub(since) > longest+w.timing.ProbeInterval {
			delete(w.suspected, name)
			if !w.failed[name] {
				delete(w.addrs, name)
			}
			changed = true
		}
	}
	for name, at := range w.greeted {
		if now.Sub(at) > w.regreet() {
			delete(w.greeted, name)
		}
	}
	return changed
}

// watchList is the watched members by gossip address, for netLayer.watch.
func (w *healWatch) watchList() map[netip.AddrPort]string {
	out := make(map[netip.AddrPort]string, len(w.addrs))
	for name, addr := range w.addrs {
		if ap, err := netip.ParseAddrPort(addr); err == nil {
			out[unmapAddrPort(ap)] = name
		}
	}
	return out
}

// heard decides, at now, whether to greet the watched member name that a
// packet came from, in a cluster of n members. A suspected member
// greeted is no longer watched: the exchange brings its refutation, and
// if the link still fails, memberlist's next failed probe logs the
// suspicion again. It reports whether the watched addresses changed.
func (w *healWatch) heard(name string, now time.Time, n int) (addr string, greet, changed bool) {
	addr, ok := w.addrs[name]
	if !ok {
		return "", false, false
	}
	if at, ok := w.left[name]; ok && now.Sub(at) < quickLeaveBound(w.timing) {
		return "", false, false // still leaving: its last packets
	}
	if at, ok := w.greeted[name]; ok && now.Sub(at) < w.regreet() {
		return "", false, false
	}
	w.greeted[name] = now
	if !greetTurn(n) {
		return "", false, false
	}
	if _, ok := w.suspected[name]; ok && !w.failed[name] {
		delete(w.suspected, name)
		delete(w.addrs, name)
		changed = true
	}
	return addr, true, changed
}

// publishWatch hands the watched addresses to the transport.
func (m *Membership) publishWatch() {
	list := m.heal.watchList()
	m.net.watch.Store(&list)
}

// noteSuspect watches the member memberlist began suspecting.
func (m *Membership) noteSuspect(name string, now time.Time) {
	addr := ""
	for _, s := range m.serf.Members() {
		if s.Name == name {
			addr = m.convert(s).Addr
			break
		}
	}
	if m.heal.suspect(name, addr, now) {
		m.publishWatch()
	}
}

// noteHeard greets the watched member a packet came from, if its turn
// has come (healWatch.heard).
func (m *Membership) noteHeard(name string, now time.Time) {
	addr, greet, changed := m.heal.heard(name, now, m.serf.NumNodes())
	if changed {
		m.publishWatch()
	}
	if !greet {
		return
	}
	m.logger.Debug("gossip: a member held suspect, failed or left is heard again; exchanging state so that it refutes", "member", name, "addr", addr)
	m.greet(name, addr)
}
