//go:build unix

package hooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/rpc"
)

// TestEnvAndStdin checks every event kind's variables and standard input.
func TestEnvAndStdin(t *testing.T) {
	t.Setenv("TENURE_MEMBER", "stale") // must not leak into leadership events
	h := start(t, Config{Hooks: []Hook{{Name: "dump", Events: []string{AllEvents},
		Command: `env > "$OUT/$TENURE_EVENT.env"; cat > "$OUT/$TENURE_EVENT.json"`}}})
	member := &MemberRef{Name: "n2", ID: 2, Addr: "10.0.0.2:7946"}
	events := []Event{
		event(rpc.EventBecameLeader, 7),
		event(rpc.EventLostLeadership, 7),
		{Event: rpc.EventLeaderChanged, Time: time.Date(2025, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600)),
			Node: "n1", NodeID: 1, Leader: &LeaderRef{Node: "n3", ID: 3, Epoch: 8}, Epoch: 8},
		{Event: rpc.EventMemberJoin, Node: "n1", NodeID: 1, Leader: &LeaderRef{Node: "n3", ID: 3, Epoch: 8}, Epoch: 8, Member: member},
		{Event: rpc.EventMemberLeave, Node: "n1", NodeID: 1, Member: member},
		{Event: rpc.EventMemberFailed, Node: "n1", NodeID: 1, Member: member},
	}
	for _, ev := range events {
		h.r.Dispatch(ev)
	}
	h.close()
	for _, ev := range events {
		checkEnv(t, ev, h.readFile(ev.Event+".env"))
		checkStdin(t, ev, h.readFile(ev.Event+".json"))
	}
}

func checkEnv(t *testing.T, ev Event, dump string) {
	t.Helper()
	env := map[string]string{}
	for line := range strings.Lines(dump) {
		if k, v, ok := strings.Cut(strings.TrimSuffix(line, "\n"), "="); ok && strings.HasPrefix(k, "TENURE_") {
			env[k] = v
		}
	}
	want := map[string]string{"TENURE_EVENT": ev.Event, "TENURE_NODE": "n1", "TENURE_NODE_ID": "1",
		"TENURE_LEADER": "", "TENURE_LEADER_ID": "", "TENURE_EPOCH": fmt.Sprint(ev.Epoch)}
	if ev.Leader != nil {
		want["TENURE_LEADER"], want["TENURE_LEADER_ID"] = ev.Leader.Node, fmt.Sprint(ev.Leader.ID)
	}
	if ev.Member != nil {
		want["TENURE_MEMBER"], want["TENURE_MEMBER_ID"], want["TENURE_MEMBER_ADDR"] = "n2", "2", "10.0.0.2:7946"
	}
	if !reflect.DeepEqual(env, want) {
		t.Errorf("%s: TENURE_ variables\n got %v\nwant %v", ev.Event, env, want)
	}
}

func checkStdin(t *testing.T, ev Event, in string) {
	t.Helper()
	var got Event
	if err := json.Unmarshal([]byte(in), &got); err != nil {
		t.Fatalf("%s: stdin %q: %v", ev.Event, in, err)
	}
	if !got.Time.Equal(ev.Time) || !strings.Contains(in, `"time":"`+ev.Time.UTC().Format(time.RFC3339Nano)+`"`) {
		t.Errorf("%s: stdin time in %s, want %v in UTC", ev.Event, in, ev.Time)
	}
	got.Time, ev.Time = time.Time{}, time.Time{}
	if !reflect.DeepEqual(got, ev) {
		t.Errorf("%s: stdin decodes to %+v, want %+v", ev.Event, got, ev)
	}
	if ev.Leader == nil && !strings.Contains(in, `"leader":null`) {
		t.Errorf("%s: stdin %s: want \"leader\":null", ev.Event, in)
	}
}

// sleeper is a hook command that, for became-leader, leaves a grandchild
// and then sleeps until stopped; for other events it records that it ran.
const sleeper = `if [ "$TENURE_EVENT" = became-leader ]; then
	sleep 1000 & echo $! > "$OUT/gc.pid"
	sleep 1000
else
	echo ran > "$OUT/next"
fi`

// TestTimeoutKillsProcessGroup: a run that outlasts the timeout is stopped
// with its whole process group, and the next event runs promptly after.
func TestTimeoutKillsProcessGroup(t *testing.T) {
	const timeout = 300 * time.Millisecond
	h := start(t, Config{Timeout: timeout, KillGrace: 5 * time.Second,
		Hooks: []Hook{{Name: "slow", Events: []string{AllEvents}, Command: sleeper}}})
	begin := time.Now()
	h.r.Dispatch(event(rpc.EventBecameLeader, 1))
	h.r.Dispatch(event(rpc.EventLostLeadership, 1))
	gc := h.waitPID("gc.pid")
	h.waitFile("next")
	if took := time.Since(begin); took < timeout || took > timeout+time.Second {
		t.Errorf("next run after %v, want about the timeout %v (SIGTERM suffices; no wait for the grace)", took, timeout)
	}
	waitGone(t, gc, time.Second)
	rec := h.logs.wait(t, "end of the timed-out run", finished("slow", rpc.EventBecameLeader, 1))
	if rec.attrs["stopped"] != "timeout" || rec.attrs["signal"] != "terminated" || rec.level != slog.LevelWarn {
		t.Errorf("end record = %v, want a Warn with stopped=timeout signal=terminated", rec)
	}
}

// TestTimeoutKillsGroupIgnoringTERM: a group that ignores SIGTERM is
// SIGKILLed after the grace.
func TestTimeoutKillsGroupIgnoringTERM(t *testing.T) {
	const timeout, grace = 200 * time.Millisecond, 300 * time.Millisecond
	h := start(t, Config{Timeout: timeout, KillGrace: grace,
		Hooks: []Hook{{Name: "stubborn", Events: []string{AllEvents}, Command: "trap '' TERM\n" + sleeper}}})
	begin := time.Now()
	h.r.Dispatch(event(rpc.EventBecameLeader, 1))
	h.r.Dispatch(event(rpc.EventLeaderChanged, 1))
	gc := h.waitPID("gc.pid")
	h.waitFile("next")
	if took := time.Since(begin); took < timeout+grace || took > timeout+grace+time.Second {
		t.Errorf("next run after %v, want about timeout+grace = %v", took, timeout+grace)
	}
	waitGone(t, gc, time.Second)
	rec := h.logs.wait(t, "end of the killed run", finished("stubborn", rpc.EventBecameLeader, 1))
	if rec.attrs["stopped"] != "timeout; killed after the grace" || rec.attrs["signal"] != "killed" {
		t.Errorf("end record = %v, want stopped after the grace by SIGKILL", rec)
	}
}

// TestFailingHookIsLogged checks the output and exit status records.
func TestFailingHookIsLogged(t *testing.T) {
	h := start(t, Config{Hooks: []Hook{{Name: "bad", Events: []string{rpc.EventMemberJoin},
		Command: "echo hello; echo oops >&2; exit 3"}}})
	h.r.Dispatch(Event{Event: rpc.EventMemberJoin, Node: "n1", Member: &MemberRef{Name: "n2"}})
	end := h.logs.wait(t, "end of run", finished("bad", rpc.EventMemberJoin, 0))
	if end.level != slog.LevelWarn || end.attrs["exit_code"] != "3" || end.attrs["duration"] == "" {
		t.Errorf("end record = %v, want Warn with exit_code=3 and a duration", end)
	}
	out := h.logs.find(func(r logRecord) bool { return r.msg == "hooks: output" })
	want := []string{"INFO stdout hello bad member-join", "WARN stderr oops bad member-join"}
	var got []string
	for _, r := range out {
		got = append(got, strings.Join([]string{r.level.String(), r.attrs["stream"], r.attrs["line"], r.attrs["hook"], r.attrs["event"]}, " "))
	}
	slices.Sort(got) // the two streams are read concurrently
	if !reflect.DeepEqual(got, want) {
		t.Errorf("output records = %q, want %q", got, want)
	}
}

// TestSlowHookDoesNotDelayOthers: hooks have queues of their own.
func TestSlowHookDoesNotDelayOthers(t *testing.T) {
	h := start(t, Config{Hooks: []Hook{
		{Name: "slow", Events: []string{rpc.EventMemberJoin},
			Command: `while [ ! -e "$OUT/release" ]; do sleep 0.01; done`},
		{Name: "fast", Events: []string{rpc.EventBecameLeader}, Command: `echo ran > "$OUT/fast"`},
	}})
	h.r.Dispatch(Event{Event: rpc.EventMemberJoin, Member: &MemberRef{Name: "n2"}})
	h.r.Dispatch(event(rpc.EventBecameLeader, 2))
	h.waitFile("fast")
	if got := h.logs.find(finished("slow", rpc.EventMemberJoin, 0)); len(got) != 0 {
		t.Fatalf("slow hook finished before release: %v", got)
	}
	if err := os.WriteFile(h.path("release"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.logs.wait(t, "slow hook's end", finished("slow", rpc.EventMemberJoin, 0))
}

// TestOrderWithinHook: one hook's runs happen one at a time, in order.
func TestOrderWithinHook(t *testing.T) {
	h := start(t, Config{Hooks: []Hook{{Events: []string{AllEvents},
		Command: `[ -e "$OUT/busy" ] && echo overlap >> "$OUT/log"; touch "$OUT/busy"
			echo "$TENURE_EVENT $TENURE_EPOCH" >> "$OUT/log"; rm "$OUT/busy"`}}})
	names := EventNames()
	var want strings.Builder
	for i := range 30 {
		ev := event(names[i%len(names)], uint64(i+1))
		h.r.Dispatch(ev)
		fmt.Fprintf(&want, "%s %d\n", ev.Event, ev.Epoch)
	}
	h.close()
	if got := h.readFile("log"); got != want.String() {
		t.Errorf("runs:\n%s\nwant:\n%s", got, want.String())
	}
}

// TestEventLists checks which hooks an event runs.
func TestEventLists(t *testing.T) {
	var hooks []Hook
	for _, spec := range []string{
		`member-join,member-leave=echo "$TENURE_EVENT" >> "$OUT/members"`,
		`*=echo "$TENURE_EVENT" >> "$OUT/all"`,
		`became-leader=echo "$TENURE_EVENT" >> "$OUT/leader"`,
	} {
		hk, err := ParseHook(spec)
		if err != nil {
			t.Fatal(err)
		}
		hooks = append(hooks, hk)
	}
	h := start(t, Config{Hooks: hooks})
	for _, name := range []string{"member-join", "became-leader", "no-leader", "member-leave", "member-update", "member-failed"} {
		h.r.Dispatch(Event{Event: name})
	}
	h.close()
	for file, want := range map[string]string{
		"members": "member-join\nmember-leave\n",
		"all":     "member-join\nbecame-leader\nmember-leave\nmember-failed\n",
		"leader":  "became-leader\n",
	} {
		if got := h.readFile(file); got != want {
			t.Errorf("%s: ran for %q, want %q", file, got, want)
		}
	}
}

// TestQueueLimitDropsOldest: a full queue drops its oldest waiting event.
func TestQueueLimitDropsOldest(t *testing.T) {
	h := start(t, Config{QueueLimit: 2, Hooks: []Hook{{Name: "q", Events: []string{AllEvents},
		Command: `if [ "$TENURE_EPOCH" = 1 ]; then
			echo x > "$OUT/started"; while [ ! -e "$OUT/release" ]; do sleep 0.01; done
		fi
		echo "$TENURE_EPOCH" >> "$OUT/log"`}}})
	h.r.Dispatch(event(rpc.EventLeaderChanged, 1))
	h.waitFile("started")
	for epoch := range uint64(4) {
		h.r.Dispatch(event(rpc.EventLeaderChanged, epoch+2))
	}
	if err := os.WriteFile(h.path("release"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.close()
	if got := h.readFile("log"); got != "1\n4\n5\n" {
		t.Errorf("ran epochs %q, want 1, 4, 5", got)
	}
	drops := h.logs.find(func(r logRecord) bool { return strings.Contains(r.msg, "dropped the oldest") })
	if len(drops) != 2 || drops[0].attrs["epoch"] != "2" || drops[1].attrs["epoch"] != "3" {
		t.Errorf("drop records = %v, want epochs 2 and 3", drops)
	}
}

// TestLongLineIsTruncated: output lines are bounded.
func TestLongLineIsTruncated(t *testing.T) {
	h := start(t, Config{Hooks: []Hook{{Name: "blob", Events: []string{AllEvents},
		Command: `head -c 10000 /dev/zero | tr '\0' x; echo; echo after`}}})
	h.r.Dispatch(event(rpc.EventBecameLeader, 1))
	h.logs.wait(t, "end of run", finished("blob", rpc.EventBecameLeader, 1))
	out := h.logs.find(func(r logRecord) bool { return r.msg == "hooks: output" })
	if len(out) != 2 || len(out[0].attrs["line"]) != maxLine || out[0].attrs["truncated"] != "true" ||
		out[1].attrs["line"] != "after" || out[1].attrs["truncated"] != "" {
		t.Errorf("got %d output records, want a truncated line of %d bytes, then \"after\"", len(out), maxLine)
	}
}

// TestBackgroundOutputIsStillLogged: a process a run leaves behind keeps
// its output logged while the Runner is open.
func TestBackgroundOutputIsStillLogged(t *testing.T) {
	h := start(t, Config{Hooks: []Hook{{Name: "bg", Events: []string{AllEvents},
		Command: `(while [ ! -e "$OUT/release" ]; do sleep 0.01; done; echo late) &`}}})
	h.r.Dispatch(event(rpc.EventBecameLeader, 1))
	h.logs.wait(t, "end of run", finished("bg", rpc.EventBecameLeader, 1))
	if err := os.WriteFile(h.path("release"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	h.logs.wait(t, "late output", func(r logRecord) bool { return r.attrs["line"] == "late" })
}

// TestCloseKillsWhenCtxEnds: Close waits for runs until ctx ends, then kills
// them and drops what is queued.
func TestCloseKillsWhenCtxEnds(t *testing.T) {
	h := start(t, Config{Timeout: time.Minute, Hooks: []Hook{{Name: "long", Events: []string{AllEvents},
		Command: `echo $$ > "$OUT/sh.pid"; ` + sleeper}}})
	h.r.Dispatch(event(rpc.EventBecameLeader, 1))
	h.r.Dispatch(event(rpc.EventLostLeadership, 1))
	gc, sh := h.waitPID("gc.pid"), h.waitPID("sh.pid")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	begin := time.Now()
	err := h.r.Close(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Close = %v, want DeadlineExceeded", err)
	}
	if took := time.Since(begin); took > time.Second {
		t.Errorf("Close took %v", took)
	}
	waitGone(t, sh, time.Second)
	waitGone(t, gc, time.Second)
	if h.readFile("next") != "" {
		t.Error("the queued event ran after Close gave up")
	}
	if got := h.logs.find(func(r logRecord) bool { return strings.Contains(r.msg, "queued event not run") }); len(got) != 1 {
		t.Errorf("drop records = %v, want one", got)
	}
}

// TestDispatchAfterClose runs nothing.
func TestDispatchAfterClose(t *testing.T) {
	h := start(t, Config{Hooks: []Hook{{Events: []string{AllEvents}, Command: `echo x >> "$OUT/log"`}}})
	h.close()
	h.r.Dispatch(event(rpc.EventBecameLeader, 1))
	h.close()
	if got := h.readFile("log"); got != "" {
		t.Errorf("ran after Close: %q", got)
	}
}
