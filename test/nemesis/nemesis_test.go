//go:build nemesis

package nemesis

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/netns"
	"github.com/tenurehq/tenure/internal/testlog"
)

var (
	seedFlag      = flag.Uint64("nemesis.seed", 0, "seed of the first schedule (the next ones use seed+1, ...); 0 picks one from the clock and prints it")
	schedulesFlag = flag.Int("nemesis.schedules", 2, "number of random schedules TestSchedules runs, a cluster each (go test -parallel of them at once)")
	stepsFlag     = flag.Int("nemesis.steps", 4, "faults per schedule")
	keepFlag      = flag.Bool("nemesis.keep", false, "keep the run directory of a passing run too (a failing run's is always kept)")
	ttlFlag       = flag.Duration("nemesis.ttl", DefaultTTL, "the agents' --lease-ttl (the broken builds' scenarios scale their holds with it)")
	timingFlag    = flag.String("nemesis.timing", "local", "the agents' --timing profile: local, or lan (production's: give it a longer -nemesis.ttl and -nemesis.election-bound, such as 10s and 12s)")
	opsFlag       = flag.Bool("nemesis.ops", true, "draw operator actions (graceful stop, drain, transfer, resign) beside the faults; false replays seeds recorded before they existed")
	delayFlag     = flag.Bool("nemesis.delay", true, "draw delays (every link's, the leader's links') beside the faults and under operator actions; false replays seeds recorded before they existed, and is taken where the kernel has no netfilter queues unless this is set")
	readdressFlag = flag.Bool("nemesis.readdress", true, "draw kills after which the host comes back at once with another address; false replays seeds recorded before they existed")
	diskFlag      = flag.Bool("nemesis.disk", true, "draw full disks (a node's data dir on a filled tmpfs) beside the faults and under operator actions; false replays seeds recorded before they existed")
	onlyFlag      = flag.String("nemesis.only", "", "comma-separated fault kinds and operator actions a random schedule draws only (delay,slow-leader,transfer, say), also as the faults actions run under; empty draws every kind the other flags allow")
	holdScaleFlag = flag.Float64("nemesis.hold-scale", 1, "multiplies how long every fault of a random schedule is held (the same faults are drawn); 3 lets a LAN run's partitions outlast the suspicions on both sides")
	logLevelFlag  = flag.String("nemesis.agent-log-level", "", "the agents' --log-level (debug shows serf's and memberlist's own messages); empty keeps their default, info")
	boundFlag     = flag.Duration("nemesis.election-bound", DefaultElectionBound, "liveness: after each heal a node must hold a lease within TTL plus this")
)

// DefaultTTL is the agents' --lease-ttl unless -nemesis.ttl says
// otherwise; the broken builds' scenarios are written for it (ttlScaled).
const DefaultTTL = 2 * time.Second

// ttlScaled scales plan, written for DefaultTTL, to -nemesis.ttl: a
// scenario that must outlast a lease (an isolation of three TTLs, a
// pause of four) still does with a LAN run's 10 s lease.
func ttlScaled(plan []Step) []Step {
	return ScaleHolds(plan, float64(*ttlFlag)/float64(DefaultTTL))
}

// DefaultElectionBound is the part of the liveness budget after the TTL
// (docs/RELIABILITY.md says how it was chosen): with --timing local, a
// restarted agent's startup delay (1 s), three announce intervals and
// an unanswered question to forget a frozen leader (3.2 s), and one
// refused round's retry.
const DefaultElectionBound = 5 * time.Second

// netOptions keeps the harness's namespaces apart from cmd/tenure's
// (prefix tn, 10.213.0.0/24) and internal/netns's own tests.
var netOptions = netns.Options{Prefix: "nm", Subnet: "10.215.0"}

// sweepOnce cleans up after killed runs once per test process, before the
// first run (SweepRuns).
var sweepOnce sync.Once

// built holds the binaries of each variant, built once per test process.
var built = map[bool]*struct {
	once sync.Once
	bin  Binaries
	err  error
}{false: {}, true: {}}

// setUp skips t where the harness cannot run (not root, no ip or
// iptables), and returns the binaries, normal or broken.
func setUp(t *testing.T, broken bool) Binaries {
	t.Helper()
	if err := netns.Available(); err != nil {
		t.Skip(err)
	}
	if _, err := exec.LookPath("iptables-restore"); err != nil {
		t.Skip("nemesis: needs iptables (test/nemesis/deps.sh installs it)")
	}
	sweepOnce.Do(func() {
		done, err := SweepRuns()
		for _, d := range done {
			t.Logf("nemesis: cleaning up after a killed run: %s", d)
		}
		if err != nil {
			t.Logf("nemesis: cleaning up after killed runs: %v", err)
		}
	})
	b := built[broken]
	b.once.Do(func() {
		dir, err := os.MkdirTemp("", RunDirPattern(BinDirPrefix))
		if err != nil {
			b.err = err
			return
		}
		start := time.Now()
		b.bin, b.err = Build(dir, broken)
		t.Logf("built tenure, fenced-store and writer (tenure_broken: %t) in %v", broken, time.Since(start).Round(time.Millisecond))
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.bin
}

// flagSet reports whether the flag name was given on the command line.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	for _, b := range built {
		if b.bin.Tenure != "" {
			os.RemoveAll(filepath.Dir(b.bin.Tenure))
		}
	}
	os.Exit(code)
}

// runChecked runs o on a fresh network in a fresh run directory and logs
// the summary. A run that fails (harness or checker) keeps its directory
// and names it; a passing one's is removed unless -nemesis.keep.
func runChecked(t *testing.T, o RunOptions) *Result {
	t.Helper()
	dir, err := os.MkdirTemp("", RunDirPattern(RunDirPrefix))
	if err != nil {
		t.Fatal(err)
	}
	o.Cluster.Dir = dir
	o.Cluster.Net = netns.ForTest(t, netOptions)
	if o.Cluster.TTL == 0 {
		o.Cluster.TTL = *ttlFlag
	}
	if o.Cluster.Timing == "" {
		o.Cluster.Timing = *timingFlag
	}
	if o.Cluster.AgentLogLevel == "" {
		o.Cluster.AgentLogLevel = *logLevelFlag
	}
	if o.Cluster.Voters == 0 {
		o.Cluster.Voters = 5
	}
	if o.ElectionBound == 0 {
		o.ElectionBound = *boundFlag
	}
	o.Cluster.Logger = testlog.New(t, "")
	res, err := Run(o)
	if res != nil {
		t.Logf("%s", res.Summary(o))
	}
	if err != nil {
		t.Errorf("%v (run dir kept: %s)", err, dir)
		return res
	}
	t.Cleanup(func() {
		if t.Failed() || *keepFlag {
			t.Logf("run dir kept: %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	return res
}

// TestSchedules runs -nemesis.schedules random schedules of
// -nemesis.steps faults each on a cluster of five voters and fails if the
// checker finds any violation, a process crashed, or the agents did not
// agree on a leader again after a step (Result.Unsettled). Each schedule is a
// cluster on a network of its own, so they run in parallel, beside the
// scenarios too (go test -parallel bounds how many at once).
func TestSchedules(t *testing.T) {
	t.Parallel()
	if *holdScaleFlag <= 0 {
		t.Fatalf("-nemesis.hold-scale=%g: want a positive factor", *holdScaleFlag)
	}
	bin := setUp(t, false)
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano() % 1e9)
	}
	draw := Draw{Join: true, Ops: *opsFlag, Disk: *diskFlag, Delay: *delayFlag, Readdress: *readdressFlag}
	if *onlyFlag != "" {
		draw.Only = strings.Split(*onlyFlag, ",")
	}
	if err := DelayAvailable(); err != nil && draw.Delay {
		if flagSet("nemesis.delay") {
			t.Fatalf("%v (-nemesis.delay=false draws none)", err)
		}
		t.Logf("%v: no delays drawn (as -nemesis.delay=false)", err)
		draw.Delay = false
	}
	if err := draw.Check(); err != nil {
		t.Fatalf("-nemesis.only=%s: %v", *onlyFlag, err)
	}
	replay := fmt.Sprintf("-nemesis.steps=%d -nemesis.ops=%t -nemesis.disk=%t -nemesis.delay=%t -nemesis.readdress=%t -nemesis.hold-scale=%g",
		*stepsFlag, draw.Ops, draw.Disk, draw.Delay, draw.Readdress, *holdScaleFlag)
	if *onlyFlag != "" {
		replay += " -nemesis.only=" + *onlyFlag
	}
	var (
		mu    sync.Mutex
		tally Tally
	)
	t.Cleanup(func() { t.Logf("seeds %d to %d: %s", seed, seed+uint64(*schedulesFlag)-1, &tally) }) // after every schedule
	for i := range *schedulesFlag {
		s := seed + uint64(i)
		t.Run(fmt.Sprintf("seed=%d", s), func(t *testing.T) {
			t.Parallel()
			plan := ScaleHolds(Plan(s, *stepsFlag, draw), *holdScaleFlag)
			t.Logf("schedule of seed %d (replay: -nemesis.seed=%d -nemesis.schedules=1 %s):\n%s", s, s, replay, DescribePlan(plan))
			res := runChecked(t, RunOptions{Cluster: Config{Bin: bin}, Seed: s, Plan: plan})
			if res != nil {
				mu.Lock()
				tally.Add(res)
				mu.Unlock()
			}
			if res != nil && !res.OK() {
				t.Errorf("seed %d failed: see the summary above", s)
			}
		})
	}
}
