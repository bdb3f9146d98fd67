package gossip

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testKey returns a 32-byte cluster key filled with b.
func testKey(b byte) []byte {
	return bytes.Repeat([]byte{b}, 32)
}

func newKeyed(t *testing.T, keys ...[]byte) *KeyedTLS {
	t.Helper()
	k, err := NewKeyedTLS(keys)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// keyedListen starts a transport wrapped by w (plain TCP if w is nil).
func keyedListen(t *testing.T, w ConnWrapper, h Handler) *Transport {
	t.Helper()
	cfg := TransportConfig{Handler: h}
	if w != nil {
		cfg.Wrap = w
	}
	return listen(t, cfg)
}

// countingEcho returns the echo handler and a counter of its calls.
func countingEcho() (Handler, *atomic.Int64) {
	n := new(atomic.Int64)
	return func(ctx context.Context, req []byte) ([]byte, error) {
		n.Add(1)
		return echo(ctx, req)
	}, n
}

// wantAuthFailure checks err is a clear, undelivered, authentication failure.
func wantAuthFailure(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		t.Fatal("call succeeded, want an authentication failure")
	}
	if !errors.Is(err, ErrPeerAuthentication) || !errors.Is(err, ErrUnreachable) ||
		!strings.Contains(err.Error(), "peer authentication failed") {
		t.Fatalf("error %q (%T), want one wrapping ErrPeerAuthentication and ErrUnreachable", err, err)
	}
}

func TestKeyedTLSRoundTrip(t *testing.T) {
	key := testKey(1)
	h, calls := countingEcho()
	sk := newKeyed(t, key)
	server := keyedListen(t, sk, h)
	client := keyedListen(t, newKeyed(t, key), nil)
	for _, req := range []string{"a", "b"} { // the second one reuses the connection
		if got := call(t, client, server.Addr(), req); got != "echo:"+req {
			t.Fatalf("got %q", got)
		}
	}
	if calls.Load() != 2 || sk.Rejected() != 0 || sk.Failed() != 0 {
		t.Fatalf("handler calls %d, rejected %d, failed %d", calls.Load(), sk.Rejected(), sk.Failed())
	}
}

func TestKeyedTLSDifferentKeysRejected(t *testing.T) {
	h, calls := countingEcho()
	sk := newKeyed(t, testKey(1))
	ck := newKeyed(t, testKey(2))
	server := keyedListen(t, sk, h)
	client := keyedListen(t, ck, nil)
	_, err := client.Call(context.Background(), server.Addr(), []byte("x"))
	wantAuthFailure(t, err)
	if !strings.Contains(err.Error(), "share no key") {
		t.Errorf("error %q does not say why", err)
	}
	if ck.Rejected() != 1 {
		t.Errorf("client rejected %d, want 1", ck.Rejected())
	}
	waitFor(t, 2*time.Second, "server to count the rejection", func() bool { return sk.Rejected() == 1 })
	if calls.Load() != 0 {
		t.Fatalf("handler ran %d times", calls.Load())
	}
}

func TestKeyedTLSAgainstPlainPeers(t *testing.T) {
	key := testKey(1)
	sk := newKeyed(t, key)
	tlsServer := keyedListen(t, sk, nil)
	plainServer := keyedListen(t, nil, nil)
	tlsClient := keyedListen(t, newKeyed(t, key), nil)
	plainClient := keyedListen(t, nil, nil)

	if _, err := plainClient.Call(context.Background(), tlsServer.Addr(), []byte("x")); err == nil {
		t.Fatal("plain client to TLS server succeeded")
	}
	waitFor(t, 2*time.Second, "server to count the failed handshake", func() bool { return sk.Failed() == 1 })
	if sk.Rejected() != 0 {
		t.Errorf("plain client counted as rejected")
	}
	if got := call(t, tlsClient, tlsServer.Addr(), "after"); got != "echo:after" {
		t.Fatalf("TLS server after a plain client: %q", got)
	}

	start := time.Now()
	_, err := tlsClient.Call(context.Background(), plainServer.Addr(), []byte("x"))
	wantAuthFailure(t, err)
	if d := time.Since(start); d > time.Second {
		t.Errorf("TLS client to plain server took %v to fail", d)
	}
}

func TestKeyedTLSRotation(t *testing.T) {
	a, b := testKey(0xa), testKey(0xb)
	h, calls := countingEcho()
	sk := newKeyed(t, a, b)
	server := keyedListen(t, sk, h)
	addr := server.Addr()

	// The server presents B, which this client accepts, though A is its primary.
	ck := newKeyed(t, b)
	if got := call(t, keyedListen(t, ck, nil), addr, "b"); got != "echo:b" {
		t.Fatalf("client [B]: %q", got)
	}
	// The same KeyedTLS, switched to A, on a fresh transport (no pooled connection).
	if err := ck.SetKeys([][]byte{a}); err != nil {
		t.Fatal(err)
	}
	if got := call(t, keyedListen(t, ck, nil), addr, "a"); got != "echo:a" {
		t.Fatalf("client [A]: %q", got)
	}
	// The client presents A, the key the server names in its request, though
	// its primary is C, unknown to the server.
	if got := call(t, keyedListen(t, newKeyed(t, testKey(0xc), a), nil), addr, "ca"); got != "echo:ca" {
		t.Fatalf("client [C, A]: %q", got)
	}
	if sk.Failed() != 0 {
		t.Fatalf("server failed %d handshakes during rotation", sk.Failed())
	}

	if err := sk.SetKeys([][]byte{b}); err != nil {
		t.Fatal(err)
	}
	_, err := keyedListen(t, ck, nil).Call(context.Background(), addr, []byte("old"))
	wantAuthFailure(t, err)
	waitFor(t, 2*time.Second, "server to count the rejection", func() bool { return sk.Rejected() == 1 })
	if calls.Load() != 3 {
		t.Fatalf("handler calls %d, want 3", calls.Load())
	}
}

// Handshakes in flight while the keys change use either set, never a mix
// that fails.
func TestKeyedTLSSetKeysDuringHandshakes(t *testing.T) {
	a, b := testKey(0xa), testKey(0xb)
	sk := newKeyed(t, a, b)
	server := keyedListen(t, sk, nil)
	ck := newKeyed(t, b, a)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			keys := [][]byte{a, b}
			if i%2 == 1 {
				keys = [][]byte{b, a}
			}
			if err := sk.SetKeys(keys); err != nil {
				t.Error(err)
			}
			if err := ck.SetKeys(keys); err != nil {
				t.Error(err)
			}
			time.Sleep(time.Millisecond)
		}
	})
	var callers sync.WaitGroup
	for range 4 {
		client := keyedListen(t, ck, nil)
		callers.Go(func() {
			for range 10 {
				client.closeIdle()
				if _, err := client.Call(context.Background(), server.Addr(), []byte("x")); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	callers.Wait()
	close(stop)
	wg.Wait()
}

// closeIdle closes t's pooled connections, so that the next call dials.
func (t *Transport) closeIdle() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for addr, list := range t.idle {
		for _, c := range list {
			c.conn.Close()
		}
		delete(t.idle, addr)
	}
}

func TestKeyedTLSHandshakeDeadline(t *testing.T) {
	key := testKey(1)
	sk := newKeyed(t, key)
	sk.HandshakeTimeout = 200 * time.Millisecond
	// ProveTimeout, which also bounds the server's handshake, is longer:
	// HandshakeTimeout is what must end the silent connections.
	server := listen(t, TransportConfig{Wrap: sk, ProveTimeout: 5 * time.Second})
	client := keyedListen(t, newKeyed(t, key), nil)

	start := time.Now()
	var silent []net.Conn
	for range 3 {
		silent = append(silent, rawConn(t, server.Addr(), nil))
	}
	garbage := rawConn(t, server.Addr(), []byte("GET / HTTP/1.0\r\n\r\nnot tls at all"))
	if !closedByPeer(garbage) {
		t.Fatal("garbage connection not closed")
	}
	if got := call(t, client, server.Addr(), "busy"); got != "echo:busy" {
		t.Fatalf("call while silent connections are open: %q", got)
	}
	for i, c := range silent {
		if !closedByPeer(c) {
			t.Fatalf("silent connection %d not closed", i)
		}
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("silent connections closed after %v", d)
	}
	waitFor(t, 2*time.Second, "failures to be counted", func() bool { return sk.Failed() == 4 })
	if sk.Rejected() != 0 {
		t.Errorf("rejected %d, want 0", sk.Rejected())
	}

	// A client is bounded alike by a server that accepts and says nothing.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	acceptAndHold(t, ln)
	ck := newKeyed(t, key)
	ck.HandshakeTimeout = 200 * time.Millisecond
	mute := listen(t, TransportConfig{Wrap: ck, CallTimeout: 5 * time.Second})
	start = time.Now()
	_, err = mute.Call(context.Background(), ln.Addr().String(), []byte("x"))
	wantAuthFailure(t, err)
	if d := time.Since(start); d > time.Second {
		t.Fatalf("client handshake with a mute server took %v", d)
	}
}

// acceptAndHold accepts every connection to ln and holds it, saying
// nothing, until the test ends; then it closes ln and them.
func acceptAndHold(t *testing.T, ln net.Listener) {
	var held []net.Conn
	var mu sync.Mutex
	var acceptor sync.WaitGroup
	acceptor.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		ln.Close()
		acceptor.Wait()
		for _, c := range held {
			c.Close()
		}
	})
}

// recordingConn keeps a copy of every byte written to it.
type recordingConn struct {
	net.Conn
	mu      sync.Mutex
	written bytes.Buffer
}

func (c *recordingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.written.Write(p)
	c.mu.Unlock()
	return c.Conn.Write(p)
}

func (c *recordingConn) bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.written.Bytes())
}

// recordingWrap records the raw bytes each client connection writes, below
// the TLS layer of the wrapper it delegates to.
type recordingWrap struct {
	ConnWrapper
	mu    sync.Mutex
	conns []*recordingConn
}

func (w *recordingWrap) Client(conn net.Conn, addr string) (net.Conn, error) {
	rc := &recordingConn{Conn: conn}
	w.mu.Lock()
	w.conns = append(w.conns, rc)
	w.mu.Unlock()
	return w.ConnWrapper.Client(rc, addr)
}

func TestKeyedTLSReplayedBytesAreRejected(t *testing.T) {
	key := testKey(1)
	h, calls := countingEcho()
	sk := newKeyed(t, key)
	server := keyedListen(t, sk, h)
	rec := &recordingWrap{ConnWrapper: newKeyed(t, key)}
	client := keyedListen(t, rec, nil)
	if got := call(t, client, server.Addr(), "transfer"); got != "echo:transfer" {
		t.Fatalf("got %q", got)
	}
	if len(rec.conns) != 1 || calls.Load() != 1 {
		t.Fatalf("%d connections, %d handler calls; want 1 and 1", len(rec.conns), calls.Load())
	}
	captured := rec.conns[0].bytes()
	if bytes.Contains(captured, []byte("transfer")) {
		t.Fatal("the request travelled in clear")
	}

	replay := rawConn(t, server.Addr(), captured)
	replay.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.Copy(io.Discard, replay); errors.Is(err, net.ErrClosed) || isTimeout(err) {
		t.Fatalf("replayed connection not closed by the server: %v", err)
	}
	waitFor(t, 2*time.Second, "the failed handshake to be counted", func() bool { return sk.Failed() == 1 })
	if calls.Load() != 1 {
		t.Fatalf("replayed request reached the handler: %d calls", calls.Load())
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestKeyedTLSKeys(t *testing.T) {
	for _, tc := range []struct {
		name string
		keys [][]byte
		want string
	}{
		{"none", nil, "gossip: peer tls: at least one cluster key is required"},
		{"short", [][]byte{make([]byte, 31)}, "gossip: peer tls: key 0 is 31 bytes"},
		{"long", [][]byte{testKey(1), make([]byte, 33)}, "gossip: peer tls: key 1 is 33 bytes"},
		{"empty", [][]byte{{}}, "key 0 is 0 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := NewKeyedTLS(tc.keys)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("NewKeyedTLS: %v, %v; want error containing %q", k, err, tc.want)
			}
		})
	}

	keys := [][]byte{testKey(1), bytes.Repeat([]byte{2}, 16), bytes.Repeat([]byte{3}, 24)}
	k := newKeyed(t, keys...)
	if err := k.SetKeys([][]byte{make([]byte, 8)}); err == nil {
		t.Fatal("SetKeys accepted an 8-byte key")
	}
	primary, all := k.Keys()
	if !bytes.Equal(primary, keys[0]) || len(all) != 3 || !bytes.Equal(all[2], keys[2]) {
		t.Fatalf("Keys after a failed SetKeys: %x, %x", primary, all)
	}
	primary[0], all[1][0] = 0xff, 0xff // copies: the installed keys are unchanged
	keys[2][0] = 0xff                  // NewKeyedTLS copied its argument too
	primary, all = k.Keys()
	if primary[0] != 1 || all[1][0] != 2 || all[2][0] != 3 {
		t.Fatalf("installed keys changed through a returned or given slice: %x", all)
	}

	// Derivation is deterministic: the same key gives the same public key.
	k2 := newKeyed(t, testKey(1))
	if !bytes.Equal(k.state.Load().pubs[0], k2.state.Load().pubs[0]) {
		t.Fatal("same key, different derived public keys")
	}
	if bytes.Equal(k.state.Load().pubs[0], k.state.Load().pubs[1]) {
		t.Fatal("different keys, same derived public key")
	}
}
