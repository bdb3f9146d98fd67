// Command compare is tenure's benchmark suite against etcd: crash and
// graceful failover of the leader, leader queries, and the cost and
// messages of fleets of agents, with tenure and etcd measured in the same
// run with the same TTLs and trial counts. See docs/BENCHMARKS.md ("tenure
// and etcd side by side") for what each number means.
//
//	compare [flags]                     run the suite, write -out
//	compare report [flags] RESULTS...   tables (Markdown) and the chart
//
// It lives in a module of its own so that etcd's dependencies stay out of
// tenure's go.mod; run it from this directory (make bench-compare).
// Everything it starts listens on 127.0.0.1 and is killed when it exits.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// config is the suite's flags.
type config struct {
	trials    int
	ttls      []time.Duration
	clients   []int
	queryTime time.Duration
	fleet     []int
	fleetWait time.Duration
	idle      time.Duration
	timing    string
	only      map[string]bool
	out       string
	keep      bool
	strict    bool
	tenureBin string
}

func main() {
	slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})))
	var err error
	switch {
	case len(os.Args) > 1 && os.Args[1] == "child":
		err = runChild(os.Args[2:])
	case len(os.Args) > 1 && os.Args[1] == "report":
		err = runReport(os.Args[2:])
	default:
		err = run(os.Args[1:])
	}
	if err != nil {
		slog.Error("compare", "err", err)
		os.Exit(1)
	}
}

// run parses the flags and runs the suite.
func run(args []string) error {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	var cfg config
	fs.IntVar(&cfg.trials, "trials", 5, "trials per failover setting, for each system")
	ttls := fs.String("ttls", "2s,10s", "lease and session TTLs of the failover trials (etcd takes whole seconds, at least 2)")
	clients := fs.String("clients", "1,8", "numbers of concurrent clients for the leader queries")
	fs.DurationVar(&cfg.queryTime, "query-time", 3*time.Second, "how long each query run lasts")
	fleet := fs.String("fleet", "3,10,25,30,100", "fleet sizes: idle cost, time to agree, and a crash failover's messages")
	fs.DurationVar(&cfg.fleetWait, "fleet-wait", 2*time.Minute, "give up waiting for a fleet to agree after this long")
	fs.DurationVar(&cfg.idle, "idle", 20*time.Second, "idle window over which a fleet's CPU and RSS are measured")
	fs.StringVar(&cfg.timing, "timing", "lan", "tenure's timing profile: lan or local")
	only := fs.String("only", "crash,graceful,query,fleet", "benchmarks to run")
	fs.StringVar(&cfg.out, "out", "results.json", "write the results to this file")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the work directory (logs, journals)")
	fs.BoolVar(&cfg.strict, "strict", false, "exit with an error when any trial, query run or fleet measured nothing (a fleet that did not agree included): for CI")
	fs.StringVar(&cfg.tenureBin, "tenure-bin", "", "tenure binary to run (default: built from ../cmd/tenure)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	if cfg.ttls, err = parseList(*ttls, time.ParseDuration); err != nil {
		return fmt.Errorf("-ttls: %w", err)
	}
	for _, t := range cfg.ttls {
		if t < 2*time.Second || t%time.Second != 0 {
			return fmt.Errorf("-ttls: %v: etcd sessions take whole seconds, at least 2", t)
		}
	}
	if cfg.clients, err = parseList(*clients, strconv.Atoi); err != nil {
		return fmt.Errorf("-clients: %w", err)
	}
	if cfg.fleet, err = parseList(*fleet, strconv.Atoi); err != nil {
		return fmt.Errorf("-fleet: %w", err)
	}
	cfg.only = map[string]bool{}
	for _, o := range strings.Split(*only, ",") {
		if !slices.Contains([]string{"crash", "graceful", "query", "fleet"}, o) {
			return fmt.Errorf("-only: unknown benchmark %q", o)
		}
		cfg.only[o] = true
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return runSuite(ctx, cfg, strings.Join(append([]string{"compare"}, args...), " "))
}

func parseList[T any](s string, parse func(string) (T, error)) ([]T, error) {
	var out []T
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := parse(f)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, errors.New("empty list")
	}
	return out, nil
}

// runSuite runs the benchmarks cfg selects and writes the results, also
// when one fails or the run is interrupted (with what was measured).
func runSuite(ctx context.Context, cfg config, command string) (err error) {
	begin := time.Now()
	res := &Results{Started: begin, Machine: machine(), Commit: commit(), Command: command, Timing: cfg.timing}
	sweepStale()
	work, err := newWorkDir()
	if err != nil {
		return err
	}
	defer func() {
		switch {
		case cfg.keep:
			slog.Info("work directory kept", "dir", work)
		case err != nil:
			slog.Info("work directory removed; run with -keep to keep the agents' logs and journals")
			os.RemoveAll(work)
		default:
			os.RemoveAll(work)
		}
	}()
	s := &suite{cfg: cfg, work: work}
	if err := s.build(ctx); err != nil {
		return err
	}
	etcdDir, err := s.dir("etcd-cluster")
	if err != nil {
		return err
	}
	slog.Info("starting a 3-member etcd cluster")
	etcdBegin := time.Now()
	if s.etcd, err = startEtcd(ctx, s.self, etcdDir); err != nil {
		return err
	}
	res.EtcdStart = time.Since(etcdBegin).Seconds()
	defer s.etcd.stop()
	defer func() {
		res.Seconds = time.Since(begin).Seconds()
		if serr := res.save(cfg.out); serr != nil {
			err = errors.Join(err, serr)
			return
		}
		slog.Info("results written", "file", cfg.out, "took", time.Since(begin).Round(time.Second))
	}()
	if err := s.measure(ctx, res); err != nil {
		return err
	}
	if cfg.strict {
		return res.problems()
	}
	return nil
}

// newWorkDir makes the suite's work directory and records this process's
// pid in it, so a later run can tell a stale one (sweepStale).
func newWorkDir() (string, error) {
	work, err := os.MkdirTemp("", workPrefix)
	if err != nil {
		return "", fmt.Errorf("work dir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(work, "pid"), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		os.RemoveAll(work)
		return "", fmt.Errorf("work dir: %w", err)
	}
	return work, nil
}

// build finds this program, builds tenure (unless -tenure names a binary)
// and the etcd candidate, and makes a cluster key.
func (s *suite) build(ctx context.Context) (err error) {
	if s.self, err = os.Executable(); err != nil {
		return fmt.Errorf("find this program: %w", err)
	}
	s.bin = s.cfg.tenureBin
	if s.bin == "" {
		slog.Info("building tenure")
		if s.bin, err = buildTenure(ctx, s.work); err != nil {
			return err
		}
	}
	if s.candidate, err = buildCandidate(ctx, s.work); err != nil {
		return err
	}
	s.key, err = tenureKey(ctx, s.bin)
	return err
}

// measure runs the parts of the suite -only selects, filling res.
func (s *suite) measure(ctx context.Context, res *Results) (err error) {
	if s.cfg.only["crash"] {
		slog.Info("crash failover (SIGKILL of the leader)")
		if res.Crash, err = s.failovers(ctx, syscall.SIGKILL); err != nil {
			return fmt.Errorf("crash failover: %w", err)
		}
	}
	if s.cfg.only["graceful"] {
		slog.Info("graceful hand-over (SIGTERM of the leader)")
		if res.Graceful, err = s.failovers(ctx, syscall.SIGTERM); err != nil {
			return fmt.Errorf("graceful hand-over: %w", err)
		}
	}
	if s.cfg.only["query"] {
		slog.Info("leader queries")
		if res.Queries, err = s.queries(ctx); err != nil {
			return fmt.Errorf("queries: %w", err)
		}
	}
	if s.cfg.only["fleet"] {
		for _, n := range s.cfg.fleet {
			slog.Info("fleet", "n", n, "load", loadAverage())
			for _, run := range []func(context.Context, int) (FleetResult, error){s.tenureFleet, s.etcdFleet} {
				r, err := run(ctx, n)
				if err != nil {
					return fmt.Errorf("%s fleet of %d: %w", r.System, n, err)
				}
				res.Fleets = append(res.Fleets, r)
			}
		}
	}
	return nil
}

// workPrefix names the suite's work directories in the temporary
// directory.
const workPrefix = "tenure-bench-"

// sweepStale removes the work directories of earlier runs whose process
// is gone: a run killed with SIGKILL cannot remove its own (its children
// die with it, by Pdeathsig).
func sweepStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), workPrefix+"*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "pid"))
		if err != nil {
			continue // not ours, or still being created
		}
		pid, err := strconv.Atoi(string(b))
		if err != nil || syscall.Kill(pid, 0) == nil {
			continue // alive (or unreadable): leave it
		}
		slog.Info("removing the work directory of a run that was killed", "dir", d)
		os.RemoveAll(d)
	}
}

// machine describes the host: cores, memory, CPU model and Go version.
func machine() string {
	model := "?"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	mem := "?"
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 1 {
			if kb, err := strconv.ParseFloat(f[1], 64); err == nil {
				mem = fmt.Sprintf("%.0f GiB", kb/1024/1024)
			}
		}
	}
	return fmt.Sprintf("%d cores (%s), %s, %s %s/%s", runtime.NumCPU(), model, mem, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// commit is the tenure commit the suite runs (with "+dirty" for local
// changes), or "?" outside a git checkout.
func commit() string {
	out, err := exec.Command("git", "-C", "..", "describe", "--always", "--dirty=+dirty").Output()
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(out))
}
