package gossip

import (
	"bytes"
	"compress/lzw"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/hashicorp/go-msgpack/v2/codec"
)

// The structs memberlist v0.7.0 encodes on streams (net.go), with the same
// field names and types, so that the tests write and read what memberlist
// does, with the decoder memberlist uses.
type (
	ppHeader struct {
		Nodes        int
		UserStateLen int
		Join         bool
	}
	ppNode struct {
		Name        string
		Addr        []byte
		Port        uint16
		Meta        []byte
		Incarnation uint32
		State       uint8
		Vsn         []uint8
	}
	userHeader struct{ UserMsgLen int }
	compressed struct {
		Algo uint8
		Buf  []byte
	}
	pingBody struct {
		SeqNo uint32
		Node  string
	}
)

// mp encodes values one after the other as memberlist does.
func mp(t testing.TB, vs ...any) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := codec.NewEncoder(&b, &codec.MsgpackHandle{})
	for _, v := range vs {
		if err := enc.Encode(v); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// pushPull returns a push-pull message as memberlist writes it, claiming
// claim nodes and holding nodes of them.
func pushPull(t testing.TB, claim, nodes int, userState []byte) []byte {
	vs := []any{&ppHeader{Nodes: claim, UserStateLen: len(userState)}}
	for i := range nodes {
		vs = append(vs, &ppNode{Name: "node-" + string(rune('a'+i%26)), Addr: []byte{10, 0, 0, byte(i)}, Port: 7946,
			Meta: bytes.Repeat([]byte("t"), 100), Incarnation: 1, Vsn: []uint8{1, 5, 2, 2, 5, 4}})
	}
	msg := append([]byte{mlPushPull}, mp(t, vs...)...)
	return append(msg, userState...)
}

// lzwBytes compresses b as memberlist does.
func lzwBytes(b []byte) []byte {
	var out bytes.Buffer
	w := lzw.NewWriter(&out, lzw.LSB, 8)
	w.Write(b)
	w.Close()
	return out.Bytes()
}

// compressMsg wraps a message as memberlist compresses it.
func compressMsg(t testing.TB, msg []byte) []byte {
	return append([]byte{mlCompress}, mp(t, &compressed{Buf: lzwBytes(msg)})...)
}

// lyingHeader is the 26-byte push-pull header claiming a million nodes.
func lyingHeader(t testing.TB) []byte {
	return pushPull(t, 1<<20, 0, nil)
}

func encrypted(n int) []byte {
	return append(binary.BigEndian.AppendUint32([]byte{mlEncrypt}, uint32(n)), make([]byte, n)...)
}

func TestScreenStream(t *testing.T) {
	lim := limitsFor(8)
	user := append([]byte{mlUser}, mp(t, &userHeader{UserMsgLen: 5})...)
	dupNodes := append([]byte{mlPushPull, 0x82}, mp(t, "Nodes", 1<<20, "Nodes", 0)...)
	dupNodesLast := append([]byte{mlPushPull, 0x82}, mp(t, "Nodes", 0, "Nodes", 1<<20)...)
	arrayHeader := append([]byte{mlPushPull}, mp(t, []int{1 << 20, 0})...)
	bomb := append([]byte{mlCompress}, mp(t, &compressed{Buf: lzwBytes(make([]byte, 10<<20))})...)
	tests := []struct {
		name string
		in   []byte
		want error // nil: accepted whole
	}{
		{"push-pull at the limit", pushPull(t, 8, 8, []byte("serf state")), nil},
		{"compressed push-pull", compressMsg(t, pushPull(t, 8, 8, []byte("serf"))), nil},
		{"ping", append([]byte{mlPing}, mp(t, &pingBody{SeqNo: 1, Node: "n1"})...), nil},
		{"user message", append(user, "hello"...), nil},
		{"encrypted at the limit", encrypted(lim.streamBytes - 5), nil},
		{"lying header (26 bytes)", lyingHeader(t), errScreenTooLarge},
		{"lying header, fewer than the bytes allowed", pushPull(t, 1000, 0, nil), errScreenMembers},
		{"one member too many", pushPull(t, 9, 9, nil), errScreenMembers},
		{"negative member count", append([]byte{mlPushPull, 0x81}, mp(t, "Nodes", -1)...), errScreenTooLarge},
		{"huge user state", append([]byte{mlPushPull}, mp(t, &ppHeader{UserStateLen: 20 << 20})...), errScreenTooLarge},
		{"duplicate Nodes, first huge", dupNodes, errScreenTooLarge},
		{"duplicate Nodes, last huge", dupNodesLast, errScreenBad},
		{"header as an array", arrayHeader, errScreenBad},
		{"compressed lying header", compressMsg(t, lyingHeader(t)), errScreenTooLarge},
		{"compressed header one member over", compressMsg(t, pushPull(t, 9, 9, nil)), errScreenMembers},
		{"compression bomb", bomb, errScreenTooLarge},
		{"compressed twice", compressMsg(t, compressMsg(t, pushPull(t, 1, 1, nil))), errScreenType},
		{"encrypted, too long", encrypted(lim.streamBytes), errScreenTooLarge},
		{"encrypted 20 MB header", binary.BigEndian.AppendUint32([]byte{mlEncrypt}, 20<<20), errScreenTooLarge},
		{"huge user message", append([]byte{mlUser}, mp(t, &userHeader{UserMsgLen: 20 << 20})...), errScreenTooLarge},
		{"labelled", []byte{mlLabel, 1, 'x', mlPing, 0x80}, errScreenType},
		{"unknown type", []byte{3, 0x80}, errScreenType},
		{"truncated push-pull", pushPull(t, 8, 8, nil)[:40], errScreenCut},
		{"array claiming 4G elements", append([]byte{mlPing, 0xdd}, 0xff, 0xff, 0xff, 0xff), errScreenTooLarge},
		{"deep nesting", append([]byte{mlPing}, bytes.Repeat([]byte{0x91}, 100)...), errScreenBad},
	}
	for _, tt := range tests {
		msg, err := screenStream(bytes.NewReader(tt.in), lim)
		switch {
		case tt.want == nil && err != nil:
			t.Errorf("%s: refused: %v", tt.name, err)
		case tt.want == nil && !bytes.Equal(msg, tt.in):
			t.Errorf("%s: returned %d of %d bytes", tt.name, len(msg), len(tt.in))
		case tt.want != nil && !errors.Is(err, tt.want):
			t.Errorf("%s: got %v, want %v", tt.name, err, tt.want)
		}
		if tt.want == nil {
			checkWithinLimits(t, msg, lim)
		}
	}
}

// TestScreenStopsAtTheMessage: the screen reads the first message only,
// whatever follows, and holds no more than the limit of a stream that
// keeps sending.
func TestScreenStopsAtTheMessage(t *testing.T) {
	lim := limitsFor(8)
	msg := pushPull(t, 2, 2, nil)
	got, err := screenStream(bytes.NewReader(append(msg, "trailing"...)), lim)
	if err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("got %d bytes, %v; want the %d of the message", len(got), err, len(msg))
	}
	endless := io.MultiReader(bytes.NewReader([]byte{mlPushPull, 0x81, 0xa5}), bytes.NewReader([]byte("Nodes")),
		bytes.NewReader([]byte{0xc2}), neverEnding('x'))
	if _, err := screenStream(endless, lim); !errors.Is(err, errScreenBad) {
		t.Fatalf("endless stream: %v", err)
	}
}

type neverEnding byte

func (b neverEnding) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(b)
	}
	return len(p), nil
}

func TestScreenPacket(t *testing.T) {
	compound := func(parts ...[]byte) []byte {
		b := []byte{mlCompound, byte(len(parts))}
		for _, p := range parts {
			b = binary.BigEndian.AppendUint16(b, uint16(len(p)))
		}
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	ping := append([]byte{mlPing}, mp(t, &pingBody{SeqNo: 1, Node: "n1"})...)
	crc := func(b []byte) []byte { return append([]byte{mlCRC, 0, 0, 0, 0}, b...) }
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"ping", ping, nil},
		{"compound", compound(ping, ping), nil},
		{"compressed compound with crc", crc(compressMsg(t, compound(ping, ping))), nil},
		{"encrypted (version byte 1)", append([]byte{1}, make([]byte, 100)...), nil},
		{"truncated compound (memberlist reports it)", compound(ping)[:5], nil},
		{"oversized", make([]byte, maxPacketBytes+1), errScreenTooLarge},
		{"compression bomb", compressMsg(t, make([]byte, 10<<20)), errScreenTooLarge},
		{"compressed twice", compressMsg(t, compressMsg(t, ping)), errScreenType},
		{"compressed part in a compound", compound(ping, compressMsg(t, ping)), errScreenType},
		{"compound in a compound", compound(compound(ping)), errScreenType},
		{"bad compression", []byte{mlCompress, 0x82, 0xa4, 'A', 'l', 'g', 'o', 1, 0xa3, 'B', 'u', 'f', 0xa1, 'x'}, errScreenBad},
	}
	for _, tt := range tests {
		if err := screenPacket(tt.in); !errors.Is(err, tt.want) {
			t.Errorf("%s: got %v, want %v", tt.name, err, tt.want)
		}
	}
}

// checkWithinLimits decodes an accepted stream message as memberlist would
// and fails if memberlist would see more members or bytes than lim allows.
func checkWithinLimits(t testing.TB, msg []byte, lim screenLimits) {
	t.Helper()
	if len(msg) > lim.streamBytes {
		t.Fatalf("accepted %d bytes, limit %d", len(msg), lim.streamBytes)
	}
	switch msg[0] {
	case mlCompress:
		var c compressed
		if codec.NewDecoder(bytes.NewReader(msg[1:]), &codec.MsgpackHandle{}).Decode(&c) != nil {
			return
		}
		plain, err := inflate(c.Buf, lim.streamBytes)
		if err != nil {
			t.Fatalf("accepted a compressed message memberlist inflates differently: %v", err)
		}
		checkWithinLimits(t, plain, lim)
	case mlPushPull:
		var h ppHeader
		err := codec.NewDecoder(bytes.NewReader(msg[1:]), &codec.MsgpackHandle{}).Decode(&h)
		if err == nil && (h.Nodes < 0 || h.Nodes > lim.members || h.UserStateLen > lim.streamBytes) {
			t.Fatalf("accepted a push-pull header memberlist reads as %+v", h)
		}
	case mlUser:
		var h userHeader
		err := codec.NewDecoder(bytes.NewReader(msg[1:]), &codec.MsgpackHandle{}).Decode(&h)
		if err == nil && h.UserMsgLen > lim.streamBytes {
			t.Fatalf("accepted a user message header memberlist reads as %+v", h)
		}
	}
}

// FuzzScreenGossip feeds arbitrary bytes to the stream and packet screens:
// they must not panic, must return a prefix of the input within the byte
// limit, and what they accept must decode, with memberlist's own decoder,
// within the limits.
func FuzzScreenGossip(f *testing.F) {
	lim := limitsFor(4)
	for _, seed := range [][]byte{
		pushPull(f, 4, 4, []byte("state")), lyingHeader(f), compressMsg(f, pushPull(f, 2, 2, nil)),
		append([]byte{mlPing}, mp(f, &pingBody{SeqNo: 7})...), encrypted(64),
		append([]byte{mlUser}, mp(f, &userHeader{UserMsgLen: 2})...), {mlCRC, 0, 0, 0, 0, mlCompound, 0},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		msg, err := screenStream(bytes.NewReader(data), lim)
		if err == nil {
			if !bytes.HasPrefix(data, msg) || len(msg) == 0 {
				t.Fatalf("returned %x, not a prefix of the input", msg)
			}
			checkWithinLimits(t, msg, lim)
		}
		if screenPacket(data) == nil && len(data) > maxPacketBytes {
			t.Fatalf("accepted a packet of %d bytes", len(data))
		}
	})
}

// TestInflateAgrees: both ways of inflating accept and refuse the same
// payloads, as memberlist does: empty, truncated, at the limit, over it.
func TestInflateAgrees(t *testing.T) {
	const limit = 100
	full := lzwBytes(bytes.Repeat([]byte("ab"), 50))
	for name, tt := range map[string]struct {
		buf []byte
		ok  bool
	}{
		"at the limit": {full, true},
		"over it":      {lzwBytes(make([]byte, limit+1)), false},
		"truncated":    {full[:len(full)/2], false},
		"empty":        {lzwBytes(nil), false},
		"garbage":      {[]byte{0xff, 0xff, 0xff, 0xff}, false},
	} {
		a, errA := inflate(tt.buf, limit)
		b, errB := inflateInto(tt.buf, make([]byte, limit+1))
		if (errA == nil) != tt.ok || (errB == nil) != tt.ok || !bytes.Equal(a, b) {
			t.Errorf("%s: inflate %d bytes, %v; inflateInto %d bytes, %v; want ok=%v", name, len(a), errA, len(b), errB, tt.ok)
		}
	}
}
