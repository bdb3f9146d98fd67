package gossip

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Default values used by DefaultConfig and for zero fields of Config.
const (
	DefaultBindAddr          = "0.0.0.0:7946"
	DefaultJoinRetryInterval = time.Second
	DefaultJoinRetryMax      = 30 * time.Second
)

// Config configures a Membership. Start copies it; the caller's struct is
// never written to. Zero-valued optional fields take the defaults documented
// on each field.
type Config struct {
	// Name is this node's unique name in the cluster. Required.
	Name string
	// ID is this node's ID, advertised in the "id" tag. Members are ordered
	// by (ID, Name); gossip itself gives it no meaning.
	ID uint64
	// BindAddr is the gossip address, "ip:port", used for both UDP and TCP.
	// Port 0 picks a free port (LocalMember().Addr shows it). Default
	// DefaultBindAddr. The host must be an IP address.
	BindAddr string
	// AdvertiseAddr is the address other members use to reach this one,
	// "ip" or "ip:port" (the port defaults to the bound one). Default: the
	// bind address, or a private address of this host when binding to
	// 0.0.0.0.
	AdvertiseAddr string
	// PeerAddr is this node's peer transport address, advertised in the
	// "peer" tag; "" advertises none.
	PeerAddr string
	// Voter and Eligible are advertised in the "v" and "e" tags.
	Voter, Eligible bool
	// Tags are extra tags to advertise. The reserved keys "id", "peer", "v"
	// and "e" are refused. All tags together must encode to at most 512
	// bytes.
	Tags map[string]string
	// SnapshotPath is a file in which serf records the members it knows, so
	// that after a restart this node rejoins them without Join. "" keeps no
	// snapshot.
	SnapshotPath string
	// AddrFile is a file in which this node records the gossip address it
	// advertises, so that after a restart on another address (a new DHCP
	// lease, a rescheduled container) it knows news of the old address,
	// which the others keep until they declare it failed, for its own past
	// and not another node's claim to its name: serf would resolve that
	// claim by stopping this node. "" keeps no file: such a restart then
	// stops itself if news of the old address reaches it first.
	AddrFile string
	// Join lists gossip addresses ("host" or "host:port") to join. Start
	// tries them in the background, retrying with exponential backoff, until
	// one join succeeds or the Membership shuts down.
	Join []string
	// JoinRetryInterval is the first delay between join attempts; it doubles
	// after each failure up to JoinRetryMax. Defaults DefaultJoinRetryInterval
	// and DefaultJoinRetryMax.
	JoinRetryInterval, JoinRetryMax time.Duration
	// Timing sets failure detection and reconnection speed. Default
	// LANTiming().
	Timing Timing
	// Logger receives this package's logs and serf's and memberlist's, which
	// are parsed into levels. nil discards them.
	Logger *slog.Logger
	// EncryptKey, if set, encrypts and authenticates all gossip with this
	// AES key of 16, 24 or 32 bytes through serf's keyring. Every member
	// must use the same key.
	EncryptKey []byte
	// KeyringFile, if set, is a file in which serf keeps this node's gossip
	// keyring (a JSON array of base64 keys, the primary first, mode 0600),
	// rewritten after every key change (see Membership.InstallKey), so that
	// a restarted node keeps the keys the cluster rotated to. If the file
	// exists, Start uses its keys, its first key as the primary, even
	// without EncryptKey; EncryptKey, if set, must be one of them, or Start
	// fails with ErrKeyNotInKeyring. If the file does not exist and
	// EncryptKey is set, Start creates it holding EncryptKey. "" keeps no
	// file: a restart starts again from EncryptKey.
	KeyringFile string
	// MaxMembers is the largest number of members, counting those that
	// failed or left recently, that this node's cluster may have. It bounds
	// what this node accepts from a gossip stream before memberlist decodes
	// it: a push-pull listing more members is refused, and the first message
	// of a stream may hold at most 32 KiB plus 1 KiB per member (160 KiB for
	// the default). Every member should use the same value. Default
	// DefaultMaxMembers (128).
	MaxMembers int
	// MaxInboundStreams bounds the gossip stream connections (joins,
	// push-pulls, TCP probes) accepted at once. A stream must deliver its
	// first message within Timing.TCPTimeout (at most 5 s); while it has
	// not, it is unproven, and when the limit is reached a new stream closes
	// the oldest unproven one, so idle or slow connections cannot lock
	// members out. Default DefaultMaxInboundStreams (64), far more than the
	// few a cluster of MaxMembers opens at once.
	MaxInboundStreams int
}

// DefaultConfig returns a Config with every default filled in and Name set
// to the host name (left empty if the host name cannot be read).
func DefaultConfig() Config {
	name, _ := os.Hostname()
	return Config{
		Name:              name,
		BindAddr:          DefaultBindAddr,
		Voter:             true,
		Eligible:          true,
		JoinRetryInterval: DefaultJoinRetryInterval,
		JoinRetryMax:      DefaultJoinRetryMax,
		Timing:            LANTiming(),
		MaxMembers:        DefaultMaxMembers,
		MaxInboundStreams: DefaultMaxInboundStreams,
	}
}

// withDefaults returns a deep copy of c with zero optional fields defaulted.
func (c Config) withDefaults() Config {
	if c.BindAddr == "" {
		c.BindAddr = DefaultBindAddr
	}
	if c.JoinRetryInterval == 0 {
		c.JoinRetryInterval = DefaultJoinRetryInterval
	}
	if c.JoinRetryMax == 0 {
		c.JoinRetryMax = DefaultJoinRetryMax
	}
	if c.Timing == (Timing{}) {
		c.Timing = LANTiming()
	}
	if c.MaxMembers == 0 {
		c.MaxMembers = DefaultMaxMembers
	}
	if c.MaxInboundStreams == 0 {
		c.MaxInboundStreams = DefaultMaxInboundStreams
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.Tags = maps.Clone(c.Tags)
	c.Join = slices.Clone(c.Join)
	c.EncryptKey = slices.Clone(c.EncryptKey)
	return c
}

// Validate reports every problem with c, after applying the defaults of
// zero fields.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.Name == "" {
		errs = append(errs, errors.New("gossip: name is required"))
	}
	if _, _, err := splitBindAddr(c.BindAddr); err != nil {
		errs = append(errs, err)
	}
	if c.AdvertiseAddr != "" {
		if _, _, err := splitAdvertiseAddr(c.AdvertiseAddr); err != nil {
			errs = append(errs, err)
		}
	}
	if c.PeerAddr != "" {
		if _, _, err := net.SplitHostPort(c.PeerAddr); err != nil {
			errs = append(errs, fmt.Errorf("gossip: peer address %q: %w", c.PeerAddr, err))
		}
	}
	if err := checkExtraTags(c.Tags); err != nil {
		errs = append(errs, err)
	}
	if c.JoinRetryInterval < 0 || c.JoinRetryMax < c.JoinRetryInterval {
		errs = append(errs, fmt.Errorf("gossip: join retry interval %v must be positive and at most the max %v",
			c.JoinRetryInterval, c.JoinRetryMax))
	}
	switch len(c.EncryptKey) {
	case 0, 16, 24, 32:
	default:
		errs = append(errs, fmt.Errorf("gossip: encrypt key must be 16, 24 or 32 bytes, not %d", len(c.EncryptKey)))
	}
	if err := c.Timing.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.MaxMembers < 1 || c.MaxInboundStreams < 1 {
		errs = append(errs, fmt.Errorf("gossip: max members %d and max inbound streams %d must be positive",
			c.MaxMembers, c.MaxInboundStreams))
	}
	return errors.Join(errs...)
}

// splitBindAddr parses "ip:port".
func splitBindAddr(addr string) (string, int, error) {
	host, port, err := splitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("gossip: bind address %q: %w", addr, err)
	}
	if net.ParseIP(host) == nil {
		return "", 0, fmt.Errorf("gossip: bind address %q: host must be an IP address", addr)
	}
	return host, port, nil
}

// splitAdvertiseAddr parses "ip" or "ip:port"; port is 0 when absent.
func splitAdvertiseAddr(addr string) (string, int, error) {
	if net.ParseIP(strings.Trim(addr, "[]")) != nil {
		return strings.Trim(addr, "[]"), 0, nil
	}
	host, port, err := splitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("gossip: advertise address %q: %w", addr, err)
	}
	if net.ParseIP(host) == nil {
		return "", 0, fmt.Errorf("gossip: advertise address %q: host must be an IP address", addr)
	}
	return host, port, nil
}

// splitHostPort splits "host:port" and checks the port.
func splitHostPort(addr string) (string, int, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return "", 0, fmt.Errorf("bad port %q", portStr)
	}
	return host, int(port), nil
}
