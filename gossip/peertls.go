package gossip

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// DefaultHandshakeTimeout bounds a KeyedTLS handshake when
// KeyedTLS.HandshakeTimeout is zero.
const DefaultHandshakeTimeout = 5 * time.Second

// ErrPeerAuthentication is wrapped by every error of KeyedTLS's Server and
// Client: the TLS handshake with the peer failed, so nothing was sent or
// accepted on the connection.
var ErrPeerAuthentication = errors.New("gossip: peer authentication failed")

// Derivation constants. Changing any of them changes every derived key pair:
// agents with different values cannot talk to each other.
const (
	peerTLSSalt = "tenure peer tls v1"
	peerTLSInfo = "ed25519"
	// peerTLSHintSuffix ends the TLS server name a client sends as a hint of
	// the keys it accepts; see KeyedTLS.
	peerTLSHintSuffix = ".tenure-peer.invalid"
	// maxHintedKeys bounds the keys named in the hint, keeping the server
	// name far below the 253 bytes a host name may have.
	maxHintedKeys = 8
)

// Fixed certificate fields. Nothing checks the validity period (pinning
// replaces chain verification, see KeyedTLS), so it is set wide enough that
// no verifier with a sane clock would call it expired or not yet valid.
var (
	peerCertNotBefore = time.Date(2000, time.January, 1, 0, 0, 0, 0, time.UTC)
	peerCertNotAfter  = time.Date(9999, time.December, 31, 23, 59, 59, 0, time.UTC)
)

// KeyedTLS is a ConnWrapper that authenticates and encrypts every peer
// connection with TLS 1.3, using key pairs that every agent derives from the
// shared cluster secret (the key that also feeds serf's keyring), and pins:
// a peer is accepted only if it proves it holds the private key derived from
// one of the installed cluster keys. Both sides present a certificate
// (mutual authentication). What it authenticates is membership of the
// cluster, not a particular agent: every holder of the secret can act as any
// agent, as with serf's keyring.
//
// # Key derivation
//
// For each cluster key k (16, 24 or 32 bytes, as accepted by serf and
// Config.EncryptKey), the ed25519 seed is HKDF-SHA256(secret k, salt
// "tenure peer tls v1", info "ed25519", 32 bytes). The certificate is
// self-signed by that key, with serial 1, subject CN "tenure peer <id>" (id:
// the first 8 bytes of SHA-256 of the public key, in hex) and a validity
// period from 2000 to 9999. The validity period is never checked, so an
// agent with a wrong clock still connects; a key stops being accepted only
// when SetKeys removes it.
//
// # Rotation
//
// The first installed key is the primary, the others are only accepted. To
// rotate without downtime, install [old, new] everywhere, then [new, old],
// then [new]. Each side also tells the other which keys it accepts, so that
// it presents one of those whenever it holds one (its primary if
// possible): the client names the ids of its first eight keys in the TLS
// server name ("<id>.<id>.tenure-peer.invalid"), and the server lists the
// subjects of all its certificates in its certificate request. Two agents
// therefore connect whenever they share any key among the client's first
// eight. The server name is sent in clear, so an observer can tell which
// connections belong to the same cluster; the ids reveal nothing about the
// secret.
//
// # Replay
//
// Every connection runs a full TLS 1.3 handshake with fresh ephemeral keys
// from both sides, so records captured from one connection do not decrypt,
// and are rejected, on another. Session tickets are disabled on the server
// and the client keeps no session cache, so there is no resumption and no
// 0-RTT early data (which TLS 1.3 does not protect against replay; Go's TLS
// does not send or accept it either). Within a connection TLS rejects
// reordered or repeated records.
//
// # Failures
//
// Server and Client bound the handshake by HandshakeTimeout and by any
// deadline already set on the connection, and return errors that wrap
// ErrPeerAuthentication. In TLS 1.3 the client finishes its handshake before
// the server has checked the client's certificate; a server rejecting it is
// seen by the client as a failure of its first read. Between KeyedTLS agents
// this does not happen: a client that accepted the server's certificate
// shares that key, and presents it.
//
// KeyedTLS does not log; Rejected and Failed count failures for the caller.
// Its methods are safe for concurrent use.
type KeyedTLS struct {
	// HandshakeTimeout bounds each handshake; zero means
	// DefaultHandshakeTimeout. Set it before the first use.
	HandshakeTimeout time.Duration

	state    atomic.Pointer[keyedState]
	rejected atomic.Uint64
	failed   atomic.Uint64
}

var _ ConnWrapper = (*KeyedTLS)(nil)

// keyedState is one immutable set of installed keys. A handshake uses the
// state current when it starts, so SetKeys never affects one in flight.
type keyedState struct {
	keys  [][]byte // as installed; keys[0] is the primary
	certs []tls.Certificate
	ids   []string // key ids, as in certificate subjects and hints
	pubs  []ed25519.PublicKey
	cas   *x509.CertPool // every certificate, to name them in a certificate request
	hint  string         // the server name a client sends
}

// NewKeyedTLS returns a KeyedTLS with keys installed, keys[0] being the
// primary. See SetKeys.
func NewKeyedTLS(keys [][]byte) (*KeyedTLS, error) {
	k := &KeyedTLS{}
	if err := k.SetKeys(keys); err != nil {
		return nil, err
	}
	return k, nil
}

// SetKeys atomically replaces the installed keys: keys[0] becomes the
// primary, presented to peers, and every key is accepted from peers. Each
// key must be 16, 24 or 32 bytes (tenure keygen makes 32). Handshakes in
// flight finish with the keys they started with; established connections
// are not affected. On error the installed keys are unchanged.
func (k *KeyedTLS) SetKeys(keys [][]byte) error {
	st, err := newKeyedState(keys)
	if err != nil {
		return err
	}
	k.state.Store(st)
	return nil
}

// Keys returns copies of the primary key and of every installed key, the
// primary first.
func (k *KeyedTLS) Keys() (primary []byte, all [][]byte) {
	st := k.state.Load()
	all = make([][]byte, len(st.keys))
	for i, key := range st.keys {
		all[i] = slices.Clone(key)
	}
	return slices.Clone(st.keys[0]), all
}

// Rejected returns how many handshakes failed because the two sides share
// no key: this side found the peer's certificate matching none of its keys,
// or the peer rejected this side's certificate.
func (k *KeyedTLS) Rejected() uint64 {
	return k.rejected.Load()
}

// Failed returns how many handshakes failed for any reason (a rejection, a
// timeout, a peer that does not speak TLS, a broken connection), Rejected
// included.
func (k *KeyedTLS) Failed() uint64 {
	return k.failed.Load()
}

// curves is the key exchange of peer handshakes: X25519 alone. Go's default
// adds the hybrid X25519MLKEM768, which about doubles a handshake's CPU;
// with many agents on one host, handshakes were most of what the voters
// spent at a fleet's start (docs/SECURITY.md says why this is acceptable).
var curves = []tls.CurveID{tls.X25519}

// Server runs the server side of the handshake on a connection accepted from
// a peer.
func (k *KeyedTLS) Server(conn net.Conn) (net.Conn, error) {
	st := k.state.Load()
	v := &pinVerifier{st: st}
	cfg := &tls.Config{
		MinVersion:       tls.VersionTLS13,
		CurvePreferences: curves,
		Certificates:     st.certs[:1],
		// Present the primary unless the client hinted that it does not
		// accept it but accepts another of ours.
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			return st.certForHint(hello.ServerName), nil
		},
		// RequireAnyClientCert demands a certificate without verifying a
		// chain; VerifyConnection pins it. ClientCAs is not used for
		// verification in this mode: it only names our keys in the
		// certificate request, so that the client picks one we accept.
		ClientAuth:             tls.RequireAnyClientCert,
		ClientCAs:              st.cas,
		VerifyConnection:       v.verify,
		SessionTicketsDisabled: true, // no resumption, no 0-RTT
	}
	tc := tls.Server(conn, cfg)
	if err := k.handshake(tc, v); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPeerAuthentication, err)
	}
	return tc, nil
}

// Client runs the client side of the handshake on a connection dialled to a
// peer. The peer's address plays no part: peers are identified by the
// cluster key alone.
func (k *KeyedTLS) Client(conn net.Conn, _ string) (net.Conn, error) {
	st := k.state.Load()
	v := &pinVerifier{st: st}
	cfg := &tls.Config{
		MinVersion:       tls.VersionTLS13,
		CurvePreferences: curves,
		Certificates:     st.certs[:1],
		// Present the primary unless the server's certificate request shows
		// that it does not accept it but accepts another of ours.
		GetClientCertificate: func(req *tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return st.certForRequest(req), nil
		},
		// There is no certificate authority and no host name to check: all
		// agents present the same kind of self-signed certificate, derived
		// from the cluster secret, and are dialled by address. The standard
		// chain and host name verification is therefore skipped, and
		// replaced by VerifyConnection, which pins the peer's public key to
		// the keys derived from the installed cluster keys. TLS itself
		// proves that the peer holds the matching private key (its
		// CertificateVerify signature over the handshake).
		InsecureSkipVerify: true,
		VerifyConnection:   v.verify,
		ServerName:         st.hint,
		// ClientSessionCache stays nil: no resumption, no 0-RTT.
	}
	tc := tls.Client(conn, cfg)
	if err := k.handshake(tc, v); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPeerAuthentication, err)
	}
	return tc, nil
}

// handshake runs tc's handshake within HandshakeTimeout and counts failures.
// On timeout the TLS package closes the underlying connection.
func (k *KeyedTLS) handshake(tc *tls.Conn, v *pinVerifier) error {
	timeout := k.HandshakeTimeout
	if timeout <= 0 {
		timeout = DefaultHandshakeTimeout
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err := tc.HandshakeContext(ctx)
	if err == nil {
		return nil
	}
	k.failed.Add(1)
	switch {
	case v.rejected:
		k.rejected.Add(1)
	case peerRejectedUs(err):
		k.rejected.Add(1)
		err = fmt.Errorf("peer rejected our certificate (the peers share no cluster key): %w", err)
	case errors.Is(err, context.DeadlineExceeded):
		err = fmt.Errorf("handshake not done within %v: %w", timeout, err)
	}
	return err
}

// peerRejectedUs reports whether err is a bad_certificate alert from the
// peer, which is what a Go TLS peer sends when its VerifyConnection fails.
func peerRejectedUs(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "remote error" && op.Err != nil &&
		op.Err.Error() == tls.AlertError(42).Error() // 42: bad_certificate
}

// pinVerifier checks one handshake's peer certificate against one key state,
// and remembers whether it rejected it.
type pinVerifier struct {
	st       *keyedState
	rejected bool // set during the handshake, read after it on the same goroutine
}

func (v *pinVerifier) verify(cs tls.ConnectionState) error {
	if cs.Version != tls.VersionTLS13 {
		v.rejected = true
		return fmt.Errorf("peer negotiated TLS version %#x, not 1.3", cs.Version)
	}
	if len(cs.PeerCertificates) == 0 {
		v.rejected = true
		return errors.New("peer presented no certificate")
	}
	pub, ok := cs.PeerCertificates[0].PublicKey.(ed25519.PublicKey)
	if !ok {
		v.rejected = true
		return fmt.Errorf("peer certificate has a %T key, not an ed25519 cluster key", cs.PeerCertificates[0].PublicKey)
	}
	for _, p := range v.st.pubs {
		if bytes.Equal(pub, p) {
			return nil
		}
	}
	v.rejected = true
	return errors.New("peer certificate matches none of the installed cluster keys (the peers share no key)")
}

func newKeyedState(keys [][]byte) (*keyedState, error) {
	if len(keys) == 0 {
		return nil, errors.New("gossip: peer tls: at least one cluster key is required")
	}
	var errs []error
	for i, key := range keys {
		switch len(key) {
		case 16, 24, 32:
		default:
			errs = append(errs, fmt.Errorf("gossip: peer tls: key %d is %d bytes; it must be 32 (or 16 or 24, as serf accepts)", i, len(key)))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	st := &keyedState{cas: x509.NewCertPool()}
	var hinted []string
	for _, key := range keys {
		cert, pub, id, err := deriveCert(key)
		if err != nil {
			return nil, err
		}
		st.keys = append(st.keys, slices.Clone(key))
		st.certs = append(st.certs, cert)
		st.pubs = append(st.pubs, pub)
		st.ids = append(st.ids, id)
		st.cas.AddCert(cert.Leaf)
		if len(hinted) < maxHintedKeys && !slices.Contains(hinted, id) {
			hinted = append(hinted, id)
		}
	}
	st.hint = strings.Join(hinted, ".") + peerTLSHintSuffix
	return st, nil
}

// deriveCert derives the key pair of one cluster key and its self-signed
// certificate.
func deriveCert(key []byte) (tls.Certificate, ed25519.PublicKey, string, error) {
	seed, err := hkdf.Key(sha256.New, key, []byte(peerTLSSalt), peerTLSInfo, ed25519.SeedSize)
	if err != nil {
		return tls.Certificate{}, nil, "", fmt.Errorf("gossip: peer tls: derive key: %w", err)
	}
	priv := ed25519.NewKeyFromSeed(seed)
	pub := priv.Public().(ed25519.PublicKey)
	sum := sha256.Sum256(pub)
	id := hex.EncodeToString(sum[:8])
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "tenure peer " + id},
		NotBefore:             peerCertNotBefore,
		NotAfter:              peerCertNotAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		return tls.Certificate{}, nil, "", fmt.Errorf("gossip: peer tls: create certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, nil, "", fmt.Errorf("gossip: peer tls: parse certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv, Leaf: leaf}, pub, id, nil
}

// certForHint picks the certificate a server presents: the first of its
// keys, in its order, that the client's server name says the client accepts,
// or the primary.
func (st *keyedState) certForHint(serverName string) *tls.Certificate {
	name, ok := strings.CutSuffix(strings.ToLower(serverName), peerTLSHintSuffix)
	if !ok {
		return &st.certs[0]
	}
	hinted := strings.Split(name, ".")
	for i, id := range st.ids {
		if slices.Contains(hinted, id) {
			return &st.certs[i]
		}
	}
	return &st.certs[0]
}

// certForRequest picks the certificate a client presents: the first of its
// keys, in its order, whose subject the server's certificate request names,
// or the primary.
func (st *keyedState) certForRequest(req *tls.CertificateRequestInfo) *tls.Certificate {
	for i := range st.certs {
		for _, ca := range req.AcceptableCAs {
			if bytes.Equal(st.certs[i].Leaf.RawSubject, ca) {
				return &st.certs[i]
			}
		}
	}
	return &st.certs[0]
}
