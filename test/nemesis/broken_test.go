//go:build nemesis

package nemesis

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/broken"
	"github.com/tenurehq/tenure/test/nemesis/check"
)

// brokenCase is one deliberately broken build or configuration and the
// fixed scenario that must make the named checks fail. The scenario's
// holds are written for DefaultTTL and scaled to -nemesis.ttl
// (ttlScaled): a broken build shows only once a lease could run out.
type brokenCase struct {
	name       string
	broken     []string // TENURE_BROKEN modes (a tenure_broken build)
	ineligible []string
	plan       []Step
	fails      []string // verdicts that must fail; others may
	// says, when set, must be in the first failure of fails[0]: the
	// violation meant, not another.
	says string
}

var brokenCases = []brokenCase{
	{name: "skip-majority", broken: []string{broken.SkipMajority},
		plan:  []Step{{Kind: FaultIsolate, Hold: 6 * time.Second}},
		fails: []string{check.NameOneLease}},
	{name: "no-epoch-bump", broken: []string{broken.SkipMajority, broken.NoEpochBump},
		plan:  []Step{{Kind: FaultIsolate, Hold: 6 * time.Second}},
		fails: []string{check.NameEpochs}},
	{name: "renew-past-deadline", broken: []string{broken.RenewPastDeadline},
		plan:  []Step{{Kind: FaultPause, Hold: 8 * time.Second}},
		fails: []string{check.NameOneLease}},
	{name: "run-keeps-child", broken: []string{broken.RunKeepsChild},
		plan:  []Step{{Kind: FaultPause, Hold: 8 * time.Second}},
		fails: []string{check.NameChildren}},
	{name: "store-no-fence", broken: []string{broken.StoreNoFence},
		plan:  []Step{{Kind: FaultPauseHost, Hold: 8 * time.Second}},
		fails: []string{check.NameMonotone}},
	{name: "no-release", broken: []string{broken.NoRelease},
		plan:  []Step{{Kind: FaultResign, Hold: 4 * time.Second}},
		fails: []string{check.NameHandOver}, says: "waited for the old lease"},
	{name: "undo-hand-over", broken: []string{broken.UndoHandOver},
		plan:  []Step{{Kind: FaultResign, Hold: 2 * time.Second}},
		fails: []string{check.NameHandOver}, says: "undone"},
	// Not a broken build but a cluster that cannot meet I5: only h5 may
	// lead, and it is killed for good.
	{name: "no-eligible-successor", ineligible: []string{"h1", "h2", "h3", "h4"},
		plan:  []Step{{Kind: FaultCrash}},
		fails: []string{check.NameLiveness}},
	// The same cluster with h5 paused longer than a TTL plus the election
	// bound: the four voters left are connected, nobody leads, and h5
	// leads again at once after the heal, so only the judgment during
	// the fault can fail.
	{name: "no-eligible-during-pause", ineligible: []string{"h1", "h2", "h3", "h4"},
		plan:  []Step{{Kind: FaultPause, Hold: 12 * time.Second}},
		fails: []string{check.NameLiveness}, says: "during a fault that left a majority of the voters connected"},
}

// TestCheckerCatchesBrokenBuilds shows the checker can fail each check it
// claims: for every broken case, a targeted scenario must fail the named
// verdict (the test fails if it passes). Then one run of the normal build
// through the same faults (isolate the leader, pause its agent, pause its
// host, a resign, kill it for good) must pass every check.
func TestCheckerCatchesBrokenBuilds(t *testing.T) {
	t.Parallel()
	for _, bc := range brokenCases {
		t.Run(bc.name, func(t *testing.T) {
			t.Parallel()
			bin := setUp(t, len(bc.broken) > 0)
			res := runBroken(t, RunOptions{Cluster: Config{Bin: bin, Broken: bc.broken, Ineligible: bc.ineligible}, Plan: ttlScaled(bc.plan)})
			if res == nil || res.Report == nil {
				t.Fatal("no report")
			}
			for _, name := range bc.fails {
				if v, ok := res.Report.Verdict(name); !ok || v.OK {
					t.Errorf("%s passed on the %s build: the checker missed the violation", name, bc.name)
				}
			}
			if v, ok := res.Report.Verdict(bc.fails[0]); bc.says != "" && ok && !v.OK &&
				(len(v.Details) == 0 || !strings.Contains(v.Details[0], bc.says)) {
				t.Errorf("%s failed on the %s build for another violation than %q: %v", v.Name, bc.name, bc.says, v.Details)
			}
		})
	}
	t.Run("normal-build", func(t *testing.T) {
		t.Parallel()
		bin := setUp(t, false)
		plan := []Step{{Kind: FaultIsolate, Hold: 6 * time.Second}, {Kind: FaultPause, Hold: 8 * time.Second},
			{Kind: FaultPauseHost, Hold: 8 * time.Second}, {Kind: FaultResign, Hold: 4 * time.Second}, {Kind: FaultCrash}}
		res := runChecked(t, RunOptions{Cluster: Config{Bin: bin}, Plan: ttlScaled(plan)})
		if res != nil && !res.OK() {
			t.Error("the normal build failed the scenarios the broken builds fail: see the summary above")
		}
	})
}

// runBroken is runChecked for a run that is meant to fail its checks: its
// run directory is removed unless -nemesis.keep or the test fails.
func runBroken(t *testing.T, o RunOptions) *Result {
	t.Helper()
	res := runChecked(t, o)
	if res != nil && len(res.Crashed) > 0 {
		t.Errorf("processes crashed: %v", res.Crashed)
	}
	failed := []string{}
	if res != nil && res.Report != nil {
		for _, v := range res.Report.Verdicts {
			if !v.OK {
				failed = append(failed, v.Name)
			}
		}
	}
	t.Logf("failed checks, as meant: %v", slices.Clip(failed))
	return res
}
