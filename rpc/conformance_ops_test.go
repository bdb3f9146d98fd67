package rpc

import (
	"strings"
	"testing"
	"time"
)

// Conformance of section 6, op by op: request and reply shapes, and each
// op's errors with the connection behaviour section 8 gives them.

var (
	statusShape = map[string]string{"node": "str", "id": "uint", "is_leader": "bool", "leader": "map|nil",
		"epoch": "uint", "lease_remaining_ms": "int", "lease_ttl_ms": "int", "members": "int", "state": "str",
		"consistency": "str", "reason": "?str", "quorum": "map|nil", "roster": "map|nil", "drained": "bool"}
	memberShape = map[string]string{"name": "str", "id": "uint", "addr": "str", "peer_addr": "str", "status": "str",
		"voter": "bool", "role": "?str", "zone": "?str", "eligible": "bool", "is_leader": "bool", "drained": "bool"}
	checkShape   = map[string]string{"current": "bool", "is_leader": "bool", "epoch": "uint", "lease_remaining_ms": "int"}
	keyringShape = map[string]string{"keys": "map|nil", "primary_keys": "map|nil", "num_nodes": "int",
		"num_resp": "int", "num_err": "int", "messages": "map|nil"}
	eventShape = map[string]string{"time": "str", "event": "str", "leader": "map|nil", "epoch": "uint",
		"node": "str", "member": "?map"}
)

// opConn is a greeted raw connection to a fresh server over fb.
func opConn(t *testing.T, fb *fakeBackend) *raw {
	r := dialRaw(t, startServer(t, fb, nil).Path())
	r.helloOK()
	return r
}

func TestConformanceStatusLeaderMembers(t *testing.T) {
	fb := newFakeBackend()
	fb.set(func(f *fakeBackend) {
		f.status.Quorum = &QuorumInfo{Have: 0, Need: 2}
		f.status.Roster = &RosterInfo{ClusterID: "c", Version: 3, Voters: []string{"n1", "n2", "n3"}}
		f.members[0].Zone, f.members[0].Role = "z1", RoleVoter
	})
	r := opConn(t, fb)
	r.sendFrame(mreq(1, OpStatus, mstr("ignored")))
	st := shape(t, "status", r.wantOK(1), statusShape)
	if _, ok := st["reason"]; ok {
		t.Error("status carries an empty reason; the doc says it is omitted")
	}
	shape(t, "status.leader", st["leader"], leaderShape)
	shape(t, "status.quorum", st["quorum"], map[string]string{"have": "int", "need": "int"})
	shape(t, "status.roster", st["roster"], map[string]string{"cluster_id": "str", "version": "uint", "voters": "array"})

	r.sendFrame(mreq(2, OpLeader, nil))
	if l := shape(t, "leader", r.wantOK(2), leaderShape); l["node"] != "n3" || l["epoch"] != uint64(7) {
		t.Fatalf("leader = %v", l)
	}
	fb.set(func(f *fakeBackend) { f.leader = nil })
	r.sendFrame(mreq(3, OpLeader, nil))
	if msg := r.wantError(3, CodeNoLeader); msg == "" {
		t.Fatal("no_leader without a reason")
	}
	r.stillOpen()

	r.sendFrame(mreq(4, OpMembers, nil))
	ms, ok := r.wantOK(4).([]any)
	if !ok || len(ms) != 2 {
		t.Fatalf("members = %v, want an array of 2", ms)
	}
	for _, m := range ms {
		shape(t, "member", m, memberShape)
	}
	fb.set(func(f *fakeBackend) { f.members = nil })
	r.sendFrame(mreq(5, OpMembers, nil))
	if ms, ok := r.wantOK(5).([]any); !ok || len(ms) != 0 {
		t.Fatalf("no members = %#v, want an empty array, not nil", ms)
	}
}

func TestConformanceResignCheckDrain(t *testing.T) {
	fb := newFakeBackend()
	r := opConn(t, fb)
	for seq, body := range map[byte][]byte{1: nil, 2: mnil, 3: mmap(), 4: mmap(mstr("hold_ms"), mu32(604800000))} {
		r.sendFrame(mreq(seq, OpResign, body))
		if b := r.wantOK(uint64(seq)); b != nil {
			t.Fatalf("resign body %v, want nil", b)
		}
	}
	r.sendFrame(mreq(5, OpResign, mmap(mstr("hold_ms"), mu32(604800001))))
	r.wantError(5, CodeInvalidArgument)
	r.stillOpen()
	fb.set(func(f *fakeBackend) { f.resignErr = ErrNotLeader })
	r.sendFrame(mreq(6, OpResign, nil))
	r.wantError(6, CodeNotLeader)
	r.stillOpen()

	fb.set(func(f *fakeBackend) {
		f.status.IsLeader, f.status.Leader = true, &LeaderInfo{Node: "n1", ID: 1, Epoch: 7}
	})
	r.sendFrame(mreq(7, OpCheck, mmap(mstr("epoch"), mfix(7))))
	if m := shape(t, "check", r.wantOK(7), checkShape); m["current"] != true || m["epoch"] != uint64(7) {
		t.Fatalf("check 7 = %v", m)
	}

	for seq, off := range map[byte]bool{8: false, 9: true} {
		r.sendFrame(mreq(seq, OpDrain, mmap(mstr("off"), mbool(off))))
		if b := r.wantOK(uint64(seq)); b != nil {
			t.Fatalf("drain body %v, want nil", b)
		}
	}
}

func TestConformanceForceLeaveTransferKeys(t *testing.T) {
	r := opConn(t, newFakeBackend())
	steps := []struct {
		op, name, code string
	}{
		{OpForceLeave, "gone", ""},
		{OpForceLeave, "", CodeInvalidArgument},
		{OpForceLeave, "n9", CodeNotFound},
		{OpTransfer, "n2", ""},
		{OpTransfer, "", CodeInvalidArgument},
		{OpTransfer, "n9", CodeNotFound},
	}
	for i, s := range steps {
		seq := byte(i + 1)
		r.sendFrame(mreq(seq, s.op, mmap(mstr("name"), mstr(s.name))))
		if s.code == "" {
			if b := r.wantOK(uint64(seq)); b != nil {
				t.Fatalf("%s %q: body %v, want nil", s.op, s.name, b)
			}
			continue
		}
		r.wantError(uint64(seq), s.code)
		r.stillOpen()
	}
	r.sendFrame(mreq(20, OpKeys, mmap(mstr("action"), mstr(KeysList))))
	shape(t, "keyring", r.wantOK(20), keyringShape)
	for seq, body := range map[byte][]byte{
		21: mmap(mstr("action"), mstr("shred")),
		22: mmap(mstr("action"), mstr(KeysInstall)),
	} {
		r.sendFrame(mreq(seq, OpKeys, body))
		r.wantError(uint64(seq), CodeInvalidArgument)
		r.stillOpen()
	}
}

// TestConformanceWatch: section 6.8's plain watch: the stream's frames,
// and each way it ends.
func TestConformanceWatch(t *testing.T) {
	fb := newFakeBackend()
	r := opConn(t, fb)
	r.sendFrame(mreq(9, OpWatch, nil))
	first := wantEvent(t, r, 9)
	if first["event"] != EventLeaderChanged {
		t.Fatalf("first event = %v", first)
	}
	sub := recv(t, fb.subs, "the subscription")
	sub.push(t, Event{Time: "2025-01-02T03:04:05.000000007Z", Event: EventLostLeadership, Epoch: 7, Node: "n1"})
	sub.push(t, Event{Event: EventMemberJoin, Node: "n4", Member: &Member{Name: "n4"}})
	if ev := wantEvent(t, r, 9); ev["event"] != EventLostLeadership || ev["epoch"] != uint64(7) || ev["leader"] != nil {
		t.Fatalf("second event = %v", ev)
	}
	shape(t, "member", wantEvent(t, r, 9)["member"], memberShape)
	r.sendFrame(mreq(10, OpStatus, nil)) // a watching connection accepts no request
	r.wantError(9, CodeBadRequest)
	r.expectClosed()

	for name, input := range map[string][]byte{
		"oversized frame during a watch": {0x7f, 0, 0, 0},
		"truncated frame during a watch": {0, 0, 0, 5, 0x81},
	} {
		t.Run(name, func(t *testing.T) {
			r := opConn(t, newFakeBackend())
			r.sendFrame(mreq(3, OpWatch, nil))
			wantEvent(t, r, 3)
			r.sendBytes(input)
			_ = r.nc.CloseWrite()
			code := map[bool]string{true: CodeFrameTooLarge, false: CodeBadRequest}[input[0] == 0x7f]
			r.wantError(3, code)
			r.expectClosed()
		})
	}
	t.Run("event over max_frame", func(t *testing.T) {
		fb := newFakeBackend()
		r := dialRaw(t, startServer(t, fb, func(c *ServerConfig) { c.MaxFrame = 1024 }).Path())
		r.helloOK()
		r.sendFrame(mreq(4, OpWatch, nil))
		wantEvent(t, r, 4)
		recv(t, fb.subs, "the subscription").push(t, Event{Event: EventMemberUpdate, Node: strings.Repeat("n", 2000)})
		r.wantError(4, CodeFrameTooLarge)
		r.expectClosed()
	})
	t.Run("agent stops", func(t *testing.T) {
		fb := newFakeBackend()
		srv := startServer(t, fb, nil)
		r := dialRaw(t, srv.Path())
		r.helloOK()
		r.sendFrame(mreq(5, OpWatch, nil))
		wantEvent(t, r, 5)
		go srv.Close()
		r.wantError(5, CodeShuttingDown)
		r.expectClosed()
	})
}

// TestConformanceRunner: section 6.8's runner: registration, stopped and
// running frames (never answered), a bad one ends the watch, and a
// refused registration leaves the connection open.
func TestConformanceRunner(t *testing.T) {
	fb := newFakeBackend()
	fb.maxGrace = 10 * time.Second
	r := opConn(t, fb)
	r.sendFrame(mreq(1, OpWatch, mmap(mstr("runner"), mmap(mstr("grace_ms"), mu64(20000)))))
	r.wantError(1, CodeInvalidArgument) // over the backend's limit
	r.sendFrame(mreq(2, OpWatch, mmap(mstr("runner"), mmap(mstr("grace_ms"), mfix(0)))))
	r.wantError(2, CodeInvalidArgument)
	r.sendFrame(mreq(3, OpWatch, mmap(mstr("runner"), mmap(mstr("grace_ms"), mu16(5000)))))
	wantEvent(t, r, 3)
	runner := recv(t, fb.runners, "the runner")
	if runner.grace != 5*time.Second {
		t.Fatalf("grace %v, want 5s", runner.grace)
	}
	r.sendFrame(mreq(4, OpStopped, mmap(mstr("epoch"), mfix(7))))
	r.sendFrame(mreq(5, OpRunning, mmap(mstr("epoch"), mfix(7), mstr("pgid"), mi32(4242))))
	if got := recv(t, runner.stopped, "stopped"); got != 7 {
		t.Fatalf("stopped %d, want 7", got)
	}
	if got := recv(t, runner.running, "running"); got != [2]uint64{7, 4242} {
		t.Fatalf("running %v", got)
	}
	r.sendFrame(mreq(6, OpStopped, mmap(mstr("epoch"), mfix(0))))
	r.wantError(3, CodeBadRequest) // the first frame sent back since the stream's
	r.expectClosed()

	for name, frame := range map[string][]byte{
		"stopped epoch -1": mreq(4, OpStopped, mmap(mstr("epoch"), mnegfix(-1))),
		"running pgid 1":   mreq(4, OpRunning, mmap(mstr("epoch"), mfix(7), mstr("pgid"), mfix(1))),
		"running no pgid":  mreq(4, OpRunning, mmap(mstr("epoch"), mfix(7))),
		"a request":        mreq(4, OpStatus, nil),
		"nil":              mnil,
	} {
		t.Run(name, func(t *testing.T) {
			r := opConn(t, newFakeBackend())
			r.sendFrame(mreq(3, OpWatch, mmap(mstr("runner"), mmap(mstr("grace_ms"), mfix(100)))))
			wantEvent(t, r, 3)
			r.sendFrame(frame)
			r.wantError(3, CodeBadRequest)
			r.expectClosed()
		})
	}
}

// wantEvent reads a stream frame of the watch seq and returns its event.
func wantEvent(t *testing.T, r *raw, seq uint64) map[string]any {
	t.Helper()
	m := shape(t, "stream frame", r.readMap(), responseShape)
	if m["seq"] != seq || m["stream"] != true || m["error"] != nil {
		t.Fatalf("stream frame = %v, want seq %d, stream true, no error", m, seq)
	}
	ev := shape(t, "event", m["body"], eventShape)
	if _, err := time.Parse(time.RFC3339Nano, ev["time"].(string)); err != nil && ev["time"] != "" {
		t.Errorf("event time %q: %v", ev["time"], err)
	}
	return ev
}
