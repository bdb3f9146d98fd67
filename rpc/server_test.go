package rpc

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/vmihailenco/msgpack/v5"
)

func TestHandshakeWrongVersion(t *testing.T) {
	srv := startServer(t, newFakeBackend(), nil)
	_, err := dial(testCtx(t), srv.Path(), 2)
	if !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("dial with version 2 = %v, want ErrUnsupportedVersion", err)
	}
	if !strings.Contains(err.Error(), "version 1") {
		t.Errorf("error %q does not say which version the agent speaks", err)
	}

	r := dialRaw(t, srv.Path())
	v := uint64(0)
	r.send(Hello{Version: &v})
	r.expectError(CodeUnsupportedVersion)
	r.expectClosed()
	checkServing(t, srv.Path())
}

func TestHandshakeFirstFrameNotHello(t *testing.T) {
	srv := startServer(t, newFakeBackend(), nil)
	for name, first := range map[string]any{
		"request":       Request{Seq: 1, Op: OpStatus},
		"no version":    map[string]any{"client": "x"},
		"version type":  map[string]any{"version": "one"},
		"not a map":     42,
		"nil":           nil,
		"array of junk": []any{1, "two", 3.0},
	} {
		t.Run(name, func(t *testing.T) {
			r := dialRaw(t, srv.Path())
			r.send(first)
			var reply HelloReply
			r.read(&reply)
			if reply.Error == nil || reply.Error.Code != CodeBadRequest || reply.Version != ProtocolVersion {
				t.Fatalf("reply = %+v (error %+v), want bad_request", reply, reply.Error)
			}
			r.expectClosed()
		})
	}
	checkServing(t, srv.Path())
}

// TestBadFrames sends each kind of bad input on a fresh connection, before
// or after the handshake, and checks the error frame (if any), that the
// connection closes, and that the server goes on serving.
func TestBadFrames(t *testing.T) {
	srv := startServer(t, newFakeBackend(), nil)
	validReq, _ := msgpack.Marshal(map[string]any{"seq": 1, "op": "status"})
	cases := []struct {
		name  string
		hello bool   // handshake first
		input []byte // bytes written after the handshake
		half  bool   // half-close after writing, as a client that stops writing
		code  string // expected error code; "" for none
	}{
		{"garbage", true, frame([]byte{0xc1, 0xff, 0x00, 0x13, 0x37}), false, CodeBadRequest},
		{"garbage hello", false, frame([]byte{0xc1, 0xc1}), false, CodeBadRequest},
		{"oversized", true, []byte{0xff, 0xff, 0xff, 0xff, 1, 2, 3}, false, CodeFrameTooLarge},
		{"oversized hello", false, []byte{0xff, 0xff, 0xff, 0xff}, false, CodeFrameTooLarge},
		{"huge array", true, frame([]byte{0xdd, 0xff, 0xff, 0xff, 0xff}), false, CodeBadRequest},
		{"huge map in body", true, frame(append(hugeMapRequest(), 0xc0)), false, CodeBadRequest},
		{"huge string", true, frame([]byte{0xdb, 0x7f, 0xff, 0xff, 0xff, 'a'}), false, CodeBadRequest},
		{"deep nesting", true, frame(deepArray(100)), false, CodeBadRequest},
		{"truncated", true, append([]byte{0, 0, 0, 100}, 0x83, 0xa3, 's'), true, CodeBadRequest},
		{"truncated header", true, []byte{0, 0}, true, CodeBadRequest},
		{"truncated then gone", true, []byte{0, 0, 0, 100, 1, 2}, false, ""},
		{"empty frame", true, frame(nil), false, CodeBadRequest},
		{"trailing bytes", true, frame(append(validReq, 0x01)), false, CodeBadRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := dialRaw(t, srv.Path())
			if tc.hello {
				r.hello()
			}
			r.sendBytes(tc.input)
			switch {
			case tc.half:
				_ = r.nc.CloseWrite()
			case tc.code == "":
				r.nc.Close() // the client vanishes mid-frame
				return
			}
			r.expectError(tc.code)
			r.expectClosed()
		})
	}
	checkServing(t, srv.Path())
}

// hugeMapRequest is a request whose body declares a map of 2^32-1 pairs,
// missing its last value (the test appends one byte).
func hugeMapRequest() []byte {
	b := []byte{0x83, 0xa3, 's', 'e', 'q', 0x01, 0xa2, 'o', 'p', 0xa6, 's', 't', 'a', 't', 'u', 's'}
	return append(b, 0xa4, 'b', 'o', 'd', 'y', 0xdf, 0xff, 0xff, 0xff, 0xff)
}

func deepArray(depth int) []byte {
	b := make([]byte, depth+1)
	for i := range depth {
		b[i] = 0x91 // fixarray of one element
	}
	b[depth] = 0xc0
	return b
}

// frame prefixes body with its 4-byte big-endian length.
func frame(body []byte) []byte {
	n := len(body)
	return append([]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}, body...)
}

func TestUnknownOpRaw(t *testing.T) {
	srv := startServer(t, newFakeBackend(), nil)
	r := dialRaw(t, srv.Path())
	r.hello()
	r.send(Request{Seq: 7, Op: "no-such-op"})
	if resp := r.expectError(CodeUnknownOp); resp.Seq != 7 {
		t.Fatalf("seq = %d, want 7", resp.Seq)
	}
	r.send(map[string]any{"seq": 8, "op": OpStatus, "extra": "ignored"})
	var resp Response
	r.read(&resp)
	if resp.Seq != 8 || resp.Error != nil || resp.Stream {
		t.Fatalf("status response = %+v", resp)
	}
	var st Status
	if err := msgpack.Unmarshal(resp.Body, &st); err != nil || st.Node != "n1" {
		t.Fatalf("status body = %+v, %v", st, err)
	}
}

func TestMaxConns(t *testing.T) {
	srv := startServer(t, newFakeBackend(), func(cfg *ServerConfig) { cfg.MaxConns, cfg.MaxConnsPerPeer, cfg.MaxUngreeted = 2, 2, 2 })
	c1 := dialT(t, srv.Path())
	c2 := dialT(t, srv.Path())
	_, err := Dial(testCtx(t), srv.Path())
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("third Dial = %v, want ErrBusy", err)
	}
	if _, err := c2.Status(testCtx(t)); err != nil {
		t.Fatalf("Status on an admitted client: %v", err)
	}
	c1.Close()
	// The server frees the slot once it notices c1 has gone.
	var c3 *Client
	eventually(t, "a slot to free up", func() bool {
		c3, err = Dial(testCtx(t), srv.Path())
		if err != nil && !errors.Is(err, ErrBusy) {
			t.Fatalf("Dial: %v", err)
		}
		return err == nil
	})
	defer c3.Close()
	if _, err := c3.Status(testCtx(t)); err != nil {
		t.Fatalf("Status: %v", err)
	}
}

func TestHandshakeTimeout(t *testing.T) {
	srv := startServer(t, newFakeBackend(), func(cfg *ServerConfig) { cfg.HandshakeTimeout = 50 * time.Millisecond })
	r := dialRaw(t, srv.Path())
	r.expectClosed() // says nothing, gets closed
	checkServing(t, srv.Path())
}

func TestIdleTimeout(t *testing.T) {
	srv := startServer(t, newFakeBackend(), func(cfg *ServerConfig) { cfg.IdleTimeout = 50 * time.Millisecond })
	r := dialRaw(t, srv.Path())
	r.hello()
	r.expectClosed()
}

func TestCloseEndsIdleConnections(t *testing.T) {
	srv := startServer(t, newFakeBackend(), nil)
	r := dialRaw(t, srv.Path())
	r.hello()
	c := dialT(t, srv.Path())
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	r.expectClosed()
	if _, err := c.Status(testCtx(t)); err == nil {
		t.Fatal("Status succeeded after Close")
	}
}

func TestServerConfigValidation(t *testing.T) {
	dir := t.TempDir()
	for name, cfg := range map[string]ServerConfig{
		"no path":         {Backend: newFakeBackend()},
		"no backend":      {Path: dir + "/a.sock"},
		"tiny frame":      {Path: dir + "/b.sock", Backend: newFakeBackend(), MaxFrame: 10},
		"huge frame":      {Path: dir + "/e.sock", Backend: newFakeBackend(), MaxFrame: MaxMaxFrame + 1},
		"negative conns":  {Path: dir + "/c.sock", Backend: newFakeBackend(), MaxConns: -1},
		"negative writes": {Path: dir + "/d.sock", Backend: newFakeBackend(), WriteTimeout: -time.Second},
	} {
		if srv, err := Listen(cfg); err == nil {
			srv.Close()
			t.Errorf("%s: Listen succeeded", name)
		} else if !strings.HasPrefix(err.Error(), "rpc: ") {
			t.Errorf("%s: error %q lacks the rpc: prefix", name, err)
		}
	}
}
