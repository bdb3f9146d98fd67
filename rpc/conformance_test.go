package rpc

import (
	"bytes"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/wire"
)

// The conformance tests drive a real server over a real Unix socket with
// hand-built bytes (msgpack_test.go), one test per section of
// docs/PROTOCOL.md, for every rule it states. The rules that need a real
// agent behind the socket are tested in package agent (protocol_test.go).

// Schemas of the maps the server sends (see shape).
var (
	helloReplyShape = map[string]string{"version": "uint", "agent": "str", "max_frame": "uint", "error": "map|nil"}
	responseShape   = map[string]string{"seq": "uint", "error": "map|nil", "body": "any", "stream": "bool"}
	errorShape      = map[string]string{"code": "str", "message": "str"}
	leaderShape     = map[string]string{"node": "str", "id": "uint", "epoch": "uint"}
)

// readMap reads one frame and decodes it for shape checks.
func (r *raw) readMap() map[string]any {
	r.t.Helper()
	b, err := wire.ReadFrame(r.nc, MaxMaxFrame)
	if err != nil {
		r.t.Fatalf("read frame: %v", err)
	}
	return decodeAny(r.t, b)
}

// helloOK sends mhello and checks that the reply accepts it.
func (r *raw) helloOK() map[string]any {
	r.t.Helper()
	r.sendFrame(mhello())
	m := shape(r.t, "hello reply", r.readMap(), helloReplyShape)
	if m["error"] != nil {
		r.t.Fatalf("hello refused: %v", m["error"])
	}
	return m
}

// response reads a response frame for seq (stream false) and checks its
// shape; it returns the error map, or nil, and the body.
func (r *raw) response(seq uint64) (errMap map[string]any, body any) {
	r.t.Helper()
	m := shape(r.t, "response", r.readMap(), responseShape)
	if m["seq"] != seq || m["stream"] != false {
		r.t.Fatalf("response seq %v stream %v, want seq %d, stream false", m["seq"], m["stream"], seq)
	}
	if m["error"] == nil {
		return nil, m["body"]
	}
	if m["body"] != nil {
		r.t.Errorf("an error response carries a body: %v", m["body"])
	}
	return shape(r.t, "error", m["error"], errorShape), nil
}

// wantError reads a response for seq carrying code, and returns its message.
func (r *raw) wantError(seq uint64, code string) string {
	r.t.Helper()
	e, body := r.response(seq)
	if e == nil || e["code"] != code {
		r.t.Fatalf("response to seq %d = error %v, body %v; want %s", seq, e, body, code)
	}
	return e["message"].(string)
}

// wantOK reads a successful response for seq and returns its body.
func (r *raw) wantOK(seq uint64) any {
	r.t.Helper()
	e, body := r.response(seq)
	if e != nil {
		r.t.Fatalf("response to seq %d = error %v", seq, e)
	}
	return body
}

// stillOpen checks that the connection still serves requests.
func (r *raw) stillOpen() {
	r.t.Helper()
	r.sendFrame(mreq(100, OpStatus, nil))
	r.wantOK(100)
}

// wantConn checks what the doc says of the connection after an error with
// code: open or closed.
func (r *raw) wantConn(code string) {
	r.t.Helper()
	if keepsOpen(code) {
		r.stillOpen()
	} else {
		r.expectClosed()
	}
}

// TestConformanceHandshake: section 4.
func TestConformanceHandshake(t *testing.T) {
	srv := startServer(t, newFakeBackend(), nil)
	m := dialRaw(t, srv.Path()).helloOK()
	if m["version"] != uint64(1) || m["agent"] != "test-1.2.3" || m["max_frame"] != uint64(DefaultMaxFrame) {
		t.Fatalf("hello reply = %v", m)
	}
	t.Run("unsupported version", func(t *testing.T) {
		for _, v := range [][]byte{mfix(0), mfix(2), mu16(256), mu64(1 << 63)} {
			r := dialRaw(t, srv.Path())
			r.sendFrame(mmap(mstr("version"), v))
			reply := shape(t, "hello reply", r.readMap(), helloReplyShape)
			e := shape(t, "error", reply["error"], errorShape)
			if e["code"] != CodeUnsupportedVersion || reply["version"] != uint64(1) {
				t.Fatalf("version % x: reply %v", v, reply)
			}
			r.expectClosed()
		}
	})
	t.Run("first frame not a hello", func(t *testing.T) {
		for name, first := range map[string][]byte{
			"request":          mreq(1, OpStatus, nil),
			"no version":       mmap(mstr("client"), mstr("x")),
			"version str":      mmap(mstr("version"), mstr("1")),
			"version negative": mmap(mstr("version"), mnegfix(-1)),
			"version nil":      mmap(mstr("version"), mnil),
			"version float":    mmap(mstr("version"), mf64(1)),
			"client bin":       mmap(mstr("version"), mfix(1), mstr("client"), mbin("x")),
			"version twice":    mmap(mstr("version"), mfix(1), mstr("version"), mfix(1)),
			"array":            marr(mfix(1)),
			"nil":              mnil,
			"int":              mfix(1),
			"int key":          mmap(mfix(1), mfix(1), mstr("version"), mfix(1)),
			"bin key":          mmap(mbin("version"), mfix(1)),
			"empty":            {},
			"not msgpack":      {0xc1},
			"trailing bytes":   append(mhello(), 0xc0),
		} {
			r := dialRaw(t, srv.Path())
			r.sendFrame(first)
			reply := shape(t, name, r.readMap(), helloReplyShape)
			if e, _ := reply["error"].(map[string]any); e == nil || e["code"] != CodeBadRequest {
				t.Fatalf("%s: reply %v, want bad_request", name, reply)
			}
			r.expectClosed()
		}
	})
	t.Run("unknown hello keys ignored", func(t *testing.T) {
		r := dialRaw(t, srv.Path())
		r.sendFrame(mmap(mstr("future"), marr(mext(1, 2), mf64(0.5)), mstr("version"), mu64(1)))
		shape(t, "hello reply", r.readMap(), helloReplyShape)
		r.stillOpen()
	})
	t.Run("first frame too large", func(t *testing.T) {
		r := dialRaw(t, srv.Path())
		r.sendBytes([]byte{0, 1, 0, 1}) // 65537 bytes declared, none sent
		reply := shape(t, "hello reply", r.readMap(), helloReplyShape)
		if e, _ := reply["error"].(map[string]any); e == nil || e["code"] != CodeFrameTooLarge {
			t.Fatalf("reply %v, want frame_too_large", reply)
		}
		r.expectClosed()
	})
	t.Run("too many connections, without reading the hello", func(t *testing.T) {
		busy := startServer(t, newFakeBackend(), func(c *ServerConfig) { c.MaxConns = 1 })
		dialRaw(t, busy.Path()).helloOK()
		r := dialRaw(t, busy.Path()) // says nothing
		reply := shape(t, "hello reply", r.readMap(), helloReplyShape)
		if e, _ := reply["error"].(map[string]any); e == nil || e["code"] != CodeBusy {
			t.Fatalf("reply %v, want too_many_connections", reply)
		}
		r.expectClosed()
		if n := busy.Refused(); n != 1 {
			t.Fatalf("Refused() = %d after one refusal", n)
		}
	})
	t.Run("timeouts", func(t *testing.T) {
		fb := newFakeBackend()
		quick := startServer(t, fb, func(c *ServerConfig) {
			c.HandshakeTimeout, c.IdleTimeout = 100*time.Millisecond, 100*time.Millisecond
		})
		dialRaw(t, quick.Path()).expectClosed() // no hello: closed without a reply
		idle := dialRaw(t, quick.Path())
		idle.helloOK()
		idle.expectClosed() // no request: closed without a frame
		w := dialRaw(t, quick.Path())
		w.helloOK()
		w.sendFrame(mreq(1, OpWatch, nil))
		w.readMap() // the first event
		// Nothing to wait for: the idle timeout must not fire, so let it pass.
		time.Sleep(300 * time.Millisecond)
		recv(t, fb.subs, "the subscription").push(t, Event{Event: EventNoLeader, Node: "n1"})
		if ev := w.readMap(); ev["stream"] != true {
			t.Fatalf("the watch ended after the idle timeout: %v", ev)
		}
	})
}

// TestConformanceFraming: section 2, and the framing rows of section 7.
func TestConformanceFraming(t *testing.T) {
	const limit = 2048
	fb := newFakeBackend()
	srv := startServer(t, fb, func(c *ServerConfig) { c.MaxFrame = limit })
	r := dialRaw(t, srv.Path())
	if m := r.helloOK(); m["max_frame"] != uint64(limit) {
		t.Fatalf("max_frame announced %v, want %d", m["max_frame"], limit)
	}
	r.sendFrame(padded(t, limit))
	r.wantOK(1)
	t.Run("pipelined requests answered in order", func(t *testing.T) {
		r.sendBytes(cat(frame(mreq(2, OpStatus, nil)), frame(mreq(3, "nope", nil)), frame(mreq(4, OpLeader, mnil))))
		r.wantOK(2)
		r.wantError(3, CodeUnknownOp)
		shape(t, "leader", r.wantOK(4), leaderShape)
	})
	for name, tc := range map[string]struct {
		input []byte
		half  bool
		code  string
	}{
		"over max_frame":          {frame(padded(t, limit+1)), false, CodeFrameTooLarge},
		"declared over max_frame": {[]byte{0, 0, 0x08, 0x01}, false, CodeFrameTooLarge},
		"empty body":              {frame(nil), false, CodeBadRequest},
		"trailing bytes":          {frame(append(mreq(5, OpStatus, nil), 0xc0)), false, CodeBadRequest},
		"length beyond the frame": {frame(mmap(mstr("seq"), mfix(1), mstr("op"), []byte{0xdb, 0, 0, 1, 0, 'x'})), false, CodeBadRequest},
		"nesting over 32":         {frame(mmap(mstr("seq"), mfix(1), mstr("body"), deepArray(33))), false, CodeBadRequest},
		"truncated, half-closed":  {[]byte{0, 0, 0, 9, 0x83}, true, CodeBadRequest},
		"truncated header":        {[]byte{0, 0}, true, CodeBadRequest},
	} {
		t.Run(name, func(t *testing.T) {
			r := dialRaw(t, srv.Path())
			r.helloOK()
			r.sendBytes(tc.input)
			if tc.half {
				_ = r.nc.CloseWrite()
			}
			r.wantError(0, tc.code)
			r.expectClosed()
		})
	}
	t.Run("nesting of 32 is fine", func(t *testing.T) {
		r := dialRaw(t, srv.Path())
		r.helloOK()
		r.sendFrame(mmap(mstr("seq"), mfix(6), mstr("op"), mstr(OpStatus), mstr("body"), deepArray(31)))
		r.wantOK(6)
	})
	t.Run("response over max_frame", func(t *testing.T) {
		fb.set(func(f *fakeBackend) {
			for range 40 {
				f.members = append(f.members, Member{Name: strings.Repeat("m", 60)})
			}
		})
		r := dialRaw(t, srv.Path())
		r.helloOK()
		r.sendFrame(mreq(7, OpMembers, nil))
		r.wantError(7, CodeFrameTooLarge)
		r.expectClosed()
	})
}

// padded is a status request of exactly n bytes: seq 1, padded with an
// unknown key.
func padded(t *testing.T, n int) []byte {
	base := mmap(mstr("seq"), mfix(1), mstr("op"), mstr(OpStatus), mstr("pad"), mstr(""))
	pad := n - len(base) - 2 // str16 header (3 bytes) replaces fixstr's (1)
	b := mmap(mstr("seq"), mfix(1), mstr("op"), mstr(OpStatus), mstr("pad"), mstr(strings.Repeat("p", pad)))
	if len(b) != n {
		t.Fatalf("padded request is %d bytes, want %d", len(b), n)
	}
	return b
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// TestConformanceTypes: section 3's strict types, in the request envelope
// (bad_request with seq 0: the seq cannot be trusted) and in a body
// (bad_request with the request's seq); both close the connection. And
// what is allowed: any integer encoding, unknown keys of any type, a
// missing key as its zero value.
func TestConformanceTypes(t *testing.T) {
	srv := startServer(t, newFakeBackend(), nil)
	seqOK := [][]byte{mfix(9), mu8(9), mu16(9), mu32(9), mu64(9), mi8(9), mi16(9), mi32(9), mi64(9)}
	for _, seq := range seqOK {
		r := dialRaw(t, srv.Path())
		r.helloOK()
		r.sendFrame(mmap(mstr("op"), mstr(OpStatus), mstr("seq"), seq,
			mstr("x-array"), marr(mbin("b"), mext(3, 4)), mstr("x-map"), mmap(mfix(1), mnil), mstr("x-float"), mf64(1.5)))
		r.wantOK(9)
	}
	envelope := map[string][]byte{
		"array":          marr(mfix(1), mstr(OpStatus)),
		"nil":            mnil,
		"str":            mstr("status"),
		"seq -1":         mmap(mstr("seq"), mnegfix(-1), mstr("op"), mstr(OpStatus)),
		"seq int64 -1":   mmap(mstr("seq"), mi64(-1), mstr("op"), mstr(OpStatus)),
		"seq 0":          mmap(mstr("seq"), mfix(0), mstr("op"), mstr(OpStatus)),
		"seq missing":    mmap(mstr("op"), mstr(OpStatus)),
		"seq nil":        mmap(mstr("seq"), mnil, mstr("op"), mstr(OpStatus)),
		"seq float":      mmap(mstr("seq"), mf64(1), mstr("op"), mstr(OpStatus)),
		"seq str":        mmap(mstr("seq"), mstr("1"), mstr("op"), mstr(OpStatus)),
		"op bin":         mmap(mstr("seq"), mfix(1), mstr("op"), mbin(OpStatus)),
		"op nil":         mmap(mstr("seq"), mfix(1), mstr("op"), mnil),
		"op not UTF-8":   mmap(mstr("seq"), mfix(1), mstr("op"), mraw(0xa2, 0xff, 0xfe)),
		"seq twice":      mmap(mstr("seq"), mfix(1), mstr("seq"), mfix(2), mstr("op"), mstr(OpStatus)),
		"int key":        mmap(mstr("seq"), mfix(1), mstr("op"), mstr(OpStatus), mfix(7), mfix(7)),
		"bin key":        mmap(mstr("seq"), mfix(1), mbin("op"), mstr(OpStatus)),
		"a second hello": mhello(),
	}
	for name, body := range envelope {
		t.Run("envelope "+name, func(t *testing.T) {
			r := dialRaw(t, srv.Path())
			r.helloOK()
			r.sendFrame(body)
			r.wantError(0, CodeBadRequest)
			r.expectClosed()
		})
	}
	bodies := map[string][]byte{
		"check [1]":            mreq(3, OpCheck, marr(mfix(1))),
		"check epoch -1":       mreq(3, OpCheck, mmap(mstr("epoch"), mnegfix(-1))),
		"check epoch str":      mreq(3, OpCheck, mmap(mstr("epoch"), mstr("7"))),
		"check epoch nil":      mreq(3, OpCheck, mmap(mstr("epoch"), mnil)),
		"check no body":        mreq(3, OpCheck, nil),
		"check nil body":       mreq(3, OpCheck, mnil),
		"transfer name bin":    mreq(3, OpTransfer, mmap(mstr("name"), mbin("n2"))),
		"transfer name int":    mreq(3, OpTransfer, mmap(mstr("name"), mfix(2))),
		"force-leave [name]":   mreq(3, OpForceLeave, marr(mstr("gone"))),
		"drain off 1":          mreq(3, OpDrain, mmap(mstr("off"), mfix(1))),
		"drain no body":        mreq(3, OpDrain, nil),
		"resign hold -1":       mreq(3, OpResign, mmap(mstr("hold_ms"), mi32(-1))),
		"resign hold float":    mreq(3, OpResign, mmap(mstr("hold_ms"), mf64(10))),
		"resign str":           mreq(3, OpResign, mstr("now")),
		"keys action bin":      mreq(3, OpKeys, mmap(mstr("action"), mbin(KeysList))),
		"watch body [runner]":  mreq(3, OpWatch, marr(mnil)),
		"watch runner str":     mreq(3, OpWatch, mmap(mstr("runner"), mstr("yes"))),
		"watch grace -5":       mreq(3, OpWatch, mmap(mstr("runner"), mmap(mstr("grace_ms"), mnegfix(-5)))),
		"watch grace twice":    mreq(3, OpWatch, mmap(mstr("runner"), mmap(mstr("grace_ms"), mfix(5), mstr("grace_ms"), mfix(5)))),
		"stopped outside":      mreq(3, OpStopped, mmap(mstr("epoch"), mfix(1))),
		"running outside":      mreq(3, OpRunning, mmap(mstr("epoch"), mfix(1), mstr("pgid"), mfix(9))),
		"check epoch key bin":  mreq(3, OpCheck, mmap(mbin("epoch"), mfix(7))),
		"check epoch int64 -1": mreq(3, OpCheck, mmap(mstr("epoch"), mi64(-1))),
	}
	for name, body := range bodies {
		t.Run("body "+name, func(t *testing.T) {
			r := dialRaw(t, srv.Path())
			r.helloOK()
			r.sendFrame(body)
			r.wantError(3, CodeBadRequest)
			r.expectClosed()
		})
	}
	t.Run("missing keys are zero values", func(t *testing.T) {
		r := dialRaw(t, srv.Path())
		r.helloOK()
		r.sendFrame(mmap(mstr("seq"), mfix(4)))
		r.wantError(4, CodeUnknownOp) // op "" is unknown
		r.sendFrame(mreq(5, OpCheck, mmap()))
		if m := shape(t, "check", r.wantOK(5), checkShape); m["current"] != false {
			t.Fatalf("check of epoch 0 = %v", m)
		}
		r.sendFrame(mreq(6, OpDrain, mmap(mstr("unknown"), mnil)))
		r.wantOK(6)
	})
}

// TestConformanceErrorCodes: every code of section 8, as the server sends
// it, followed by what the doc says of the connection; and the doc's table
// lists exactly the codes the code knows, with their connection behaviour.
func TestConformanceErrorCodes(t *testing.T) {
	checkErrorTable(t)
	for _, tc := range errorTriggers() {
		t.Run(tc.code, func(t *testing.T) {
			fb := newFakeBackend()
			srv := startServer(t, fb, tc.config)
			if tc.busy {
				dialRaw(t, srv.Path()).helloOK()
			}
			r := dialRaw(t, srv.Path())
			if !tc.preHello {
				r.helloOK()
			}
			seq := tc.provoke(t, fb, srv, r)
			if tc.preHello {
				reply := shape(t, "hello reply", r.readMap(), helloReplyShape)
				if e, _ := reply["error"].(map[string]any); e == nil || e["code"] != tc.code {
					t.Fatalf("hello reply %v, want %s", reply, tc.code)
				}
			} else if msg := r.wantError(seq, tc.code); tc.code == CodeNoLeader && msg == "" {
				t.Fatal("no_leader without a reason")
			}
			r.wantConn(tc.code)
		})
	}
}

// errorTrigger provokes one error code.
type errorTrigger struct {
	code     string
	config   func(*ServerConfig)
	busy     bool // take the only slot first
	preHello bool // the error comes in the hello reply
	// provoke sends what causes the error and returns the seq its
	// response carries.
	provoke func(t *testing.T, fb *fakeBackend, srv *Server, r *raw) uint64
}

func errorTriggers() []errorTrigger {
	send := func(b []byte, seq uint64) func(*testing.T, *fakeBackend, *Server, *raw) uint64 {
		return func(_ *testing.T, _ *fakeBackend, _ *Server, r *raw) uint64 { r.sendFrame(b); return seq }
	}
	return []errorTrigger{
		{code: CodeNoLeader, provoke: func(_ *testing.T, fb *fakeBackend, _ *Server, r *raw) uint64 {
			fb.set(func(f *fakeBackend) { f.leader = nil })
			r.sendFrame(mreq(1, OpLeader, nil))
			return 1
		}},
		{code: CodeNotLeader, provoke: func(_ *testing.T, fb *fakeBackend, _ *Server, r *raw) uint64 {
			fb.set(func(f *fakeBackend) { f.resignErr = ErrNotLeader })
			r.sendFrame(mreq(1, OpResign, nil))
			return 1
		}},
		{code: CodeUnknownOp, provoke: send(mreq(1, "no-such-op", mmap()), 1)},
		{code: CodeInvalidArgument, provoke: send(mreq(1, OpTransfer, mmap(mstr("name"), mstr(""))), 1)},
		{code: CodeNotFound, provoke: send(mreq(1, OpForceLeave, mmap(mstr("name"), mstr("n9"))), 1)},
		{code: CodeInternal, provoke: func(_ *testing.T, fb *fakeBackend, _ *Server, r *raw) uint64 {
			fb.set(func(f *fakeBackend) { f.membErr = errors.New("disk on fire") })
			r.sendFrame(mreq(1, OpMembers, nil))
			return 1
		}},
		{code: CodeBadRequest, provoke: send(mreq(1, OpCheck, marr(mfix(1))), 1)},
		{code: CodeFrameTooLarge, provoke: func(_ *testing.T, _ *fakeBackend, _ *Server, r *raw) uint64 {
			r.sendBytes([]byte{0x7f, 0xff, 0xff, 0xff})
			return 0
		}},
		{code: CodeUnsupportedVersion, preHello: true, provoke: send(mmap(mstr("version"), mfix(9)), 0)},
		{code: CodeBusy, preHello: true, busy: true, config: func(c *ServerConfig) { c.MaxConns = 1 },
			provoke: func(*testing.T, *fakeBackend, *Server, *raw) uint64 { return 0 }},
		{code: CodeShuttingDown, provoke: func(t *testing.T, fb *fakeBackend, srv *Server, r *raw) uint64 {
			fb.set(func(f *fakeBackend) { f.block = make(chan struct{}) })
			r.sendFrame(mreq(1, OpStatus, nil))
			recv(t, fb.entered, "the blocked status call")
			go srv.Close()
			return 1
		}},
		{code: CodeTooSlow, provoke: func(t *testing.T, fb *fakeBackend, _ *Server, r *raw) uint64 {
			r.sendFrame(mreq(1, OpWatch, nil))
			r.readMap() // the first event
			recv(t, fb.subs, "the subscription").stop()
			return 1
		}},
	}
}

// checkErrorTable compares section 8's table with the code: the same
// codes, and "open" or "closes" as keepsOpen says.
func checkErrorTable(t *testing.T) {
	t.Helper()
	doc, err := os.ReadFile("../docs/PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	start, end := strings.Index(s, "## 8."), strings.Index(s, "## 9.")
	if start < 0 || end < start {
		t.Fatal("section 8 not found")
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| `(Err[A-Za-z]+)` \\| (open|closes) \\|")
	names := map[error]string{ErrNoLeader: "ErrNoLeader", ErrNotLeader: "ErrNotLeader", ErrUnknownOp: "ErrUnknownOp",
		ErrInvalidArgument: "ErrInvalidArgument", ErrNotFound: "ErrNotFound", ErrInternal: "ErrInternal",
		ErrBadRequest: "ErrBadRequest", ErrFrameTooLarge: "ErrFrameTooLarge", ErrUnsupportedVersion: "ErrUnsupportedVersion",
		ErrBusy: "ErrBusy", ErrShuttingDown: "ErrShuttingDown", ErrTooSlow: "ErrTooSlow", ErrTimeout: "ErrTimeout", ErrLost: "ErrLost"}
	seen := map[string]bool{}
	for _, m := range row.FindAllStringSubmatch(s[start:end], -1) {
		code, name, conn := m[1], m[2], m[3]
		seen[code] = true
		if got := names[sentinel(code)]; got != name {
			t.Errorf("section 8 maps %s to %s; the code to %q", code, name, got)
		}
		if (conn == "open") != keepsOpen(code) {
			t.Errorf("section 8 says %s %s the connection; keepsOpen says %v", code, conn, keepsOpen(code))
		}
	}
	for _, code := range knownCodes() {
		if !seen[code] {
			t.Errorf("section 8 does not list %s", code)
		}
	}
}
