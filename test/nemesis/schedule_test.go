//go:build nemesis

package nemesis

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

var five = []string{"h1", "h2", "h3", "h4", "h5"}

// reaches reports whether packets from a arrive at b under p (loss,
// UDP-only drops and delays count as reaching).
func reaches(p Partition, a, b string) bool {
	return !slices.ContainsFunc(p.Rules, func(d Rule) bool { return d.On == b && d.From == a && !d.UDP && d.Prob == 0 && !d.Delay })
}

// sees lists the nodes node exchanges packets with both ways.
func sees(p Partition, nodes []string, node string) []string {
	var out []string
	for _, m := range nodes {
		if m != node && reaches(p, node, m) && reaches(p, m, node) {
			out = append(out, m)
		}
	}
	return out
}

func TestHalvesSplitTwoFromThree(t *testing.T) {
	for seed := range uint64(50) {
		p := Halves(five, rand.New(rand.NewPCG(seed, 0)))
		sizes := map[int]int{}
		for _, n := range five {
			side := append(sees(p, five, n), n)
			sizes[len(side)]++
			for _, m := range side {
				if !slices.Equal(slices.Sorted(slices.Values(append(sees(p, five, m), m))), slices.Sorted(slices.Values(side))) {
					t.Fatalf("seed %d: %s and %s on one side see different nodes: %s", seed, n, m, p.Detail)
				}
			}
		}
		if sizes[2] != 2 || sizes[3] != 3 {
			t.Fatalf("seed %d: sides %v, want 2 and 3: %s", seed, sizes, p.Detail)
		}
	}
}

func TestIsolateCutsOneFromAll(t *testing.T) {
	p := Isolate(five, "h3")
	for _, n := range five {
		want := 3
		if n == "h3" {
			want = 0
		}
		if got := len(sees(p, five, n)); got != want {
			t.Fatalf("%s sees %d nodes, want %d", n, got, want)
		}
	}
}

// TestRingGivesEveryNodeItsOwnMajority: each node sees exactly two
// others, so it and its neighbours are a majority of five, and no two
// nodes see the same set.
func TestRingGivesEveryNodeItsOwnMajority(t *testing.T) {
	for seed := range uint64(50) {
		p := Ring(five, rand.New(rand.NewPCG(seed, 0)))
		views := map[string]bool{}
		for _, n := range five {
			s := sees(p, five, n)
			if len(s) != 2 {
				t.Fatalf("seed %d: %s sees %v in %s", seed, n, s, p.Detail)
			}
			views[strings.Join(slices.Sorted(slices.Values(append(s, n))), ",")] = true
		}
		if len(views) != 5 {
			t.Fatalf("seed %d: majorities repeat in %s", seed, p.Detail)
		}
	}
}

func TestBridgeJoinsTwoHalvesThroughOneNode(t *testing.T) {
	for seed := range uint64(50) {
		p := Bridge(five, rand.New(rand.NewPCG(seed, 0)))
		bridges := 0
		for _, n := range five {
			switch len(sees(p, five, n)) {
			case 4:
				bridges++
			case 2: // its half and the bridge
			default:
				t.Fatalf("seed %d: %s sees %v in %s", seed, n, sees(p, five, n), p.Detail)
			}
		}
		if bridges != 1 {
			t.Fatalf("seed %d: %d nodes see all in %s", seed, bridges, p.Detail)
		}
	}
}

func TestOneWayDropsOneDirectionOnly(t *testing.T) {
	for seed := range uint64(50) {
		p := OneWay(five, rand.New(rand.NewPCG(seed, 0)))
		cut := 0
		for _, a := range five {
			for _, b := range five {
				if a != b && !reaches(p, a, b) {
					cut++
					if !reaches(p, b, a) {
						t.Fatalf("seed %d: %s and %s cut both ways in %s", seed, a, b, p.Detail)
					}
				}
			}
		}
		if cut != 6 {
			t.Fatalf("seed %d: %d one-way cuts, want 2×3: %s", seed, cut, p.Detail)
		}
	}
}

func TestUDPCutAndLossLeaveTCP(t *testing.T) {
	u := UDPCut(five, "h2")
	if len(u.Rules) != 8 || slices.ContainsFunc(u.Rules, func(d Rule) bool { return !d.UDP || (d.On != "h2" && d.From != "h2") }) {
		t.Fatalf("UDP cut of h2: %+v", u.Rules)
	}
	l := Loss(five, 0.15)
	if len(l.Rules) != 20 || slices.ContainsFunc(l.Rules, func(d Rule) bool { return d.Prob != 0.15 || d.UDP }) {
		t.Fatalf("loss: %+v", l.Rules)
	}
}

func TestDelaysCutNothing(t *testing.T) {
	d := Delay(five, 400*time.Millisecond)
	s := Slow(five, "h3", 400*time.Millisecond)
	for _, p := range []Partition{d, s} {
		if p.Delay != 400*time.Millisecond || slices.ContainsFunc(p.Rules, func(r Rule) bool { return !r.Delay || r.UDP || r.TCPPort != 0 || r.Prob != 0 }) {
			t.Fatalf("%s: %+v", p.Detail, p)
		}
		for _, a := range five {
			for _, b := range five {
				if a != b && !reaches(p, a, b) {
					t.Fatalf("%s: %s does not reach %s", p.Detail, a, b)
				}
			}
		}
	}
	if len(d.Rules) != 20 {
		t.Fatalf("delay: %d rules, want one per ordered pair: %+v", len(d.Rules), d.Rules)
	}
	if len(s.Rules) != 8 || slices.ContainsFunc(s.Rules, func(r Rule) bool { return r.On != "h3" && r.From != "h3" }) {
		t.Fatalf("slow h3: %+v", s.Rules)
	}
}

// all draws every kind.
var all = Draw{Join: true, Ops: true, Disk: true, Delay: true, Readdress: true}

// TestPlanReplaysItsSeed: a seed gives the same plan every time; holds
// stay in their ranges; one join, never first; over many seeds every
// fault and operator action is drawn.
func TestPlanReplaysItsSeed(t *testing.T) {
	if !reflect.DeepEqual(Plan(42, 8, all), Plan(42, 8, all)) {
		t.Fatal("seed 42 gave two plans")
	}
	if reflect.DeepEqual(Plan(42, 8, all), Plan(43, 8, all)) {
		t.Fatal("seeds 42 and 43 gave the same plan")
	}
	kinds := map[string]int{}
	for seed := range uint64(400) {
		plan := Plan(seed, 6, all)
		joins := 0
		for i, s := range plan {
			kinds[s.Kind]++
			if s.Under != "" {
				if !slices.Contains(operatorDrawn, s.Kind) || !slices.Contains(slices.Concat(underDrawn, diskDrawn, delayDrawn), s.Under) {
					t.Fatalf("seed %d: %s", seed, s)
				}
				kinds["under "+s.Under]++
			}
			switch {
			case s.Kind == FaultJoin:
				joins++
				if i == 0 {
					t.Fatalf("seed %d: join first", seed)
				}
			case s.Kind == FaultPause || s.Kind == FaultPauseHost:
				if !slices.Contains(PauseLengths, s.Hold) {
					t.Fatalf("seed %d: %s", seed, s)
				}
			case s.Hold < time.Second || s.Hold > 10*time.Second:
				t.Fatalf("seed %d: %s holds out of range", seed, s)
			}
		}
		if joins != 1 {
			t.Fatalf("seed %d: %d joins", seed, joins)
		}
	}
	for _, k := range append(slices.Concat(drawn, operatorDrawn, diskDrawn, delayDrawn, readdressDrawn), FaultJoin, "under "+FaultLoss, "under "+FaultIsolate,
		"under "+FaultKill, "under "+FaultPause, "under "+FaultDiskFull, "under "+FaultDelay, "under "+FaultSlow) {
		if kinds[k] == 0 {
			t.Errorf("%s never drawn in 400 plans", k)
		}
	}
}

// TestPlanWithoutOperatorsKeepsOldSeeds: without operator actions a seed
// gives the plan it gave before they were added, so the seeds recorded in
// docs/RELIABILITY.md replay with -nemesis.ops=false.
func TestPlanWithoutOperatorsKeepsOldSeeds(t *testing.T) {
	var got []string
	for _, s := range Plan(4010, 4, Draw{Join: true}) {
		got = append(got, s.String())
	}
	want := []string{"isolate-leader for 8.268s", "ring for 4.189s", "join", "udp-cut for 6.801s"}
	if !slices.Equal(got, want) {
		t.Fatalf("seed 4010 without operators: got %q, want %q", got, want)
	}
	for seed := range uint64(200) {
		for _, s := range Plan(seed, 6, Draw{Join: true}) {
			if slices.Contains(operatorDrawn, s.Kind) || s.Kind == FaultDiskFull || slices.Contains(delayDrawn, s.Kind) {
				t.Fatalf("seed %d: %s drawn without operators and disk faults", seed, s)
			}
		}
	}
}

// TestPlanWithoutDiskFaultsKeepsOldSeeds: without disk faults a seed
// gives the plan it gave before they were added (with operator actions),
// so the seeds recorded in docs/RELIABILITY.md replay with
// -nemesis.disk=false.
func TestPlanWithoutDiskFaultsKeepsOldSeeds(t *testing.T) {
	for seed := range uint64(200) {
		for _, s := range Plan(seed, 6, Draw{Join: true, Ops: true}) {
			if s.Kind == FaultDiskFull || s.Under == FaultDiskFull {
				t.Fatalf("seed %d: %s drawn without disk faults", seed, s)
			}
		}
	}
	var got []string
	for _, s := range Plan(5836, 6, Draw{Join: true, Ops: true}) {
		got = append(got, s.String())
	}
	want := []string{"resign --hold 8.342s under loss 5%", "halves for 5.723s", "drain for 9.709s",
		"stop for 5.13s under halves", "join", "pause-host for 15s"}
	if !slices.Equal(got, want) {
		t.Fatalf("seed 5836 without disk faults: got %q, want %q", got, want)
	}
}

// TestPlanWithoutDelaysKeepsOldSeeds: without delays a seed gives the
// plan it gave before they were added (with operator actions and disk
// faults), so the seeds recorded in docs/RELIABILITY.md replay with
// -nemesis.delay=false; with them, delays have their drawn means.
func TestPlanWithoutDelaysKeepsOldSeeds(t *testing.T) {
	withDelays := 0
	for seed := range uint64(200) {
		for _, s := range Plan(seed, 6, Draw{Join: true, Ops: true, Disk: true}) {
			if slices.Contains(delayDrawn, s.Kind) || slices.Contains(delayDrawn, s.Under) || s.Delay != 0 {
				t.Fatalf("seed %d: %s drawn without delays", seed, s)
			}
		}
		for _, s := range Plan(seed, 6, all) {
			delayed := slices.Contains(delayDrawn, s.Kind) || slices.Contains(delayDrawn, s.Under)
			if delayed != slices.Contains(delays, s.Delay) {
				t.Fatalf("seed %d: %s has delay %v", seed, s, s.Delay)
			}
			if delayed {
				withDelays++
			}
		}
	}
	if withDelays == 0 {
		t.Fatal("no delay drawn in 200 plans")
	}
	var got []string
	for _, s := range Plan(6290, 6, Draw{Join: true, Ops: true, Disk: true}) {
		got = append(got, s.String())
	}
	want := []string{"pause-host for 8s", "disk-full for 6.419s", "bridge for 6.152s", "disk-full for 3.104s", "join", "kill for 3.304s"}
	if !slices.Equal(got, want) {
		t.Fatalf("seed 6290 without delays: got %q, want %q", got, want)
	}
}

// TestPlanWithoutReaddressKeepsOldSeeds: without new addresses a seed
// gives the plan it gave before they were added (with operator actions,
// disk faults and delays), so the seeds recorded in docs/RELIABILITY.md
// replay with -nemesis.readdress=false.
func TestPlanWithoutReaddressKeepsOldSeeds(t *testing.T) {
	without := Draw{Join: true, Ops: true, Disk: true, Delay: true}
	drawnWith := 0
	for seed := range uint64(200) {
		for _, s := range Plan(seed, 6, without) {
			if s.Kind == FaultReaddress {
				t.Fatalf("seed %d: %s drawn without new addresses", seed, s)
			}
		}
		for _, s := range Plan(seed, 6, all) {
			if s.Kind == FaultReaddress {
				drawnWith++
			}
		}
	}
	if drawnWith == 0 {
		t.Fatal("no readdress drawn in 200 plans")
	}
	var got []string
	for _, s := range Plan(6513, 6, without) {
		got = append(got, s.String())
	}
	want := []string{"halves for 9.669s", "kill-wipe for 3.776s", "transfer", "bridge for 4.976s", "isolate-leader for 3.947s", "join"}
	if !slices.Equal(got, want) {
		t.Fatalf("seed 6513 without new addresses: got %q, want %q", got, want)
	}
}

// TestPlanOnlyDrawsTheKindsNamed: with Only, every step and every fault
// an action runs under is one of the kinds named (an action with none
// left runs bare), every kind named is drawn, and a kind the draw does
// not allow is refused.
func TestPlanOnlyDrawsTheKindsNamed(t *testing.T) {
	for _, only := range [][]string{{FaultDelay, FaultSlow, FaultTransfer}, {FaultTransfer, FaultDrain}, {FaultKill}} {
		d := all
		d.Join, d.Only = false, only
		if err := d.Check(); err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for seed := range uint64(200) {
			for _, s := range Plan(seed, 6, d) {
				if !slices.Contains(only, s.Kind) || s.Under != "" && !slices.Contains(only, s.Under) {
					t.Fatalf("only %v, seed %d: %s", only, seed, s)
				}
				seen[s.Kind] = true
			}
		}
		for _, k := range only {
			if !seen[k] {
				t.Errorf("only %v: %s never drawn in 200 plans", only, k)
			}
		}
	}
	if err := (Draw{Ops: true, Only: []string{FaultDelay}}).Check(); err == nil {
		t.Error("only delay, without delays drawn: no error")
	}
	if err := (Draw{Ops: true, Only: []string{"partition"}}).Check(); err == nil {
		t.Error("only an unknown kind: no error")
	}
}

// TestScaleHoldsKeepsTheDraw: a plan's holds scaled are the same faults,
// on the same picks, held f times as long.
func TestScaleHoldsKeepsTheDraw(t *testing.T) {
	plan := Plan(8569, 6, all)
	plan = append(plan, Step{Kind: FaultResign, Hold: 3 * time.Second, Under: FaultPause, UnderHold: 5 * time.Second})
	drawn := slices.Clone(plan)
	scaled := ScaleHolds(plan, 3)
	if !reflect.DeepEqual(plan, drawn) {
		t.Fatal("ScaleHolds changed the plan it was given")
	}
	for i, s := range scaled {
		want := plan[i]
		want.Hold, want.UnderHold = 3*want.Hold, 3*want.UnderHold
		if s != want {
			t.Errorf("step %d: scaled %+v, want %+v", i+1, s, want)
		}
	}
	if !reflect.DeepEqual(ScaleHolds(plan, 1), plan) {
		t.Error("a scale of 1 changed the plan")
	}
}
