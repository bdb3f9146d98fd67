package agent

import (
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"time"

	"github.com/tenurehq/tenure/agent/hooks"
	"github.com/tenurehq/tenure/bully"
	"github.com/tenurehq/tenure/gossip"
	"github.com/tenurehq/tenure/leasing"
	"github.com/tenurehq/tenure/rpc"
)

// Consistency selects how leadership is made safe.
type Consistency string

const (
	// Available elects the highest eligible live node in the local view
	// without lease grants: each side of a partition may elect its own
	// leader, and epochs are not globally unique.
	Available Consistency = "available"
	// Quorum requires a lease granted by a majority of the voter roster.
	Quorum Consistency = "quorum"
)

// Profile names a set of timings.
type Profile string

const (
	// LAN suits hosts on a local network: serf's LAN failure detection and
	// election timers of a few hundred milliseconds.
	LAN Profile = "lan"
	// Local suits agents on one machine (tests, the demo): faster failure
	// detection and shorter election timers.
	Local Profile = "local"
)

// DefaultMaxMembers is the default Config.MaxMembers.
const DefaultMaxMembers = gossip.DefaultMaxMembers

// Config is an agent's configuration. Start copies it and never writes it back.
type Config struct {
	// Name is this node's unique name in the cluster. Default: the hostname.
	Name string
	// ID ranks this node: the highest eligible live (ID, Name) leads.
	// 0 means a stable hash of Name (below 2^53, so JSON readers keep it exact).
	ID uint64
	// BindAddr is the gossip address, host:port. Default "0.0.0.0:7946".
	BindAddr string
	// PeerBindAddr is the peer transport address, host:port. Default
	// "0.0.0.0:7947".
	PeerBindAddr string
	// AdvertiseAddr is the host (or host:port for gossip) other agents use to
	// reach this one, when it differs from the bind address.
	AdvertiseAddr string
	// Join lists gossip addresses of agents to join; retried until one works.
	Join []string
	// SocketPath is the local Unix socket. Default rpc.DefaultSocketPath().
	SocketPath string
	// SocketMode is the socket's permission bits. Default 0600.
	SocketMode os.FileMode
	// SocketGroup, when set (a group name or numeric ID), owns the socket
	// and its directory, so its members can use tenure: give SocketMode
	// 0660 with it.
	SocketGroup string
	// MaxMembers is the largest cluster (members, counting those that failed
	// or left recently) this agent's gossip accepts: push-pulls listing more
	// are refused before they are decoded. 0 means DefaultMaxMembers
	// (DefaultMaxMembers). Give every agent the same value.
	MaxMembers int
	// SocketMaxConns bounds the socket's connections at once; 0 means
	// rpc.DefaultMaxConns (64).
	SocketMaxConns int
	// SocketMaxConnsPerPeer bounds the connections of one client process;
	// 0 means a quarter of SocketMaxConns (16).
	SocketMaxConnsPerPeer int
	// SocketMaxUngreeted bounds the connections that have not said hello
	// yet; 0 means a quarter of SocketMaxConns (16).
	SocketMaxUngreeted int
	// SocketIdleTimeout closes a connection that sends no request for this
	// long (watches are exempt); 0 means rpc.DefaultIdleTimeout (60 s),
	// negative means never.
	SocketIdleTimeout time.Duration
	// SocketHelloTimeout bounds the wait for a client's hello; 0 means
	// rpc.DefaultHandshakeTimeout (2 s).
	SocketHelloTimeout time.Duration
	// SocketOnRequest, when set, is called for every request on the
	// socket (rpc.ServerConfig.OnRequest): tenure agent counts them to size
	// its process (internal/procs).
	SocketOnRequest func()
	// SocketMaxFrame bounds the socket's frame bodies in both directions,
	// in bytes; 0 means rpc.DefaultMaxFrame (64 KiB). From rpc.MinMaxFrame
	// (1 KiB) to rpc.MaxMaxFrame (16 MiB): raise it when the member list
	// of a large cluster no longer fits.
	SocketMaxFrame int
	// DataDir holds the epoch and the gossip snapshot. Default: see
	// DefaultDataDir.
	DataDir string
	// Consistency is the leadership mode. Default Quorum.
	Consistency Consistency
	// LeaseTTL is how long a voter's promise lasts (quorum mode). Default 10s.
	LeaseTTL time.Duration
	// MaxDrift bounds how much clock rates may differ between nodes, as a
	// fraction. Default 0.01 (1%).
	MaxDrift float64
	// Expect is how many fresh voters bootstrap the first roster together
	// (quorum mode). 0: this node joins an existing cluster and waits to be
	// admitted.
	Expect int
	// Preempt makes a leader yield to a higher eligible node that has been
	// up for the stabilisation delay. Default true.
	Preempt bool
	// Eligible nodes may lead. Default true.
	Eligible bool
	// Voter nodes may grant leases in quorum mode: the leader promotes
	// them to fill the voter set. Default true.
	Voter bool
	// Voters is how many voters the leader keeps in the roster (odd where
	// it can; the others are observers). 0: the bootstrap's --expect, as
	// recorded in the roster, or 5. Give every node the same value.
	Voters int
	// Zone names this node's failure domain (a rack, an availability
	// zone): the leader spreads the voters over zones. Empty: none.
	Zone string
	// DeadVoterTimeout is how long gossip must report a voter failed
	// before the leader replaces it (or drops it from the set). Default
	// DefaultDeadVoterTimeout; negative: never.
	DeadVoterTimeout time.Duration
	// PromoteAfter is how long gossip must show a node alive before the
	// leader promotes it to voter. Default three lease TTLs.
	PromoteAfter time.Duration
	// Profile selects Gossip and Election timings when they are left zero.
	// Default LAN.
	Profile Profile
	// Gossip overrides the gossip timings of Profile.
	Gossip *gossip.Timing
	// Election overrides the election timings of Profile; only its duration
	// fields are used.
	Election *bully.Config
	// EncryptKey is the cluster key (32 bytes). It encrypts and
	// authenticates gossip and peer messages. Once the keyring file exists
	// its keys are used, and EncryptKey must be one of them (Start fails
	// otherwise). Without EncryptKey and without a keyring file the agent
	// runs in the clear, and Start refuses that on any address but
	// loopback unless InsecureNoEncryption is set.
	EncryptKey []byte
	// KeyringFile keeps the installed cluster keys across restarts. Once it
	// exists it is always used, with or without EncryptKey. Default:
	// <DataDir>/keyring, created with EncryptKey.
	KeyringFile string
	// InsecureNoEncryption lets an agent without a cluster key listen on or
	// advertise addresses other than loopback ones (0.0.0.0 and :: count as
	// not loopback): then anyone who can reach its ports can join, vote
	// and claim leadership. Agents on loopback addresses only need no key.
	InsecureNoEncryption bool
	// Hooks run commands on events (see package hooks).
	Hooks []hooks.Hook
	// HookTimeout bounds each hook run. Default hooks.DefaultTimeout (30s).
	HookTimeout time.Duration
	// TickInterval is how often the election timers are checked. Default
	// 50ms (LAN) or 20ms (Local). While none of the node's timers is due
	// soon (it follows or leads with nothing in flight) they are checked
	// every fifth tick only, so an idle agent wakes less (see wake.go).
	TickInterval time.Duration
	// Journal, if set, is a file this agent appends one JSON line to for
	// every change of its own leadership: it started, became leader, had
	// its lease extended, stopped leading (see JournalEntry). The journal
	// records; it decides nothing.
	Journal string
	// Logger receives the agent's logs. Default: discard.
	Logger *slog.Logger
	// Clock is the agent's time source. Default: DefaultClock() (on Linux,
	// CLOCK_BOOTTIME, so time suspended counts against a lease).
	Clock Clock
	// Version is reported in the socket handshake.
	Version string
}

// DefaultConfig returns the defaults for a production host.
func DefaultConfig() Config {
	name, _ := os.Hostname()
	return Config{
		Name:         name,
		BindAddr:     "0.0.0.0:7946",
		PeerBindAddr: "0.0.0.0:7947",
		SocketPath:   rpc.DefaultSocketPath(),
		DataDir:      DefaultDataDir(),
		Consistency:  Quorum,
		LeaseTTL:     10 * time.Second,
		MaxDrift:     0.01,
		Preempt:      true,
		Eligible:     true,
		Voter:        true,
		Profile:      LAN,
	}
}

// DefaultDeadVoterTimeout is how long a voter may be failed before the
// leader replaces it: long enough for a reboot or a short network outage,
// short enough that a lost host does not leave the cluster one failure
// from losing its quorum for long.
const DefaultDeadVoterTimeout = 3 * time.Minute

// DefaultDataDir is /var/lib/tenure for root, else $XDG_STATE_HOME/tenure
// or ~/.local/state/tenure.
func DefaultDataDir() string {
	if os.Geteuid() == 0 {
		return "/var/lib/tenure"
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "tenure")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "tenure-"+strconv.Itoa(os.Geteuid()))
	}
	return filepath.Join(home, ".local", "state", "tenure")
}

// IDFromName derives a stable node ID from a name: FNV-1a, cut to 53 bits.
func IDFromName(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64() & (1<<53 - 1)
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	if c.Name == "" {
		return errors.New("agent: config: name is empty")
	}
	for _, a := range []struct{ flag, v string }{{"bind", c.BindAddr}, {"peer-bind", c.PeerBindAddr}} {
		if _, _, err := net.SplitHostPort(a.v); err != nil {
			return fmt.Errorf("agent: config: --%s %q: %w", a.flag, a.v, err)
		}
	}
	switch c.Consistency {
	case Available, Quorum:
	default:
		return fmt.Errorf("agent: config: consistency %q: want available or quorum", c.Consistency)
	}
	if err := c.leaseTiming().Validate(); err != nil {
		return fmt.Errorf("agent: config: %w", err)
	}
	if tick := c.withDefaults().TickInterval; c.Consistency == Quorum && c.LeaseTTL < 10*tick {
		return fmt.Errorf("agent: config: --lease-ttl %v is too short: at least %v with the %s timing profile (ten ticks of %v)",
			c.LeaseTTL, 10*tick, c.Profile, tick)
	}
	if c.Expect < 0 {
		return fmt.Errorf("agent: config: --expect %d is negative", c.Expect)
	}
	if c.Voters < 0 || c.Voters > leasing.MaxSeats {
		return fmt.Errorf("agent: config: --voters %d: want 1 to %d (0 for the default)", c.Voters, leasing.MaxSeats)
	}
	if err := validZone(c.Zone); err != nil {
		return fmt.Errorf("agent: config: --zone %q: %w", c.Zone, err)
	}
	if c.PromoteAfter < 0 {
		return fmt.Errorf("agent: config: promote-after %v is negative", c.PromoteAfter)
	}
	if e := c.electionConfig(); c.Consistency == Quorum && e.CoordinatorTimeout <= c.leaseTiming().AcquireBudget {
		return fmt.Errorf("agent: config: the election's coordinator timeout (%v) must exceed the lease acquire budget (%v)",
			e.CoordinatorTimeout, c.leaseTiming().AcquireBudget)
	}
	switch c.Profile {
	case LAN, Local:
	default:
		return fmt.Errorf("agent: config: timing profile %q: want lan or local", c.Profile)
	}
	if c.MaxMembers < 0 {
		return errors.New("agent: config: --max-members may not be negative")
	}
	if c.SocketMaxConns < 0 || c.SocketMaxConnsPerPeer < 0 || c.SocketMaxUngreeted < 0 || c.SocketHelloTimeout < 0 {
		return errors.New("agent: config: the socket's connection limits and hello timeout may not be negative")
	}
	if f := c.SocketMaxFrame; f != 0 && (f < rpc.MinMaxFrame || f > rpc.MaxMaxFrame) {
		return fmt.Errorf("agent: config: --socket-max-frame %d: want %d to %d bytes", f, rpc.MinMaxFrame, rpc.MaxMaxFrame)
	}
	if c.SocketMode&^0o777 != 0 || (c.SocketMode != 0 && c.SocketMode&0o600 != 0o600) {
		return fmt.Errorf("agent: config: --socket-mode %#o: want permission bits that keep the owner's read and write", c.SocketMode)
	}
	if _, err := c.socketGroup(); err != nil {
		return err
	}
	if c.SocketPath == "" || c.DataDir == "" {
		return errors.New("agent: config: socket path and data dir must be set")
	}
	if n := len(c.EncryptKey); n != 0 && n != 32 {
		return fmt.Errorf("agent: config: the cluster key is %d bytes, want 32 (make one with tenure keygen)", n)
	}
	if c.HookTimeout < 0 {
		return fmt.Errorf("agent: config: hook timeout %v is negative", c.HookTimeout)
	}
	if c.TickInterval < 0 {
		return fmt.Errorf("agent: config: tick interval %v is negative", c.TickInterval)
	}
	return nil
}

// validZone accepts up to 64 letters, digits and . _ - (a gossip tag).
func validZone(z string) error {
	if len(z) > 64 {
		return errors.New("longer than 64 characters")
	}
	for _, r := range z {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("character %q: want letters, digits, '.', '_' and '-'", r)
		}
	}
	return nil
}

// withDefaults fills derived values into a copy of c.
func (c Config) withDefaults() Config {
	if c.ID == 0 {
		c.ID = IDFromName(c.Name)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Clock == nil {
		c.Clock = DefaultClock()
	}
	if c.KeyringFile == "" && len(c.EncryptKey) > 0 {
		c.KeyringFile = filepath.Join(c.DataDir, "keyring")
	}
	if c.TickInterval == 0 {
		c.TickInterval = map[Profile]time.Duration{LAN: 50 * time.Millisecond, Local: 20 * time.Millisecond}[c.Profile]
	}
	return c
}

// socketGroup resolves SocketGroup to a group ID (nil when unset).
func (c Config) socketGroup() (*int, error) {
	if c.SocketGroup == "" {
		return nil, nil
	}
	id := c.SocketGroup
	if g, err := user.LookupGroup(c.SocketGroup); err == nil {
		id = g.Gid
	}
	gid, err := strconv.Atoi(id)
	if err != nil {
		// The release build has no cgo: os/user reads /etc/group alone, so
		// a group only a directory service (NSS) knows is given by ID.
		return nil, fmt.Errorf("agent: config: --socket-group %q: no such group in /etc/group (give a group from elsewhere by its numeric ID)", c.SocketGroup)
	}
	return &gid, nil
}

// leaseTiming returns the lease timings for c: an acquire budget of TTL/10,
// but at most half the election's coordinator timeout, so that nodes waiting
// for a COORDINATOR outlast the winner's lease round.
func (c Config) leaseTiming() leasing.Timing {
	t := leasing.DefaultTiming().WithTTL(c.LeaseTTL)
	t.MaxDrift = c.MaxDrift
	t.AcquireBudget = min(t.AcquireBudget, c.electionConfig().CoordinatorTimeout/2)
	return t
}

// gossipTiming returns the gossip timings for c.
func (c Config) gossipTiming() gossip.Timing {
	if c.Gossip != nil {
		return *c.Gossip
	}
	if c.Profile == Local {
		return gossip.LocalTiming()
	}
	return gossip.LANTiming()
}

// electionConfig returns the bully configuration for c, without Self,
// Epoch and Rand, which the agent fills in.
func (c Config) electionConfig() bully.Config {
	var e bully.Config
	switch {
	case c.Election != nil:
		e = *c.Election
	case c.Profile == Local:
		e = LocalElection()
	default:
		e = bully.DefaultConfig()
	}
	e.Preempt = c.Preempt
	if c.Election == nil {
		e.MinDetection = c.gossipTiming().FailureDetectionFloor()
	}
	return e
}

// LocalElection returns the election timings of the Local profile.
func LocalElection() bully.Config {
	e := bully.DefaultConfig()
	e.StartupDelay = time.Second
	e.ElectionTimeout = 200 * time.Millisecond
	e.CoordinatorTimeout = time.Second
	e.RankDelay = 100 * time.Millisecond
	e.Jitter = 50 * time.Millisecond
	e.Stabilization = 2 * time.Second
	e.ResignHold = 3 * time.Second
	e.AnnounceInterval = time.Second
	e.RetryDelay = 500 * time.Millisecond
	return e
}
