package gossip

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"
)

// TestJunkPacketsLogAHandful is the attack of 20,000 junk UDP packets (which
// gave 1,502 ERROR lines when the kind was the text before the first colon,
// holding the message type and the sender's address): from 100 source
// ports, with every first byte, they log a handful of lines.
func TestJunkPacketsLogAHandful(t *testing.T) {
	cfg := testConfig(t, 0)
	logger, counts := testLogger(t, "level=ERROR", "level=WARN")
	cfg.Logger = logger
	nd := startNode(t, cfg)
	addr := nd.LocalMember().Addr
	rng := rand.New(rand.NewPCG(3, 4))
	buf := make([]byte, 256)
	for batch := range 100 {
		c, err := net.Dial("udp", addr) // a new source port per batch
		if err != nil {
			t.Fatal(err)
		}
		for i := range 200 {
			for j := range buf {
				buf[j] = byte(rng.Uint32())
			}
			buf[0] = byte(batch*200 + i)
			c.Write(buf[:1+rng.IntN(len(buf))])
		}
		c.Close()
		udpBarrier(t, addr, cfg.Name)
	}
	lines := counts["level=ERROR"].Load() + counts["level=WARN"].Load()
	t.Logf("20,000 junk packets: %d ERROR and %d WARN lines", counts["level=ERROR"].Load(), counts["level=WARN"].Load())
	if lines > 8 {
		t.Fatalf("20,000 junk packets logged %d warning and error lines, want a handful", lines)
	}
}

// memberlistFormats are memberlist's and serf's warnings and errors that
// carry what a sender chose (%s), with the messages of the formats'
// kind.
var memberlistFormats = []struct{ format, kind string }{
	{"Received invalid msgType (%d) from=%s", "Received invalid msgType"},
	{"msg type (%d) not supported from=%s", "msg type"},
	{"Failed to decode ping: %s from=%s", "Failed to decode"},
	{"Failed to decode alive message: %s from=%s", "Failed to decode"},
	{"Got ping for unexpected node '%s' from=%s", "Got ping for unexpected node"},
	{"Got ping for unexpected node %s from=%s", "Got ping for unexpected node"},
	{"discarding packet with unacceptable label %q: from=%s", "discarding packet with unacceptable label"},
	{"discarding stream with unacceptable label %q: from=%s", "discarding stream with unacceptable label"},
	{"Rejected node %s (%s): %s", "Rejected node"},
	{"Push/Pull with %s failed: %s", "Push/Pull with"},
	{"Decrypt packet failed: %s from=%s", "Decrypt packet failed"},
	{"failed to receive: %s from=%s", "failed to receive"},
	{"Failed to decompress payload: %s from=%s", "Failed to decompress"},
	{"Compound request had %d truncated messages from=%s", "Compound request had"},
	{"Ignoring an alive message for '%s' (%s:%d) because protocol version(s) are wrong", "Ignoring an alive"},
}

// foreignFill returns what an attacker might put in a %s or %d: random
// words, bytes, numbers, addresses, newlines and long strings.
func foreignFill(rng *rand.Rand) string {
	switch rng.IntN(6) {
	case 0:
		return strings.Repeat(string(rune('a'+rng.IntN(26))), 1+rng.IntN(100))
	case 1:
		b := make([]byte, rng.IntN(40))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return string(b)
	case 2:
		return fmt.Sprintf("%d.%d.%d.%d:%d", rng.IntN(256), rng.IntN(256), rng.IntN(256), rng.IntN(256), rng.IntN(65536))
	case 3:
		return "x\n[ERROR] serf: forged " + fmt.Sprint(rng.Uint32())
	case 4:
		return strings.Repeat("A", 60000)
	}
	return fmt.Sprint(rng.Int64())
}

// TestLogKindsIgnoreForeignBytes: 20,000 messages in memberlist's formats,
// with random bytes wherever memberlist puts something a sender chose, make
// one kind per format (formats sharing their first three words share it),
// hence one line per kind per interval; what is
// logged is one line, cut, with the foreign name quoted.
func TestLogKindsIgnoreForeignBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	w := &logWriter{logger: slog.New(slog.DiscardHandler), repeats: map[string]*repeat{}}
	now := time.Unix(0, 0)
	logged := 0
	for i := range 20000 {
		f := memberlistFormats[i%len(memberlistFormats)]
		var args []any
		for range strings.Count(f.format, "%") {
			args = append(args, foreignFill(rng))
		}
		msg := strings.ReplaceAll(fmt.Sprintf(strings.NewReplacer("%d", "%s", "%q", "%q").Replace(f.format), args...), "\n", " ")
		kind, clean := classify(msg)
		if kind != f.kind {
			t.Fatalf("%q: kind %q, want %q", msg[:min(len(msg), 80)], kind, f.kind)
		}
		if len(clean) > maxLogMessage+64 || strings.ContainsAny(clean, "\n\r") {
			t.Fatalf("logged text of %d bytes: %q", len(clean), clean[:min(len(clean), 200)])
		}
		if _, ok := w.admit(slog.LevelError, "memberlist", kind, now); ok {
			logged++
		}
	}
	kinds := map[string]bool{}
	for _, f := range memberlistFormats {
		kinds[f.kind] = true
	}
	if logged != len(kinds) {
		t.Fatalf("%d lines for 20,000 messages of %d kinds", logged, len(kinds))
	}
}

// TestLogKindsAreBounded: messages that begin with ever new words (say
// errors quoting whatever a sender wrote) take at most maxLogKinds kinds and
// then share one, so lines per interval stay bounded.
func TestLogKindsAreBounded(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	w := &logWriter{logger: slog.New(slog.DiscardHandler), repeats: map[string]*repeat{}}
	now := time.Unix(0, 0)
	logged := 0
	for range 20000 {
		kind, _ := classify(foreignFill(rng) + " is not a thing")
		if _, ok := w.admit(slog.LevelWarn, "serf", kind, now); ok {
			logged++
		}
	}
	if logged > maxLogKinds+1 {
		t.Fatalf("%d lines in one interval, want at most %d", logged, maxLogKinds+1)
	}
	later := now.Add(repeatInterval)
	if _, ok := w.admit(slog.LevelWarn, "serf", "A new kind", later); !ok {
		t.Fatal("a new kind after an interval was not logged")
	}
}

func TestQuoteForeign(t *testing.T) {
	tests := map[string]string{
		"Got ping for unexpected node evil from=10.0.0.1:7946": `Got ping for unexpected node "evil" from=10.0.0.1:7946`,
		"Rejected node a\tb (10.0.0.1): conflict":              `Rejected node "a\tb (10.0.0.1): conflict"`,
		"Push/Pull with " + strings.Repeat("x", 100) + " failed: EOF": `Push/Pull with "` + strings.Repeat("x", 64) +
			`"…(48 bytes cut)`,
		"Decrypt packet failed: bad\x00 from=1.2.3.4:5": `Decrypt packet failed: bad\x00 from=1.2.3.4:5`,
	}
	for in, want := range tests {
		if _, got := classify(in); got != want {
			t.Errorf("classify(%q) logs %q, want %q", in, got, want)
		}
	}
}
