package gossip

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/serf/serf"
)

func TestConfigValidate(t *testing.T) {
	valid := func() Config { c := DefaultConfig(); c.Name = "n1"; return c }
	tests := []struct {
		name string
		mod  func(*Config)
		want string // substring of the error; "" for valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"zero optional fields", func(c *Config) { *c = Config{Name: "n1"} }, ""},
		{"no name", func(c *Config) { c.Name = "" }, "name is required"},
		{"bind without port", func(c *Config) { c.BindAddr = "127.0.0.1" }, "bind address"},
		{"bind hostname", func(c *Config) { c.BindAddr = "localhost:7946" }, "must be an IP"},
		{"advertise ip", func(c *Config) { c.AdvertiseAddr = "10.0.0.1" }, ""},
		{"advertise ipv6", func(c *Config) { c.AdvertiseAddr = "::1" }, ""},
		{"advertise ip:port", func(c *Config) { c.AdvertiseAddr = "10.0.0.1:8000" }, ""},
		{"advertise hostname", func(c *Config) { c.AdvertiseAddr = "example.com" }, "advertise address"},
		{"bad peer addr", func(c *Config) { c.PeerAddr = "nope" }, "peer address"},
		{"reserved tag", func(c *Config) { c.Tags = map[string]string{"peer": "x"} }, "reserved"},
		{"retry max below interval", func(c *Config) { c.JoinRetryMax = time.Millisecond }, "join retry"},
		{"short key", func(c *Config) { c.EncryptKey = make([]byte, 10) }, "16, 24 or 32"},
		{"bad timing", func(c *Config) { c.Timing.ProbeTimeout = 2 * c.Timing.ProbeInterval }, "probe timeout"},
	}
	for _, tt := range tests {
		c := valid()
		tt.mod(&c)
		err := c.Validate()
		if (err == nil) != (tt.want == "") || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s: Validate() = %v, want %q", tt.name, err, tt.want)
		}
	}
}

func TestConfigIsCopied(t *testing.T) {
	cfg := testConfig(t, 0)
	tags := cfg.Tags
	m := startNode(t, cfg)
	tags["zone"] = "changed"
	if got := m.LocalMember().Tags["zone"]; got != "z0" {
		t.Fatalf("caller's map change leaked into the membership: %q", got)
	}
}

// timingOf reads back the fields Timing sets.
func timingOf(sc *serf.Config) Timing {
	mc := sc.MemberlistConfig
	return Timing{
		ProbeInterval: mc.ProbeInterval, ProbeTimeout: mc.ProbeTimeout, IndirectChecks: mc.IndirectChecks,
		SuspicionMult: mc.SuspicionMult, SuspicionMaxTimeoutMult: mc.SuspicionMaxTimeoutMult,
		GossipInterval: mc.GossipInterval, GossipNodes: mc.GossipNodes, GossipToTheDeadTime: mc.GossipToTheDeadTime,
		DeadNodeReclaimTime: mc.DeadNodeReclaimTime,
		RetransmitMult:      mc.RetransmitMult, PushPullInterval: mc.PushPullInterval, TCPTimeout: mc.TCPTimeout,
		ReconnectInterval: sc.ReconnectInterval, ReconnectTimeout: sc.ReconnectTimeout, ReapInterval: sc.ReapInterval,
		TombstoneTimeout: sc.TombstoneTimeout, BroadcastTimeout: sc.BroadcastTimeout,
		LeavePropagateDelay: sc.LeavePropagateDelay,
	}
}

// TestLANTimingIsUpstreamDefault: the LAN profile is serf's and
// memberlist's defaults but for the reconnect interval and the dead node
// reclaim time (see LANTiming), and
// apply copies every field.
func TestLANTimingIsUpstreamDefault(t *testing.T) {
	want := timingOf(serf.DefaultConfig())
	want.ReconnectInterval = 5 * time.Second
	want.DeadNodeReclaimTime = time.Millisecond
	if got := LANTiming(); got != want {
		t.Fatalf("LANTiming() = %+v\nupstream   %+v", got, want)
	}
	sc := serf.DefaultConfig()
	LocalTiming().apply(sc, sc.MemberlistConfig)
	if got := timingOf(sc); got != LocalTiming() {
		t.Fatalf("apply lost fields: %+v", got)
	}
}

func TestTimingValidate(t *testing.T) {
	for _, tm := range []Timing{LANTiming(), LocalTiming()} {
		if err := tm.Validate(); err != nil {
			t.Errorf("%+v: %v", tm, err)
		}
	}
	bad := LocalTiming()
	bad.ReconnectTimeout = bad.ReconnectInterval / 2
	bad.GossipNodes = 0
	err := bad.Validate()
	if err == nil || !strings.Contains(err.Error(), "reconnect timeout") || !strings.Contains(err.Error(), "gossip nodes") {
		t.Fatalf("Validate() = %v, want both problems", err)
	}
	if (Timing{}).Validate() == nil {
		t.Fatal("zero Timing is valid")
	}
}

// TestSuspicionTimeoutAndDetectionBound checks the suspicion timeouts and
// detection bound by cluster size, and that the detection floor is the
// probe timeout plus the shortest suspicion of any size.
func TestSuspicionTimeoutAndDetectionBound(t *testing.T) {
	tests := []struct {
		timing        Timing
		n             int
		lo, hi, bound time.Duration
	}{
		// LAN, 3 nodes: too small to wait for confirmations (k = 2 > n-2).
		{LANTiming(), 3, 4 * time.Second, 4 * time.Second, 4*time.Second + 4*time.Second + 400*time.Millisecond},
		// LAN, 5 nodes: waits for 2 confirmations, at most 6× longer.
		{LANTiming(), 5, 4 * time.Second, 24 * time.Second, 8*time.Second + 24*time.Second + 400*time.Millisecond},
		// LAN, 100 nodes: log10(100) = 2 doubles the suspicion.
		{LANTiming(), 100, 8 * time.Second, 48 * time.Second, 198*time.Second + 48*time.Second + 400*time.Millisecond},
		// Local, 3 nodes: 1 confirmation, at most 2× longer.
		{LocalTiming(), 3, 600 * time.Millisecond, 1200 * time.Millisecond, 800*time.Millisecond + 1200*time.Millisecond + 100*time.Millisecond},
		// Local, 1 node counts as 2.
		{LocalTiming(), 1, 600 * time.Millisecond, 600 * time.Millisecond, 400*time.Millisecond + 600*time.Millisecond + 100*time.Millisecond},
	}
	for _, tt := range tests {
		lo, hi := tt.timing.SuspicionTimeout(tt.n)
		bound := tt.timing.FailureDetectionBound(tt.n)
		if lo != tt.lo || hi != tt.hi || bound != tt.bound {
			t.Errorf("probe %v n=%d: suspicion %v..%v bound %v, want %v..%v bound %v",
				tt.timing.ProbeInterval, tt.n, lo, hi, bound, tt.lo, tt.hi, tt.bound)
		}
		if floor := tt.timing.FailureDetectionFloor(); floor > tt.timing.ProbeTimeout+lo {
			t.Errorf("probe %v n=%d: detection floor %v above probe timeout plus shortest suspicion %v",
				tt.timing.ProbeInterval, tt.n, floor, tt.timing.ProbeTimeout+lo)
		}
	}
	if got := LANTiming().FailureDetectionFloor(); got != 4500*time.Millisecond {
		t.Errorf("LAN detection floor %v, want 4.5s", got)
	}
	if got := LocalTiming().FailureDetectionFloor(); got != 700*time.Millisecond {
		t.Errorf("local detection floor %v, want 700ms", got)
	}
}

func TestNextBackoff(t *testing.T) {
	tests := []struct{ d, max, want time.Duration }{
		{time.Second, 30 * time.Second, 2 * time.Second},
		{10 * time.Second, 30 * time.Second, 20 * time.Second},
		{16 * time.Second, 30 * time.Second, 30 * time.Second},
		{30 * time.Second, 30 * time.Second, 30 * time.Second},
		{time.Second, time.Second, time.Second},
	}
	for _, tt := range tests {
		if got := nextBackoff(tt.d, tt.max); got != tt.want {
			t.Errorf("nextBackoff(%v, %v) = %v, want %v", tt.d, tt.max, got, tt.want)
		}
	}
}

func TestParseLogLine(t *testing.T) {
	tests := []struct {
		line      string
		level     slog.Level
		component string
		msg       string
	}{
		{"[DEBUG] memberlist: Stream connection from=1.2.3.4", slog.LevelDebug, "memberlist", "Stream connection from=1.2.3.4"},
		// The agent logs each membership event itself: serf's line for it
		// goes to debug.
		{"[INFO] serf: EventMemberJoin: n1 127.0.0.1", slog.LevelDebug, "serf", "EventMemberJoin: n1 127.0.0.1"},
		{"[INFO] serf: EventMemberUpdate: n1", slog.LevelDebug, "serf", "EventMemberUpdate: n1"},
		// Serf tries a failed member every reconnect interval until it is
		// reaped: debug too.
		{"[INFO] serf: attempting reconnect to n2 10.0.0.2:7946", slog.LevelDebug, "serf", "attempting reconnect to n2 10.0.0.2:7946"},
		{"[INFO] serf: Received leave intent for n2", slog.LevelInfo, "serf", "Received leave intent for n2"},
		{"[INFO] memberlist: EventMemberJoin lookalike", slog.LevelInfo, "memberlist", "EventMemberJoin lookalike"},
		{"[WARN] serf: Shutdown without a Leave", slog.LevelWarn, "serf", "Shutdown without a Leave"},
		{"[ERR] memberlist: Failed to send ping", slog.LevelError, "memberlist", "Failed to send ping"},
		{"[ERROR] snapshot: oops", slog.LevelError, "serf", "snapshot: oops"},
		{"no level at all", slog.LevelInfo, "serf", "no level at all"},
		{"[TRACE] memberlist: x", slog.LevelDebug, "memberlist", "x"},
	}
	for _, tt := range tests {
		level, component, msg := parseLogLine(tt.line)
		if level != tt.level || component != tt.component || msg != tt.msg {
			t.Errorf("parseLogLine(%q) = %v %q %q", tt.line, level, component, msg)
		}
	}
}

// TestLogWriterOneRecordPerWrite: log.Logger writes each message with one
// Write, so a newline inside a name from the network stays inside its
// record, escaped, and cannot forge a line of its own.
func TestLogWriterOneRecordPerWrite(t *testing.T) {
	logger, counts := testLogger(t, "level=ERROR", "level=WARN")
	std := newStdLogger(logger, nil)
	std.Printf("[WARN] memberlist: Got ping for unexpected node %s from=10.0.0.9:7946", "evil\n[ERROR] serf: forged")
	if counts["level=WARN"].Load() != 1 || counts["level=ERROR"].Load() != 0 {
		t.Fatalf("%d WARN and %d ERROR records, want the one WARN", counts["level=WARN"].Load(), counts["level=ERROR"].Load())
	}
}

func TestTagsRoundTrip(t *testing.T) {
	id := localIdentity{id: 42, peerAddr: "10.0.0.1:7947", voter: true}
	tags := encodeTags(id, map[string]string{"zone": "a"})
	d := decodeTags(tags)
	if d.idErr != nil || d.id != 42 || d.peerAddr != id.peerAddr || !d.voter || d.eligible ||
		len(d.extra) != 1 || d.extra["zone"] != "a" {
		t.Fatalf("decodeTags(%v) = %+v", tags, d)
	}
	for _, bad := range []map[string]string{{}, {"id": "x"}, {"id": "-1"}} {
		if d := decodeTags(bad); d.idErr == nil || d.id != 0 {
			t.Errorf("decodeTags(%v) = %+v, want an id error", bad, d)
		}
	}
}

func TestBadIDWarnedOnce(t *testing.T) {
	cfg := testConfig(t, 0)
	logger, counts := testLogger(t, "no usable node ID")
	cfg.Logger = logger
	m := startNode(t, cfg)
	for range 3 {
		if got := m.convert(serf.Member{Name: "ghost", Tags: map[string]string{"id": "zz"}}); got.ID != 0 {
			t.Fatalf("ID = %d", got.ID)
		}
	}
	if n := counts["no usable node ID"].Load(); n != 1 {
		t.Fatalf("warned %d times, want once", n)
	}
}

func TestStrings(t *testing.T) {
	for s, want := range map[Status]string{StatusAlive: "alive", StatusLeaving: "leaving",
		StatusLeft: "left", StatusFailed: "failed", 9: "status(9)"} {
		if s.String() != want {
			t.Errorf("%d: %q", int(s), s.String())
		}
	}
	for e, want := range map[EventType]string{EventJoin: "member-join", EventLeave: "member-leave",
		EventFailed: "member-failed", EventUpdate: "member-update", EventReap: "member-reap", 9: "event(9)"} {
		if e.String() != want {
			t.Errorf("%d: %q", int(e), e.String())
		}
	}
}

// TestLibraryWarningsAreRateLimited: a flood of one kind of warning from
// serf or memberlist (such as a packet that fails to decrypt, for every
// packet of a node without the key) is logged once per interval, with a
// count of those left out.
func TestLibraryWarningsAreRateLimited(t *testing.T) {
	w := &logWriter{logger: slog.New(slog.DiscardHandler), repeats: map[string]*repeat{}}
	t0 := time.Unix(0, 0)
	logged := 0
	for i := 0; i < 100; i++ {
		kind, _ := classify(fmt.Sprintf("Decrypt packet failed: bad %d from=10.0.0.%d:7946", i, i))
		if _, ok := w.admit(slog.LevelError, "memberlist", kind, t0.Add(time.Duration(i)*time.Millisecond)); ok {
			logged++
		}
	}
	if logged != 1 {
		t.Fatalf("%d of 100 errors of one kind logged within the interval, want 1", logged)
	}
	kind, _ := classify("Decrypt packet failed: again")
	n, ok := w.admit(slog.LevelError, "memberlist", kind, t0.Add(repeatInterval+time.Second))
	if !ok || n != 99 {
		t.Fatalf("after the interval: logged=%v suppressed=%d, want true 99", ok, n)
	}
	if _, ok := w.admit(slog.LevelInfo, "serf", "EventMemberJoin", t0); !ok {
		t.Fatal("info lines are never rate-limited")
	}
}
