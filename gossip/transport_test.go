package gossip

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/wire"
)

// echo answers "echo:" + request, fails requests starting with "fail", and
// panics on "panic".
func echo(_ context.Context, req []byte) ([]byte, error) {
	switch {
	case bytes.HasPrefix(req, []byte("fail")):
		return nil, errors.New("refused: " + string(req))
	case bytes.Equal(req, []byte("panic")):
		panic("boom")
	}
	return append([]byte("echo:"), req...), nil
}

// listen starts a transport on a loopback port, closed when the test ends.
func listen(t *testing.T, cfg TransportConfig) *Transport {
	t.Helper()
	if cfg.BindAddr == "" {
		cfg.BindAddr = "127.0.0.1:0"
	}
	if cfg.Handler == nil {
		cfg.Handler = echo
	}
	if cfg.Logger == nil {
		cfg.Logger, _ = testLogger(t)
	}
	tr, err := ListenTransport(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

func call(t *testing.T, tr *Transport, addr, req string) string {
	t.Helper()
	resp, err := tr.Call(context.Background(), addr, []byte(req))
	if err != nil {
		t.Fatalf("call %q: %v", req, err)
	}
	return string(resp)
}

// countingWrap counts connections and checks a one-byte greeting, so tests
// see both that Wrap is used and how many connections were opened.
type countingWrap struct {
	servers, clients atomic.Int64
	greeting         byte
}

func (w *countingWrap) Server(conn net.Conn) (net.Conn, error) {
	w.servers.Add(1)
	var b [1]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		return nil, err
	}
	if b[0] != w.greeting {
		return nil, errors.New("bad greeting")
	}
	_, err := conn.Write(b[:])
	return conn, err
}

func (w *countingWrap) Client(conn net.Conn, _ string) (net.Conn, error) {
	w.clients.Add(1)
	b := []byte{w.greeting}
	if _, err := conn.Write(b); err != nil {
		return nil, err
	}
	if _, err := io.ReadFull(conn, b); err != nil {
		return nil, err
	}
	return conn, nil
}

func TestTransportRoundTripsReuseConnection(t *testing.T) {
	wrap := &countingWrap{greeting: 7}
	server := listen(t, TransportConfig{Wrap: wrap})
	client := listen(t, TransportConfig{Wrap: wrap})
	for i := range 20 {
		req := "hello " + strconv.Itoa(i)
		if got := call(t, client, server.Addr(), req); got != "echo:"+req {
			t.Fatalf("got %q", got)
		}
	}
	if got, err := client.Call(context.Background(), server.Addr(), nil); err != nil || string(got) != "echo:" {
		t.Fatalf("empty request: %q, %v", got, err)
	}
	if s, c := wrap.servers.Load(), wrap.clients.Load(); s != 1 || c != 1 {
		t.Fatalf("sequential calls opened %d server / %d client connections, want 1", s, c)
	}
}

func TestTransportConcurrentCalls(t *testing.T) {
	server := listen(t, TransportConfig{})
	client := listen(t, TransportConfig{MaxIdlePerPeer: 3})
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for g := range 32 {
		wg.Go(func() {
			for i := range 50 {
				req := strconv.Itoa(g) + "/" + strconv.Itoa(i)
				resp, err := client.Call(context.Background(), server.Addr(), []byte(req))
				if err == nil && string(resp) != "echo:"+req {
					err = errors.New("crossed response: " + string(resp) + " for " + req)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	client.mu.Lock()
	idle := len(client.idle[server.Addr()])
	client.mu.Unlock()
	if idle > 3 {
		t.Errorf("%d idle connections pooled, limit 3", idle)
	}
}

func TestTransportHandlerErrorAndPanic(t *testing.T) {
	server := listen(t, TransportConfig{})
	client := listen(t, TransportConfig{})
	_, err := client.Call(context.Background(), server.Addr(), []byte("fail now"))
	var re *RemoteError
	if !errors.As(err, &re) || re.Message != "refused: fail now" {
		t.Fatalf("handler error = %v, want RemoteError", err)
	}
	_, err = client.Call(context.Background(), server.Addr(), []byte("panic"))
	if !errors.As(err, &re) || !strings.Contains(re.Message, "boom") {
		t.Fatalf("handler panic = %v, want RemoteError", err)
	}
	if got := call(t, client, server.Addr(), "still"); got != "echo:still" {
		t.Fatalf("after errors: %q", got)
	}
}

func TestTransportOversizedFrames(t *testing.T) {
	big := func(_ context.Context, req []byte) ([]byte, error) {
		if string(req) == "big" {
			return make([]byte, 4096), nil
		}
		return req, nil
	}
	server := listen(t, TransportConfig{Handler: big, MaxFrame: 1024})
	client := listen(t, TransportConfig{MaxFrame: 1024})

	_, err := client.Call(context.Background(), server.Addr(), make([]byte, 2000))
	if !errors.Is(err, wire.ErrFrameTooLarge) {
		t.Fatalf("oversized request: %v", err)
	}
	// The largest body whose frame fits, whatever its stamp, goes; one
	// byte more does not.
	fits := 1024 - maxRequestFrame(0) - 1 // a bin16 header is a byte longer
	if got := call(t, client, server.Addr(), strings.Repeat("x", fits)); len(got) != fits {
		t.Fatalf("request of %d bytes, the largest that fits: echoed %d bytes", fits, len(got))
	}
	if _, err := client.Call(context.Background(), server.Addr(), make([]byte, fits+1)); !errors.Is(err, wire.ErrFrameTooLarge) {
		t.Fatalf("request of %d bytes, one more than fits: %v", fits+1, err)
	}
	_, err = client.Call(context.Background(), server.Addr(), []byte("big"))
	var re *RemoteError
	if !errors.As(err, &re) || !strings.Contains(re.Message, "frame limit") {
		t.Fatalf("oversized response: %v", err)
	}

	// A peer with a larger limit sends a frame this client refuses.
	generous := listen(t, TransportConfig{Handler: big, MaxFrame: 1 << 20})
	if _, err = client.Call(context.Background(), generous.Addr(), []byte("big")); !errors.Is(err, wire.ErrFrameTooLarge) {
		t.Fatalf("response above the client's limit: %v", err)
	}
	if got := call(t, client, server.Addr(), "ok"); got != "ok" {
		t.Fatalf("after oversized frames: %q", got)
	}
}

func TestMaxRequestFrameIsTheLargestEncoding(t *testing.T) {
	for _, n := range []int{0, 1, 255, 256, 65535, 65536, 70000} {
		for _, until := range []uint64{0, 1, 300, 1 << 40, math.MaxUint64} {
			b, err := wire.Marshal(request{Body: make([]byte, n), Until: until})
			if err != nil {
				t.Fatal(err)
			}
			bound := maxRequestFrame(n)
			if len(b) > bound || until == math.MaxUint64 && len(b) != bound {
				t.Errorf("body of %d bytes, stamp %d: encodes to %d bytes, bound %d", n, until, len(b), bound)
			}
		}
	}
}

// rawConn dials addr and writes b.
func rawConn(t *testing.T, addr string, b []byte) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	return c
}

// closedByPeer reports whether the server closed (or reset) c within a
// second.
func closedByPeer(c net.Conn) bool {
	c.SetReadDeadline(time.Now().Add(time.Second))
	_, err := io.Copy(io.Discard, c)
	return !errors.Is(err, os.ErrDeadlineExceeded)
}

func TestTransportSurvivesBadInput(t *testing.T) {
	server := listen(t, TransportConfig{MaxFrame: 1024})
	client := listen(t, TransportConfig{})
	addr := server.Addr()

	silent := rawConn(t, addr, nil)
	random := make([]byte, 512)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	hugeHeader := binary.BigEndian.AppendUint32(nil, 1<<30)
	badMsgpack := binary.BigEndian.AppendUint32(nil, 3)
	badMsgpack = append(badMsgpack, 0x81, 0xa1, 0xc1) // map whose value is the unused byte 0xc1
	wrongShape := binary.BigEndian.AppendUint32(nil, 1)
	wrongShape = append(wrongShape, 0x2a) // the integer 42, not a map
	bad := map[string][]byte{"random": random, "huge header": hugeHeader, "bad msgpack": badMsgpack, "wrong shape": wrongShape}
	for name, b := range bad {
		if c := rawConn(t, addr, b); !closedByPeer(c) {
			t.Errorf("%s: connection not closed by the server", name)
		}
	}
	truncated := append(binary.BigEndian.AppendUint32(nil, 100), "short"...)
	rawConn(t, addr, truncated).Close()

	if got := call(t, client, addr, "fine"); got != "echo:fine" {
		t.Fatalf("after bad input: %q", got)
	}
	silent.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := silent.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("silent connection: %v, want it still open", err)
	}
}

func TestTransportDeadAddressFailsFast(t *testing.T) {
	client := listen(t, TransportConfig{})
	addr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	start := time.Now()
	_, err := client.Call(context.Background(), addr, []byte("x"))
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), addr) {
		t.Fatalf("call to a dead address: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("took %v", d)
	}
}

// hang blocks until its context ends, after signalling entered.
func hang(entered chan<- struct{}, returned *atomic.Bool) Handler {
	return func(ctx context.Context, req []byte) ([]byte, error) {
		if string(req) != "hang" {
			return req, nil
		}
		entered <- struct{}{}
		<-ctx.Done()
		returned.Store(true)
		return nil, ctx.Err()
	}
}

func TestTransportCallBoundedByContext(t *testing.T) {
	entered := make(chan struct{}, 10)
	var returned atomic.Bool
	server := listen(t, TransportConfig{Handler: hang(entered, &returned), HandlerTimeout: 5 * time.Second})
	client := listen(t, TransportConfig{CallTimeout: 150 * time.Millisecond})

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := client.Call(ctx, server.Addr(), []byte("hang")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("deadline: %v", err)
	} else if n := strings.Count(err.Error(), context.DeadlineExceeded.Error()); n != 1 {
		t.Fatalf("deadline: %q says why %d times, want once", err, n)
	}
	if _, err := client.Call(context.Background(), server.Addr(), []byte("hang")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("CallTimeout: %v", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, err := client.Call(ctx, server.Addr(), []byte("hang")); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancel: %v", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("three bounded calls took %v", d)
	}
	if got := call(t, client, server.Addr(), "quick"); got != "quick" {
		t.Fatalf("after timeouts: %q", got)
	}
}

func TestTransportCloseWaitsForHandlers(t *testing.T) {
	entered := make(chan struct{}, 1)
	var returned atomic.Bool
	server := listen(t, TransportConfig{Handler: hang(entered, &returned), HandlerTimeout: time.Minute})
	client := listen(t, TransportConfig{CallTimeout: time.Minute})
	errc := make(chan error, 1)
	go func() {
		_, err := client.Call(context.Background(), server.Addr(), []byte("hang"))
		errc <- err
	}()
	<-entered
	server.Close()
	if !returned.Load() {
		t.Fatal("Close returned before the handler")
	}
	if err := <-errc; err == nil {
		t.Fatal("call to a closing server succeeded")
	}
	server.Close()
	if _, err := server.Call(context.Background(), client.Addr(), []byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("call on a closed transport: %v", err)
	}
}

func TestTransportCloseInterruptsCalls(t *testing.T) {
	entered := make(chan struct{}, 1)
	var returned atomic.Bool
	server := listen(t, TransportConfig{Handler: hang(entered, &returned), HandlerTimeout: time.Minute})
	client := listen(t, TransportConfig{CallTimeout: time.Minute})
	errc := make(chan error, 1)
	go func() {
		_, err := client.Call(context.Background(), server.Addr(), []byte("hang"))
		errc <- err
	}()
	<-entered
	client.Close()
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("call interrupted by Close: %v", err)
	}
}

func TestTransportPeerRestartDoesNotFailNextCall(t *testing.T) {
	server := listen(t, TransportConfig{})
	client := listen(t, TransportConfig{})
	addr := server.Addr()
	call(t, client, addr, "warm")
	server.Close()
	waitFor(t, 2*time.Second, "pooled connection dropped", func() bool {
		client.mu.Lock()
		defer client.mu.Unlock()
		return len(client.idle) == 0
	})
	listen(t, TransportConfig{BindAddr: addr})
	if got := call(t, client, addr, "again"); got != "echo:again" {
		t.Fatalf("got %q", got)
	}
}

func TestTransportRetriesUnsentRequestOnce(t *testing.T) {
	server := listen(t, TransportConfig{})
	client := listen(t, TransportConfig{})
	// A pooled connection that is already broken, but whose reader has not
	// noticed yet: the write fails before any byte leaves.
	broken, other := net.Pipe()
	other.Close()
	broken.Close()
	stale := &clientConn{t: client, addr: server.Addr(), conn: broken,
		frames: make(chan []byte, 1), dead: make(chan struct{}), idleUntil: time.Now().Add(time.Hour)}
	client.mu.Lock()
	client.idle[server.Addr()] = []*clientConn{stale}
	client.mu.Unlock()
	if got := call(t, client, server.Addr(), "retry"); got != "echo:retry" {
		t.Fatalf("got %q", got)
	}
}

// TestTransportMaxConns: MaxConns bounds the connections that proved
// themselves; one proving itself beyond it is closed.
func TestTransportMaxConns(t *testing.T) {
	server := listen(t, TransportConfig{MaxConns: 2})
	client := listen(t, TransportConfig{})
	a := provenConn(t, server.Addr())
	provenConn(t, server.Addr())
	if _, err := client.Call(context.Background(), server.Addr(), []byte("x")); err == nil {
		t.Fatal("call above MaxConns succeeded")
	}
	a.Close()
	waitFor(t, time.Second, "a slot to free up", func() bool {
		_, err := client.Call(context.Background(), server.Addr(), []byte("x"))
		return err == nil
	})
}

func TestTransportWrapHandshakeFailure(t *testing.T) {
	server := listen(t, TransportConfig{Wrap: &countingWrap{greeting: 1}})
	client := listen(t, TransportConfig{Wrap: &countingWrap{greeting: 2}})
	if _, err := client.Call(context.Background(), server.Addr(), []byte("x")); !errors.Is(err, ErrUnreachable) {
		t.Fatalf("handshake failure: %v", err)
	}
}

func TestTransportConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  TransportConfig
		ok   bool
	}{
		{"defaults", TransportConfig{Handler: echo}, true},
		{"no handler", TransportConfig{}, false},
		{"bad bind", TransportConfig{Handler: echo, BindAddr: "nope"}, false},
		{"tiny frame", TransportConfig{Handler: echo, MaxFrame: 10}, false},
		{"negative timeout", TransportConfig{Handler: echo, CallTimeout: -1}, false},
	}
	for _, tt := range tests {
		if err := tt.cfg.Validate(); (err == nil) != tt.ok {
			t.Errorf("%s: Validate() = %v", tt.name, err)
		}
	}
	if d := DefaultTransportConfig(); d.MaxConns != DefaultMaxConns || d.MaxFrame != wire.DefaultMaxFrame {
		t.Errorf("DefaultTransportConfig() = %+v", d)
	}
}

// slowWrap is a countingWrap whose client handshake first waits delay, as
// on a host too loaded to finish handshakes within a call.
type slowWrap struct {
	countingWrap
	delay time.Duration
}

func (w *slowWrap) Client(conn net.Conn, addr string) (net.Conn, error) {
	time.Sleep(w.delay)
	return w.countingWrap.Client(conn, addr)
}

func TestTransportLateResponseKeepsConnection(t *testing.T) {
	release := make(chan struct{})
	slow := func(ctx context.Context, req []byte) ([]byte, error) {
		if string(req) == "slow" {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return append([]byte("echo:"), req...), nil
	}
	wrap := &countingWrap{greeting: 3}
	server := listen(t, TransportConfig{Handler: slow, Wrap: wrap})
	client := listen(t, TransportConfig{Wrap: wrap})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := client.Call(ctx, server.Addr(), []byte("slow")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("slow call: %v, want a deadline", err)
	}
	close(release) // the late response now arrives and is dropped
	deadline := time.Now().Add(5 * time.Second)
	for client.LateResponses() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := client.LateResponses(); n != 1 {
		t.Fatalf("late responses %d, want 1", n)
	}
	for i := range 5 {
		req := "next " + strconv.Itoa(i)
		if got := call(t, client, server.Addr(), req); got != "echo:"+req {
			t.Fatalf("after a late response: got %q for %q", got, req)
		}
	}
	if d := client.Dialed(); d != 1 {
		t.Fatalf("dialled %d connections, want 1: the late response should have kept the first", d)
	}
}

func TestTransportAbandonedCallWithoutResponseClosesConnection(t *testing.T) {
	entered := make(chan struct{}, 10)
	release := make(chan struct{})
	stuck := func(context.Context, []byte) ([]byte, error) {
		entered <- struct{}{}
		<-release // a handler that overruns its context
		return nil, nil
	}
	server := listen(t, TransportConfig{Handler: stuck, HandlerTimeout: time.Minute})
	t.Cleanup(func() { close(release) }) // before the server closes
	// The client waits its HandlerTimeout plus a second for a late
	// response, then gives the connection up.
	client := listen(t, TransportConfig{HandlerTimeout: 100 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := client.Call(ctx, server.Addr(), []byte("hang")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("call: %v", err)
	}
	<-entered
	for time.Since(start) < 10*time.Second {
		client.mu.Lock()
		open := len(client.clients)
		client.mu.Unlock()
		if open == 0 {
			if d := time.Since(start); d < time.Second {
				t.Fatalf("closed after %v, before the late-response wait", d)
			}
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("the abandoned connection stayed open with no response")
}

func TestTransportDialOutlivesCall(t *testing.T) {
	wrap := &slowWrap{countingWrap: countingWrap{greeting: 9}, delay: 300 * time.Millisecond}
	server := listen(t, TransportConfig{Wrap: wrap})
	client := listen(t, TransportConfig{Wrap: wrap})
	// Eight calls at once, each giving up long before the handshake ends:
	// they share one dial, and its connection serves the next call.
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			_, err := client.Call(ctx, server.Addr(), []byte("x"))
			if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrUnreachable) {
				t.Errorf("call during the handshake: %v, want an unreachable deadline", err)
			}
		})
	}
	wg.Wait()
	if got := call(t, client, server.Addr(), "after"); got != "echo:after" {
		t.Fatalf("got %q", got)
	}
	if d := client.Dialed(); d != 1 {
		t.Fatalf("dialled %d connections, want 1", d)
	}
}

// stallWrap completes the first client handshake and holds every later
// one until unstall is closed, telling stalled when it starts to.
type stallWrap struct {
	countingWrap
	stalled chan struct{}
	unstall chan struct{}
}

func (w *stallWrap) Client(conn net.Conn, addr string) (net.Conn, error) {
	if w.clients.Load() > 0 {
		select {
		case w.stalled <- struct{}{}:
		default:
		}
		<-w.unstall
	}
	return w.countingWrap.Client(conn, addr)
}

// TestTransportCallTakesConnectionPooledDuringDial: a call that found no
// idle connection and waits for a dial takes a connection another call
// brings back to the pool meanwhile, rather than the dial's outcome. On
// a slow link, where handshakes outlast DialTimeout, calls that waited
// only for the dial failed one after another while the connection before
// them came back unused.
func TestTransportCallTakesConnectionPooledDuringDial(t *testing.T) {
	inHandler, release := make(chan struct{}), make(chan struct{})
	handler := func(ctx context.Context, req []byte) ([]byte, error) {
		if string(req) == "slow" {
			inHandler <- struct{}{}
			<-release
		}
		return echo(ctx, req)
	}
	wrap := &stallWrap{countingWrap: countingWrap{greeting: 5}, stalled: make(chan struct{}, 1), unstall: make(chan struct{})}
	server := listen(t, TransportConfig{Handler: handler, Wrap: &wrap.countingWrap})
	client := listen(t, TransportConfig{Wrap: wrap, DialTimeout: time.Minute})
	defer close(wrap.unstall)
	if got := call(t, client, server.Addr(), "warm"); got != "echo:warm" {
		t.Fatalf("got %q", got)
	}
	slow := make(chan error, 1)
	go func() { _, err := client.Call(context.Background(), server.Addr(), []byte("slow")); slow <- err }()
	<-inHandler // the one pooled connection is in use
	next := make(chan string, 1)
	go func() {
		resp, err := client.Call(context.Background(), server.Addr(), []byte("next"))
		next <- fmt.Sprintf("%s %v", resp, err)
	}()
	<-wrap.stalled // the next call found none idle and waits for a dial
	close(release)
	if err := <-slow; err != nil {
		t.Fatalf("slow call: %v", err)
	}
	select {
	case got := <-next:
		if got != "echo:next <nil>" {
			t.Fatalf("got %q", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call waited for the stalled dial, not for the connection pooled meanwhile")
	}
}
