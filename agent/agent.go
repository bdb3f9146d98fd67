package agent

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tenurehq/tenure/agent/hooks"
	"github.com/tenurehq/tenure/bully"
	"github.com/tenurehq/tenure/gossip"
	"github.com/tenurehq/tenure/internal/fsutil"
	"github.com/tenurehq/tenure/leasing"
	"github.com/tenurehq/tenure/rpc"
)

// Agent is one running tenure agent.
type Agent struct {
	cfg     Config
	log     *slog.Logger
	epochs  *leasing.EpochStore
	grants  *leasing.VoterStore
	rosters *leasing.RosterStore
	pledges *leasing.RosterStore
	events  *broadcaster
	counts  counters
	book    addrBook // peer addresses by member name

	// instance is this process's, previous the one that ran on the data
	// dir before it (openInstance); dirLock is held while the agent runs
	// (lockDataDir).
	instance, previous uint64
	dirLock            *os.File

	// Lock sessions of socket clients (named.go), the driver's; session
	// IDs start from the start time so a restart does not reuse them.
	sessions    map[uint64]*lockSession
	lastSession uint64

	peers   *gossip.Transport
	members *gossip.Membership
	server  *rpc.Server
	hooksMu sync.Mutex       // guards hooks, which a reload replaces
	hooks   *hooks.Runner    // read through hookRunner
	peerTLS *gossip.KeyedTLS // nil without a cluster key

	// inbox carries work for the driver goroutine, the only one that
	// touches core.
	inbox      chan func()
	memberSync memberSync // driver goroutine only
	core       *core
	advertised leasing.Roster // the roster this node's gossip tags advertise
	tags       *tagPublisher  // applies gossip tags off the driver
	host       string         // the host other agents reach this one at
	stopping   *stopWait      // an ended term's release waiting for local work
	journal    *journal       // nil without Config.Journal
	runners    *runnerSet     // registered over the socket

	// snap is the view the socket reads. The driver goroutine, its only
	// writer, replaces it whole and never changes a published snapshot, so
	// readers Load it without a lock.
	snap atomic.Pointer[snapshot]

	// isolated cuts this agent's peer messages both ways while gossip goes
	// on: in-process fault injection for tests of a partitioned leader.
	isolated atomic.Bool
	drained  atomic.Bool // see drain.go; written only by the driver
	// storageDown: writes to the data dir fail (core_storage.go); written
	// only by the driver.
	storageDown atomic.Bool

	ctx        context.Context // cancelled by Shutdown and Halt
	cancel     context.CancelFunc
	loopDone   chan struct{}
	done       chan struct{} // closed when the agent has stopped
	errMu      sync.Mutex
	err        error          // why the agent stopped by itself
	sends      sync.WaitGroup // outbound peer messages in flight
	announcing announcements  // the COORDINATORs among them
	stops      sync.WaitGroup // stopWait goroutines and the tag publisher
	stopOnce   sync.Once
}

// Start validates cfg, checks before opening anything that the state files
// are regular files and that the agent may run with the keys it has (see
// Config.InsecureNoEncryption), opens the data directory, and starts the
// peer transport, gossip, the driver and the local socket, in that order.
// On error everything started so far is stopped again.
func Start(cfg Config) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg, err := preflight(cfg.withDefaults())
	if err != nil {
		return nil, err
	}
	a := &Agent{
		cfg:         cfg,
		log:         cfg.Logger.With("node", cfg.Name),
		events:      newBroadcaster(),
		runners:     newRunnerSet(),
		inbox:       make(chan func()),
		loopDone:    make(chan struct{}),
		sessions:    map[uint64]*lockSession{},
		lastSession: uint64(time.Now().UnixNano()),
		memberSync:  memberSync{interval: memberSyncInterval(cfg.TickInterval)},
		done:        make(chan struct{}),
	}
	a.snap.Store(&snapshot{})
	a.ctx, a.cancel = context.WithCancel(context.Background())
	if err := a.start(); err != nil {
		a.Halt()
		return nil, err
	}
	if a.peerTLS == nil {
		a.log.Warn("NO CLUSTER KEY: gossip and peer messages travel in the clear, unauthenticated; anyone who can reach this agent's ports can join, vote and claim leadership. Use --encrypt with a key from tenure keygen.")
	}
	a.log.Info("agent started", "id", cfg.ID, "gossip", a.members.LocalMember().Addr,
		"peer", a.peers.Addr(), "socket", cfg.SocketPath, "consistency", cfg.Consistency,
		"epoch", a.epochs.Epoch())
	return a, nil
}

func (a *Agent) start() error {
	host, err := a.cfg.advertiseHost(interfaceAddrs)
	if err != nil {
		return err
	}
	a.host = host
	if err := a.openDataDir(); err != nil {
		return err
	}
	if a.journal, err = openJournal(a.cfg.Journal, a.cfg.Name, a.cfg.Clock, a.log); err != nil {
		return err
	}
	if err := a.startCore(); err != nil {
		return err
	}
	if err := a.startHooks(); err != nil {
		return err
	}
	if err := a.startPeers(); err != nil {
		return err
	}
	if err := a.startGossip(); err != nil {
		return err
	}
	a.tags = newTagPublisher(a.members, a.log)
	a.stops.Add(1)
	go func() { defer a.stops.Done(); a.tags.run(a.ctx) }()
	go a.loop()
	group, err := a.cfg.socketGroup()
	if err != nil {
		return err
	}
	server, err := rpc.Listen(rpc.ServerConfig{
		Path:             a.cfg.SocketPath,
		Mode:             a.cfg.SocketMode,
		Group:            group,
		Backend:          backend{a},
		MaxConns:         a.cfg.SocketMaxConns,
		MaxConnsPerPeer:  a.cfg.SocketMaxConnsPerPeer,
		MaxUngreeted:     a.cfg.SocketMaxUngreeted,
		IdleTimeout:      a.cfg.SocketIdleTimeout,
		HandshakeTimeout: a.cfg.SocketHelloTimeout,
		OnRequest:        a.cfg.SocketOnRequest,
		MaxFrame:         a.cfg.SocketMaxFrame,
		Logger:           a.log,
		AgentVersion:     a.cfg.Version,
	})
	if err != nil {
		return fmt.Errorf("agent: local socket: %w", err)
	}
	a.server = server
	return nil
}

func (a *Agent) openDataDir() error {
	if err := os.MkdirAll(a.cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("agent: data dir: %w", err)
	}
	var err error
	if a.dirLock, err = lockDataDir(a.cfg.DataDir); err != nil {
		return err
	}
	path := func(name string) string { return filepath.Join(a.cfg.DataDir, name) }
	if a.epochs, err = leasing.OpenEpochStore(path(epochFile)); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	if a.grants, err = leasing.OpenVoterStore(path(voterFile)); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	if a.rosters, err = leasing.OpenRosterStore(path(rosterFile)); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	if a.pledges, err = leasing.OpenRosterStore(path(bootstrapFile)); err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	a.openInstance()
	return a.loadDrained()
}

// probeFile is the file probeDataDir writes and removes.
const probeFile = ".write-probe"

// probeDataDir writes a small file to dir the way every data dir file is
// written (a temporary file, synced, renamed), then removes it: whether
// the data dir takes writes again after one failed.
func probeDataDir(dir string) error {
	path := filepath.Join(dir, probeFile)
	if err := fsutil.WriteFileAtomic(path, []byte("tenure write probe\n"), 0o600); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove the probe file: %w", err)
	}
	return nil
}

func (a *Agent) startCore() error {
	ec := a.cfg.electionConfig()
	ec.Rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	cc := coreConfig{
		Count:        a.counts.add,
		Self:         a.self(),
		Eligible:     a.mayLead(),
		Voter:        a.cfg.Voter,
		Consistency:  a.cfg.Consistency,
		Lease:        a.cfg.leaseTiming(),
		Expect:       a.cfg.Expect,
		Election:     ec,
		Voters:       a.cfg.Voters,
		Zone:         a.cfg.Zone,
		PromoteAfter: a.cfg.PromoteAfter,
		IdleTick:     idleTickFactor * a.cfg.TickInterval,
		Instance:     a.instance,
		Previous:     a.previous,
	}
	switch d := a.cfg.DeadVoterTimeout; {
	case d == 0:
		cc.DeadVoterTimeout = DefaultDeadVoterTimeout
	case d > 0:
		cc.DeadVoterTimeout = d
	}
	st := coreStores{epochs: a.epochs, grants: a.grants, rosters: a.rosters, pledges: a.pledges,
		probe: func() error { return probeDataDir(a.cfg.DataDir) }}
	c, err := newCore(cc, st, a.log, a.cfg.Clock.Now())
	if err != nil {
		return err
	}
	a.core = c
	snap := a.core.snapshot(a.cfg.Clock.Now())
	snap.changed = time.Now() // no leadership known since the start
	a.snap.Store(&snap)
	return nil
}

func (a *Agent) startHooks() error {
	r, err := a.newHookRunner(a.cfg.Hooks)
	if err != nil {
		return err
	}
	a.hooks = r
	return nil
}

func (a *Agent) newHookRunner(hs []hooks.Hook) (*hooks.Runner, error) {
	r, err := hooks.NewRunner(hooks.Config{
		Hooks:   hs,
		Timeout: a.cfg.HookTimeout,
		Logger:  a.log,
		Env:     append(hookEnv(os.Environ()), "TENURE_SOCKET="+a.cfg.SocketPath),
		Observe: func(o hooks.RunOutcome) {
			a.counts.add("hook." + o.Outcome)
			a.counts.addN("hook_ms."+o.Outcome, uint64(o.Duration.Milliseconds()))
		},
	})
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	return r, nil
}

// ReloadHooks replaces the agent's hooks with hs (a SIGHUP of `tenure
// agent` with a config file): events from now on run the new hooks, while
// runs already queued on the old ones finish (for at most the hooks'
// grace of a shutdown, then their process groups are stopped). Invalid
// hooks are an error and the old ones stay.
func (a *Agent) ReloadHooks(hs []hooks.Hook) error {
	if a.ctx.Err() != nil {
		return fmt.Errorf("agent: reload hooks: %w", errStopped)
	}
	r, err := a.newHookRunner(hs)
	if err != nil {
		return err
	}
	a.hooksMu.Lock()
	old := a.hooks
	a.hooks = r
	a.hooksMu.Unlock()
	a.stops.Add(1)
	go func() {
		defer a.stops.Done()
		ctx, cancel := context.WithTimeout(context.Background(), hooksGrace)
		defer cancel()
		if err := old.Close(ctx); err != nil && ctx.Err() == nil {
			a.log.Warn("hooks: closing the hooks replaced by a reload", "err", err)
		}
	}()
	a.log.Info("hooks reloaded", "hooks", len(hs))
	return nil
}

// hookRunner is the runner of the current hooks.
func (a *Agent) hookRunner() *hooks.Runner {
	a.hooksMu.Lock()
	defer a.hooksMu.Unlock()
	return a.hooks
}

// hookEnv is the agent's environment without its own TENURE_ settings
// (which may hold secrets such as the cluster key); hooks get their own
// TENURE_ variables for each event, and TENURE_SOCKET so that a hook's
// `tenure leader --check` reaches this agent.
func hookEnv(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "TENURE_") {
			out = append(out, kv)
		}
	}
	return out
}

func (a *Agent) startPeers() error {
	tc := gossip.TransportConfig{
		BindAddr: a.cfg.PeerBindAddr,
		Handler:  a.handlePeer,
		Logger:   a.log,
	}
	if a.cfg.KeyringFile != "" {
		// Peer messages are authenticated and encrypted with TLS 1.3 keyed
		// by the cluster keys: a node without one can neither vote, nor be
		// granted a lease, nor announce itself leader. The keys are those of
		// gossip's keyring once it has started (startGossip); until then
		// EncryptKey, or a random key that admits nobody.
		first := a.cfg.EncryptKey
		if len(first) == 0 {
			first = make([]byte, 32)
			crand.Read(first)
		}
		wrap, err := gossip.NewKeyedTLS([][]byte{first})
		if err != nil {
			return fmt.Errorf("agent: %w", err)
		}
		tc.Wrap = wrap
		a.peerTLS = wrap
	}
	t, err := gossip.ListenTransport(tc)
	if err != nil {
		return fmt.Errorf("agent: peer transport: %w", err)
	}
	a.peers = t
	return nil
}

func (a *Agent) startGossip() error {
	gc := gossip.DefaultConfig()
	gc.Name, gc.ID = a.cfg.Name, a.cfg.ID
	gc.BindAddr = a.cfg.BindAddr
	gc.AdvertiseAddr = a.gossipAdvertise()
	gc.PeerAddr = a.advertisedPeerAddr()
	gc.Voter, gc.Eligible = a.cfg.Voter, a.eligible()
	gc.Tags = a.gossipTags(a.rosters.Roster())
	a.advertised = a.rosters.Roster()
	gc.SnapshotPath = filepath.Join(a.cfg.DataDir, snapshotFile)
	gc.AddrFile = filepath.Join(a.cfg.DataDir, addrFile)
	gc.Join = a.cfg.Join
	gc.Timing = a.cfg.gossipTiming()
	gc.MaxMembers = a.cfg.MaxMembers
	gc.Logger = a.cfg.Logger // gossip adds the node name itself
	gc.EncryptKey = a.cfg.EncryptKey
	gc.KeyringFile = a.cfg.KeyringFile
	m, err := gossip.Start(gc)
	if err != nil {
		return fmt.Errorf("agent: gossip: %w", err)
	}
	a.members = m
	return a.followKeyring()
}

// followKeyring keeps the peer transport's keys equal to gossip's keyring,
// so a rotation (tenure keys) covers both.
func (a *Agent) followKeyring() error {
	if a.peerTLS == nil {
		return nil
	}
	setKeys := func(_ []byte, all [][]byte) {
		if len(all) == 0 {
			return
		}
		if err := a.peerTLS.SetKeys(all); err != nil {
			a.log.Error("peer transport keys", "err", err)
		}
	}
	a.members.OnKeyringChange(setKeys)
	primary, all := a.members.LocalKeys()
	if len(all) == 0 {
		return fmt.Errorf("agent: keyring file %s does not exist, and no --encrypt key was given to create it", a.cfg.KeyringFile)
	}
	setKeys(primary, all)
	a.warnOtherPrimary(primary)
	return nil
}

// warnOtherPrimary warns when the keyring file holds the --encrypt key
// but sends with another: this node missed a tenure keys use. If the
// cluster has since removed the file's primary, the others cannot read
// this node, and only their logs say so ("no installed keys could decrypt
// the message"). If the cluster is still between use and remove (and
// --encrypt was not updated yet), all is well; so this is a warning, not a
// refusal.
func (a *Agent) warnOtherPrimary(primary []byte) {
	if len(a.cfg.EncryptKey) == 0 || bytes.Equal(primary, a.cfg.EncryptKey) {
		return
	}
	a.log.Warn("the keyring file's primary key is not the --encrypt key, which it also holds: this node sends gossip with the file's primary. "+
		"If the cluster already uses the --encrypt key (tenure keys list on another member shows it) and removed the old one, the others cannot read this node: "+
		"run tenure keys use with the --encrypt key on this node, or stop it, remove the keyring file and start again",
		"file", a.cfg.KeyringFile)
}

// advertisedPeerAddr is the peer address other agents should dial: the
// advertised host with the peer port.
func (a *Agent) advertisedPeerAddr() string {
	_, port, _ := net.SplitHostPort(a.peers.Addr())
	return net.JoinHostPort(a.host, port)
}

// gossipAdvertise is what gossip advertises: --advertise as given; when
// the gossip bind host is unspecified (0.0.0.0, ::), the derived host (with
// the bind port); otherwise nothing, and gossip advertises its bind
// address.
func (a *Agent) gossipAdvertise() string {
	if a.cfg.AdvertiseAddr != "" {
		return a.cfg.AdvertiseAddr
	}
	if h, _, err := net.SplitHostPort(a.cfg.BindAddr); err == nil && (h == "" || net.ParseIP(h).IsUnspecified()) {
		return a.host
	}
	return ""
}

func (a *Agent) self() bully.Node { return bully.Node{ID: a.cfg.ID, Name: a.cfg.Name} }

// Name returns the node's name.
func (a *Agent) Name() string { return a.cfg.Name }

// ID returns the node's ID.
func (a *Agent) ID() uint64 { return a.cfg.ID }

// GossipAddr returns the address other agents can join this one at.
func (a *Agent) GossipAddr() string { return a.members.LocalMember().Addr }

// SocketPath returns the local socket's path.
func (a *Agent) SocketPath() string { return a.cfg.SocketPath }

// Shutdown stops the agent gracefully: a leader resigns (and tells the
// others, so they take over without waiting), a voter asks the leader to
// take it out of the roster (so the roster never counts on a voter that
// left), the node leaves the gossip cluster, and the socket is closed and
// removed. ctx bounds the goodbyes;
// the stop itself always completes.
func (a *Agent) Shutdown(ctx context.Context) error {
	var errs []error
	if a.members != nil {
		a.resignForShutdown(ctx)
		a.leaveRoster(ctx)
		// Stop the driver before leaving: nothing may touch gossip (such as
		// re-advertising tags) once it has left.
		a.cancel()
		<-a.loopDone
		if err := a.members.Leave(); err != nil {
			errs = append(errs, fmt.Errorf("agent: leave: %w", err))
		}
	}
	hctx, cancel := context.WithTimeout(context.Background(), hooksGrace)
	defer cancel()
	errs = append(errs, a.stop(hctx))
	return errors.Join(errs...)
}

// Done is closed when the agent has stopped, by Shutdown, Halt, or by
// itself after an error it cannot go on past (see Err).
func (a *Agent) Done() <-chan struct{} { return a.done }

// Err returns why the agent stopped by itself, or nil.
func (a *Agent) Err() error {
	a.errMu.Lock()
	defer a.errMu.Unlock()
	return a.err
}

// abort records why the agent stops by itself and halts it in the
// background (it may be called from the driver, which Halt waits for).
func (a *Agent) abort(err error) {
	a.errMu.Lock()
	if a.err == nil {
		a.err = err
	}
	a.errMu.Unlock()
	a.log.Error("stopping the agent", "err", err)
	go a.Halt()
}

// Halt stops the agent at once, without resigning or leaving: to the others
// it looks like a crash. For tests and for embedding code that must stop now.
func (a *Agent) Halt() {
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no time for hooks: running ones are killed
	_ = a.stop(ctx)
}

// hooksGrace is how long a graceful shutdown lets queued hook runs (such as
// the lost-leadership of its own resign) finish.
const hooksGrace = 10 * time.Second

func (a *Agent) closeHooks(ctx context.Context) error {
	if err := a.hookRunner().Close(ctx); err != nil && ctx.Err() == nil {
		return fmt.Errorf("agent: hooks: %w", err)
	}
	return nil
}

// stop stops everything; hooksCtx bounds how long queued hook runs may
// still finish.
func (a *Agent) stop(hooksCtx context.Context) error {
	var errs []error
	a.stopOnce.Do(func() {
		if a.server != nil {
			errs = append(errs, a.server.Close())
		}
		a.cancel()
		if a.members != nil {
			<-a.loopDone
		}
		a.journal.close()
		a.stops.Wait()
		a.sends.Wait()
		if a.members != nil {
			errs = append(errs, a.members.Shutdown())
		}
		if a.peers != nil {
			errs = append(errs, a.peers.Close())
		}
		if a.hooks != nil {
			errs = append(errs, a.closeHooks(hooksCtx))
		}
		a.events.close()
		if a.server != nil { // it had started
			a.log.Info("agent stopped")
		}
		if a.dirLock != nil {
			a.dirLock.Close() // the next agent on the data dir may start
		}
		close(a.done)
	})
	return errors.Join(errs...)
}

// Freeze stops this agent's driver until the returned resume is called,
// the way a long GC pause or a stopped VM freezes a process: no ticks, no
// renewals, no answers to peers (they time out), while gossip and the local
// socket keep running. The lease still ends on this node's clock, so Status
// reports it no longer leads once the deadline has passed. For tests and
// the demo.
func (a *Agent) Freeze() (resume func()) {
	release := make(chan struct{})
	frozen := make(chan struct{})
	go func() {
		_ = a.do(context.Background(), func() {
			close(frozen)
			select {
			case <-release:
			case <-a.ctx.Done():
			}
		})
	}()
	select {
	case <-frozen:
	case <-a.ctx.Done():
	}
	var once sync.Once
	return func() { once.Do(func() { close(release) }) }
}
