package gossip

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/serf/serf"
)

// ErrShutdown is returned by Membership methods called after Shutdown.
var ErrShutdown = errors.New("gossip: membership shut down")

// serfEventBuffer is the capacity of the channel serf writes events to. The
// pump goroutine drains it continuously; the buffer only has to absorb the
// few events serf may still send while it shuts down, after the pump stopped.
const serfEventBuffer = 256

// Membership is this node's view of the cluster, kept by serf. Its methods
// are safe for concurrent use.
type Membership struct {
	cfg    Config
	logger *slog.Logger
	ident  localIdentity
	serf   *serf.Serf
	net    *netLayer
	events chan Event

	ctx      context.Context // cancelled by Shutdown
	cancel   context.CancelFunc
	wg       sync.WaitGroup // pump, join loop, Join calls
	tagsMu   sync.Mutex     // serialises SetTags
	conflict *conflictGate  // holds tag updates while serf resolves a name conflict
	joinMu   sync.Mutex     // guards stopJoin and joinDone
	stopJoin context.CancelFunc
	joinDone chan struct{} // closed when the join loop exits; nil if none

	mu        sync.Mutex
	closed    bool
	left      atomic.Bool     // Leave was called: no more tag updates
	warnedIDs map[string]bool // member names whose bad id tag was logged

	convMu    sync.Mutex                 // guards converted
	converted map[string]convertedMember // each member as Members last converted it
	leaves    *leaveWatch                // members serf holds leaving though alive (leaving.go)
	heal      *healWatch                 // members held suspect, failed or left, greeted when heard (heard.go)

	shutdownOnce sync.Once
	shutdownErr  error

	keys keyringState // gossip keyring and its watcher; see keyring.go

	recorded   netip.AddrPort // the address file's address at start (readdress.go)
	announcing atomic.Bool    // announceNewAddress was started
}

// Start starts gossip with a copy of cfg: it binds the gossip port, starts
// serf and, if cfg.Join is not empty, starts joining in the background. Call
// Shutdown (after Leave, to leave gracefully) to stop it.
func Start(cfg Config) (*Membership, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithCancel(context.Background())
	m := &Membership{
		cfg:       cfg,
		logger:    cfg.Logger.With("node", cfg.Name),
		ident:     localIdentity{id: cfg.ID, peerAddr: cfg.PeerAddr, voter: cfg.Voter, eligible: cfg.Eligible},
		events:    make(chan Event),
		ctx:       ctx,
		cancel:    cancel,
		warnedIDs: make(map[string]bool),
		converted: make(map[string]convertedMember),
		leaves:    newLeaveWatch(cfg.Timing),
		heal:      newHealWatch(cfg.Timing),
		conflict:  newConflictGate(cfg.Name, cfg.Timing, cfg.MaxMembers),
	}
	serfEvents := make(chan serf.Event, serfEventBuffer)
	if err := m.startSerf(serfEvents); err != nil {
		cancel()
		return nil, err
	}
	m.wg.Add(1)
	go m.pump(serfEvents)
	m.startKeyringWatch()
	if len(cfg.Join) > 0 || cfg.SnapshotPath != "" {
		m.startJoinLoop(cfg.Join)
	}
	if m.track() {
		go m.checkClaims()
	}
	if m.moved() {
		m.startAnnouncing()
	}
	if err := m.recordAddr(); err != nil {
		m.logger.Error("gossip: cannot record this node's address; after a restart on another address, it will take a few pings to know its old one", "err", err)
	}
	local := m.LocalMember()
	m.logger.Info("gossip started", "addr", local.Addr, "id", cfg.ID, "peer", cfg.PeerAddr,
		"encrypted", m.keys.ring != nil, "keyring", cfg.KeyringFile, "snapshot", cfg.SnapshotPath)
	return m, nil
}

// startSerf binds the gossip transport and creates serf.
func (m *Membership) startSerf(events chan serf.Event) error {
	ip, port, _ := splitBindAddr(m.cfg.BindAddr) // checked by Validate
	std := newStdLogger(m.logger, func(component, msg string) {
		m.conflict.observe(component, msg)
		m.heal.observe(component, msg)
	})
	nl, port, err := newNetLayer(m.ctx, netLayerConfig{
		ip: ip, port: port, logger: m.logger,
		maxMembers: m.cfg.MaxMembers, maxStreams: m.cfg.MaxInboundStreams, tcpTimeout: m.cfg.Timing.TCPTimeout,
	})
	if err != nil {
		return err
	}
	sc := m.serfConfig(ip, port, events, std)
	sc.MemberlistConfig.Transport = nl
	if err := m.setupKeyring(sc); err != nil {
		nl.Shutdown()
		return err
	}
	adv, err := m.precheck(nl, sc)
	if err == nil {
		m.conflict.self = adv
		err = m.notePreviousRun(adv)
	}
	if err != nil {
		nl.Shutdown()
		return err
	}
	s, err := serf.Create(sc)
	if err != nil {
		nl.Shutdown()
		return fmt.Errorf("gossip: start serf: %w", err)
	}
	m.serf, m.net = s, nl
	return nil
}

// precheck catches the usual ways serf.Create fails after it started
// goroutines that it then leaks: a snapshot file it cannot open, and an
// advertise address memberlist cannot work out. It returns that address.
func (m *Membership) precheck(nl *netLayer, sc *serf.Config) (netip.AddrPort, error) {
	if sc.SnapshotPath != "" {
		f, err := os.OpenFile(sc.SnapshotPath, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o644)
		if err != nil {
			return netip.AddrPort{}, fmt.Errorf("gossip: snapshot: %w", err)
		}
		f.Close()
	}
	mc := sc.MemberlistConfig
	ip, port, err := nl.FinalAdvertiseAddr(mc.AdvertiseAddr, mc.AdvertisePort)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("gossip: advertise address: %w", err)
	}
	addr, ok := netip.AddrFromSlice(ip)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("gossip: advertise address %v", ip)
	}
	return unmapAddrPort(netip.AddrPortFrom(addr, uint16(port))), nil
}

// serfConfig translates m.cfg into serf's configuration.
func (m *Membership) serfConfig(ip string, port int, events chan serf.Event, std *log.Logger) *serf.Config {
	// serf.DefaultConfig panics only if os.Hostname fails; NodeName is
	// overwritten below.
	sc := serf.DefaultConfig()
	sc.NodeName = m.cfg.Name
	sc.Tags = encodeTags(m.ident, m.cfg.Tags)
	sc.EventCh = events
	sc.Logger, sc.LogOutput = std, nil
	sc.SnapshotPath = m.cfg.SnapshotPath
	sc.RejoinAfterLeave = true
	mc := sc.MemberlistConfig
	mc.Logger, mc.LogOutput = std, nil
	mc.Alive = m.conflict // serf sets its own only with a Merge delegate, which tenure does not use
	mc.BindAddr, mc.BindPort, mc.AdvertisePort = ip, port, port
	if m.cfg.AdvertiseAddr != "" {
		host, advPort, _ := splitAdvertiseAddr(m.cfg.AdvertiseAddr) // checked by Validate
		mc.AdvertiseAddr = host
		if advPort != 0 {
			mc.AdvertisePort = advPort
		}
	}
	m.cfg.Timing.apply(sc, mc) // the keyring is set by setupKeyring
	// No LZW compression of gossip: a fleet's membership messages are
	// small, and compressing every packet (a new compressor each time) was
	// a tenth of an agent's CPU while a 100-agent fleet started. Members
	// that compress are still read.
	mc.EnableCompression = false
	return sc
}

// LocalMember returns this node as the cluster sees it.
func (m *Membership) LocalMember() Member {
	return m.convert(m.serf.LocalMember())
}

// Members returns every member serf knows, in any status, sorted by name.
// A member serf has held leaving past a real leave's bound while
// memberlist lists it alive is reported alive (leaveWatch). The Tags of
// the members returned are shared with later calls: read them, do not
// change them.
func (m *Membership) Members() []Member {
	sm := m.serf.Members()
	out := make([]Member, 0, len(sm))
	m.convMu.Lock()
	for _, s := range sm {
		c := m.convertCached(s)
		if c.Status == StatusLeaving && m.leaves.isRevived(c.Name) {
			c.Status = StatusAlive
		}
		out = append(out, c)
	}
	if len(m.converted) > 2*len(sm) {
		m.dropGone(sm)
	}
	m.convMu.Unlock()
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// convertedMember is a member as Members last converted it, with serf's
// view it came from.
type convertedMember struct {
	from serf.Member
	to   Member
}

// convertCached converts s, or returns the conversion of an unchanged
// member: an agent rebuilds its view from Members after gossip events,
// and while a fleet starts each rebuild converted every member afresh
// (decoding tags, formatting addresses), most of them unchanged. Called
// with m.convMu held.
func (m *Membership) convertCached(s serf.Member) Member {
	c, ok := m.converted[s.Name]
	if ok && c.from.Status == s.Status && c.from.Port == s.Port && c.from.Addr.Equal(s.Addr) && maps.Equal(c.from.Tags, s.Tags) {
		return c.to
	}
	c = convertedMember{from: s, to: m.convert(s)}
	c.from.Tags = maps.Clone(s.Tags) // serf replaces a member's tags; a copy is safe either way
	m.converted[s.Name] = c
	return c.to
}

// dropGone forgets the conversions of members serf no longer lists.
// Called with m.convMu held.
func (m *Membership) dropGone(listed []serf.Member) {
	keep := make(map[string]bool, len(listed))
	for _, s := range listed {
		keep[s.Name] = true
	}
	maps.DeleteFunc(m.converted, func(name string, _ convertedMember) bool { return !keep[name] })
}

// Events returns the channel of membership changes, one member per event, in
// the order serf reported them, starting with this node's own join. Events are queued without bound, so a slow
// reader never stalls gossip, but should keep up. The channel is closed after
// Shutdown (events still queued are dropped), or if serf stops by itself
// (after losing a node-name conflict; this is logged as an error).
func (m *Membership) Events() <-chan Event {
	return m.events
}

// Join joins the cluster through the given gossip addresses ("ip" or
// "ip:port"; the port defaults to this node's gossip port) and returns how
// many of them are in this node's cluster now: those it exchanged state
// with, and those it found already listed alive (see join). An error means
// none was reached. A ctx that has ended already joins nothing; if ctx
// ends first, Join returns ctx's error and the attempt finishes in the
// background.
func (m *Membership) Join(ctx context.Context, addrs []string) (int, error) {
	if len(addrs) == 0 {
		return 0, errors.New("gossip: join: no addresses")
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("gossip: join %s: %w", strings.Join(addrs, ","), err)
	}
	if !m.track() {
		return 0, ErrShutdown
	}
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		defer m.wg.Done()
		r, err := m.join(addrs)
		done <- result{r.exchanged + r.listed, err}
	}()
	select {
	case r := <-done:
		return r.n, r.err
	case <-ctx.Done():
		return 0, fmt.Errorf("gossip: join %s: %w", strings.Join(addrs, ","), ctx.Err())
	}
}

// joinResult is what one join did with its addresses.
type joinResult struct {
	exchanged int // addresses it pushed and pulled state with
	listed    int // addresses it skipped: live members of its cluster already
	// second names the member, not one of the addresses, that it also
	// exchanged state with; "" if none.
	second string
}

// join contacts addrs in a random order, skipping each address that is by
// then the gossip address of a live member (this node's own included): the
// first exchange of state with a seed brings the whole membership that
// seed knows, so the other seeds of the same cluster are most often listed
// already, and contacting them again costs them a full exchange and this
// node its time. A seed not listed is contacted: it may have formed a
// cluster of its own, and the exchange merges the two. Every agent of a
// fleet that starts together names the same few seeds; contacting each in
// turn made every seed serve every joiner, and in a random order, one
// each, they share the joins.
//
// One exchange is always made when another member is listed: serf
// announces this node's join (a join intent) only on an exchange through
// its Join, and a node that returns after a graceful leave needs that
// announcement. Its snapshot may have brought it back before join runs,
// listing every seed; a member that knew it only by the leave it recorded
// (one that restarted while it was away) then took it for leaving for
// good (TestRestartAfterLeaveIsAliveToFreshMembers).
//
// After an exchange with a seed, join exchanges state with one more live
// member, picked at random among those that are not seeds (secondView).
func (m *Membership) join(addrs []string) (joinResult, error) {
	var r joinResult
	var errs []error
	var others []string // listed seeds that are not this node
	order := slices.Clone(addrs)
	rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	exchange := func(addr string) bool {
		n, err := m.serf.Join([]string{addr}, true)
		if n > 0 {
			r.exchanged++
			if err != nil {
				m.logger.Warn("gossip: announcing join", "err", err)
			}
			return true
		}
		if err == nil {
			err = errors.New("not reached")
		}
		errs = append(errs, err)
		return false
	}
	for _, addr := range order {
		if name, ok := m.listedAlive(addr); ok {
			r.listed++
			if name != m.cfg.Name {
				others = append(others, addr)
			}
			continue
		}
		exchange(addr)
	}
	for _, addr := range others {
		if r.exchanged > 0 {
			break
		}
		if exchange(addr) {
			r.listed--
		}
	}
	if r.exchanged+r.listed == 0 {
		return r, fmt.Errorf("gossip: join %s: %w", strings.Join(addrs, ","), errors.Join(errs...))
	}
	if r.exchanged > 0 {
		r.second = m.secondView(addrs)
	}
	return r, nil
}

// secondView exchanges state with one live member picked at random among
// those that are neither this node nor at one of the seed addresses, and
// returns its name ("" when there is none, or the exchange failed). What a
// joiner knows at first is its seed's view, and a member whose join the
// seed missed (on a loaded host gossip packets are dropped, and a join is
// retransmitted only so many times) stays unknown to the joiner until the
// periodic exchange, more than a minute later in a hundred members. A
// leader announces itself only to the members it lists: in one start of a
// hundred agents the leader's view lacked three members, which learned of
// it 13 s after the others. A second view, from a member rather than a
// seed, leaves the seeds one exchange per joiner. It goes through
// memberlist alone: serf's join would announce this node's join again.
func (m *Membership) secondView(seeds []string) string {
	isSeed := map[netip.AddrPort]bool{}
	for _, addr := range seeds {
		if at, ok := m.seedAddr(addr); ok {
			isSeed[at] = true
		}
	}
	s, ok := m.randomLivePeer(func(s serf.Member) bool {
		at, ok := memberAddr(s)
		return !ok || isSeed[at]
	})
	if !ok {
		return ""
	}
	addr := net.JoinHostPort(s.Addr.String(), strconv.Itoa(int(s.Port)))
	if _, err := m.serf.Memberlist().Join([]string{addr}); err != nil {
		m.logger.Debug("gossip: second exchange of state after the join failed", "member", s.Name, "err", err)
		return ""
	}
	return s.Name
}

// randomLivePeer picks at random a member other than this node that serf
// lists alive and skip (nil for none) does not leave out.
func (m *Membership) randomLivePeer(skip func(serf.Member) bool) (serf.Member, bool) {
	self := m.serf.LocalMember().Name
	var pick []serf.Member
	for _, s := range m.serf.Members() {
		if s.Status == serf.StatusAlive && s.Name != self && (skip == nil || !skip(s)) {
			pick = append(pick, s)
		}
	}
	if len(pick) == 0 {
		return serf.Member{}, false
	}
	return pick[rand.IntN(len(pick))], true
}

// listedAlive reports whether addr ("ip" or "ip:port") is the gossip
// address of a member serf lists alive, this node included, and names it.
// A host name is never listed: it may stand for other addresses.
func (m *Membership) listedAlive(addr string) (string, bool) {
	want, ok := m.seedAddr(addr)
	if !ok {
		return "", false
	}
	for _, s := range m.serf.Members() {
		if at, ok := memberAddr(s); ok && s.Status == serf.StatusAlive && at == want {
			return s.Name, true
		}
	}
	return "", false
}

// seedAddr parses a --join address given as an IP address, "ip" or
// "ip:port" (the port defaults to this node's gossip port); a host name is
// not parsed (ok is false).
func (m *Membership) seedAddr(addr string) (netip.AddrPort, bool) {
	host, port, err := splitAdvertiseAddr(addr)
	if err != nil {
		return netip.AddrPort{}, false
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return netip.AddrPort{}, false
	}
	if port == 0 {
		port = int(m.serf.LocalMember().Port)
	}
	return netip.AddrPortFrom(ip.Unmap(), uint16(port)), true
}

// memberAddr is the gossip address of member s.
func memberAddr(s serf.Member) (netip.AddrPort, bool) {
	ip, ok := netip.AddrFromSlice(s.Addr)
	return netip.AddrPortFrom(ip.Unmap(), s.Port), ok
}

// unmapAddrPort is ap with an IPv4-mapped IPv6 address made IPv4, as
// memberlist and the sockets give such addresses in either form.
func unmapAddrPort(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// track registers a goroutine that Shutdown must wait for, unless Shutdown
// has begun.
func (m *Membership) track() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	m.wg.Add(1)
	return true
}

// SetTags replaces this node's extra tags; the reserved tags stay. The change
// spreads by gossip as an EventUpdate.
func (m *Membership) SetTags(extra map[string]string) error {
	if err := checkExtraTags(extra); err != nil {
		return err
	}
	m.tagsMu.Lock()
	defer m.tagsMu.Unlock()
	if m.isClosed() || m.left.Load() {
		// After a leave memberlist no longer lists this node and would
		// crash re-advertising it.
		return ErrShutdown
	}
	if err := m.publishTags(encodeTags(m.ident, extra)); err != nil {
		return fmt.Errorf("gossip: set tags: %w", err)
	}
	return nil
}

// publishTags hands tags to serf, which advertises them, once no conflict
// over this node's name is being resolved; if a resolution started while
// serf advertised them, memberlist may have refused the update, so it is
// made again when that resolution is over (see conflictGate). tagsMu is
// held.
func (m *Membership) publishTags(tags map[string]string) error {
	for {
		// Counted before the wait: a resolution that starts after the
		// wait returned, and before serf's update took memberlist's lock,
		// makes memberlist refuse the update, and must be seen here.
		started := m.conflict.started.Load()
		if err := m.conflict.wait(m.ctx); err != nil {
			return ErrShutdown
		}
		if m.serf.State() == serf.SerfShutdown {
			return ErrShutdown // serf stopped by itself: it lost a name conflict
		}
		err := m.serf.SetTags(tags)
		if m.conflict.started.Load() == started {
			return err
		}
	}
}

// Leave leaves the cluster gracefully: it stops joining, marks its tags
// as leaving and waits up to Timing.BroadcastTimeout for that update to
// go out (see leaveWatch), then broadcasts the leave and waits as long
// for it to go out plus Timing.LeavePropagateDelay for it to spread.
// Others then see this node as StatusLeft. Call Shutdown afterwards.
func (m *Membership) Leave() error {
	if m.isClosed() {
		return ErrShutdown
	}
	m.stopJoinLoop()
	m.tagsMu.Lock()
	if !m.left.Load() {
		m.markLeaving()
	}
	m.left.Store(true)
	m.tagsMu.Unlock()
	if err := m.serf.Leave(); err != nil {
		return fmt.Errorf("gossip: leave: %w", err)
	}
	m.logger.Info("gossip: left the cluster")
	return nil
}

// markLeaving advertises this run's tags with the leaving mark set, so
// that others can tell this leave from a stale one (leaveWatch). It does
// not fail the leave: a node that missed the mark counts this one alive
// after quickLeaveBound if it reads the leave without memberlist's, as
// it would a member that failed, and the warning says so. tagsMu is held.
func (m *Membership) markLeaving() {
	id := m.ident
	id.leaving = true
	extra := decodeTags(m.serf.LocalMember().Tags).extra
	if err := m.publishTags(encodeTags(id, extra)); err != nil {
		m.logger.Warn("gossip: could not advertise the leave before leaving; members that miss it may count this node alive until they see it gone",
			"err", err)
		return
	}
	m.ident = id
}

// Shutdown stops gossip without a leave (others will see this node fail
// unless Leave was called first), closes Events and waits for every goroutine
// it started. It is idempotent.
func (m *Membership) Shutdown() error {
	m.shutdownOnce.Do(func() {
		m.mu.Lock()
		m.closed = true
		m.mu.Unlock()
		m.cancel() // stops the join loop and pump, cuts outbound gossip streams
		if err := m.serf.Shutdown(); err != nil {
			m.shutdownErr = fmt.Errorf("gossip: shutdown: %w", err)
		}
		m.wg.Wait()
		m.logger.Debug("gossip stopped")
	})
	return m.shutdownErr
}

func (m *Membership) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// convert turns a serf member into a Member, warning once per member name
// about a missing or bad id tag.
func (m *Membership) convert(s serf.Member) Member {
	d := decodeTags(s.Tags)
	if d.idErr != nil {
		m.warnBadID(s.Name, d.idErr)
	}
	return Member{
		Name:     s.Name,
		ID:       d.id,
		Addr:     net.JoinHostPort(s.Addr.String(), strconv.Itoa(int(s.Port))),
		PeerAddr: d.peerAddr,
		Voter:    d.voter,
		Eligible: d.eligible,
		Tags:     d.extra,
		Status:   convertStatus(s.Status),
	}
}

func (m *Membership) warnBadID(name string, err error) {
	m.mu.Lock()
	seen := m.warnedIDs[name]
	m.warnedIDs[name] = true
	m.mu.Unlock()
	if !seen {
		m.logger.Warn("gossip: member has no usable node ID; using 0", "member", name, "err", err)
	}
}

// convertStatus maps serf's member status. StatusNone, which serf does not
// give members it lists, is reported as failed.
func convertStatus(s serf.MemberStatus) Status {
	switch s {
	case serf.StatusAlive:
		return StatusAlive
	case serf.StatusLeaving:
		return StatusLeaving
	case serf.StatusLeft:
		return StatusLeft
	}
	return StatusFailed
}
