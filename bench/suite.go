package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/tenurehq/tenure/rpc"
)

// maxDrift is the agents' --max-drift (the default), which the safety
// floor is computed with.
const maxDrift = 0.01

// suite holds what the benchmarks share: the tenure and etcd-candidate
// binaries, this binary (for the etcd members), the work directory and
// the etcd cluster.
type suite struct {
	cfg       config
	bin       string // tenure
	self      string // this program, for its etcd-member mode
	candidate string // cmd/etcd-candidate
	key       string // the tenure cluster key
	work      string
	etcd      *etcdCluster
	dirNo     int
}

// dir makes a fresh directory under the work directory.
func (s *suite) dir(name string) (string, error) {
	s.dirNo++
	d := filepath.Join(s.work, fmt.Sprintf("%03d-%s", s.dirNo, name))
	if err := os.MkdirAll(d, 0o700); err != nil {
		return "", fmt.Errorf("work dir: %w", err)
	}
	return d, nil
}

// settle waits a second and then a random part of a renewal interval
// (TTL/3), so that a leader is stopped at a random point of its renewal
// cycle and the trials sample the whole range of the safety floor.
func settle(ctx context.Context, ttl time.Duration) error {
	return sleep(ctx, time.Second+rand.N(ttl/3))
}

// tenureFailover starts five agents, all voters, stops the leader with sig
// once they agree, and times until another agent journals that it leads.
func (s *suite) tenureFailover(ctx context.Context, ttl time.Duration, sig syscall.Signal, trial int) (FailoverTrial, error) {
	tr := FailoverTrial{System: "tenure", TTL: ttl.Seconds(), Trial: trial}
	dir, err := s.dir(fmt.Sprintf("tenure-%v-%v", sigName(sig), ttl))
	if err != nil {
		return tr, err
	}
	f, err := startFleet(fleetConfig{bin: s.bin, key: s.key, dir: dir, n: 5, voters: 5, ttl: ttl, timing: s.cfg.timing})
	if err != nil {
		return tr, err
	}
	defer f.stop()
	if _, err := f.waitAgree(ctx, "", 100*time.Millisecond, time.Minute); err != nil {
		return tr, err
	}
	if err := settle(ctx, ttl); err != nil {
		return tr, err
	}
	l, err := f.waitAgree(ctx, "", 20*time.Millisecond, time.Minute)
	if err != nil {
		return tr, err
	}
	old := f.agent(l.Leader)
	before, err := f.counters(ctx, old.name)
	if err != nil {
		return tr, err
	}
	tr.OldLeader, tr.Load = old.name, loadAverage()
	at := old.p.signal(sig)
	lead, err := f.waitLead(ctx, old.name, at, ttl+30*time.Second)
	if err != nil {
		return tr, err
	}
	tr.Failover = time.Unix(0, lead.T).Sub(at).Seconds()
	tr.NewLeader, tr.Epoch = lead.Node, lead.Epoch
	if sig == syscall.SIGKILL {
		floor, err := safetyFloor(old.journal, at, ttl, maxDrift)
		if err != nil {
			return tr, err
		}
		tr.Floor = floor.Sub(at).Seconds()
	}
	agr, err := f.waitAgree(ctx, old.name, 50*time.Millisecond, ttl+30*time.Second)
	if err != nil {
		return tr, err
	}
	tr.Agree = agr.At.Sub(at).Seconds()
	after, err := f.counters(ctx, old.name)
	if err != nil {
		return tr, err
	}
	t := traffic(before, after)
	tr.Traffic = &t
	return tr, nil
}

// etcdFailover starts three candidates (one per member) under a fresh
// election prefix, stops the elected one with sig, and times until
// another one's campaign returns.
func (s *suite) etcdFailover(ctx context.Context, ttl time.Duration, sig syscall.Signal, trial int) (FailoverTrial, error) {
	tr := FailoverTrial{System: "etcd", TTL: ttl.Seconds(), Trial: trial}
	dir, err := s.dir(fmt.Sprintf("etcd-%v-%v", sigName(sig), ttl))
	if err != nil {
		return tr, err
	}
	prefix := fmt.Sprintf("/bench/%s-%d", filepath.Base(dir), trial)
	cs, err := startCandidates(s.candidate, dir, s.etcd, 3, ttl, prefix)
	if err != nil {
		return tr, err
	}
	defer cs.stop()
	if _, _, err := cs.waitAgree(ctx, "", time.Minute); err != nil {
		return tr, err
	}
	if err := settle(ctx, ttl); err != nil {
		return tr, err
	}
	leader, _, err := cs.waitAgree(ctx, "", time.Minute)
	if err != nil {
		return tr, err
	}
	p := cs.byName(leader)
	tr.OldLeader, tr.Load = leader, loadAverage()
	at := p.signal(sig)
	next, t, err := cs.waitElected(ctx, leader, at, ttl+30*time.Second)
	if err != nil {
		return tr, err
	}
	tr.Failover, tr.NewLeader = t.Sub(at).Seconds(), next
	if sig == syscall.SIGKILL {
		ka, err := lastKeepalive(p, at)
		if err != nil {
			return tr, fmt.Errorf("etcd candidate %s: %w", leader, err)
		}
		tr.Floor = ka.Add(ttl).Sub(at).Seconds()
	}
	return tr, nil
}

func sigName(sig syscall.Signal) string {
	if sig == syscall.SIGKILL {
		return "crash"
	}
	return "graceful"
}

// failovers runs the trials of one kind, tenure and etcd interleaved so
// that both see the same machine, for each TTL.
func (s *suite) failovers(ctx context.Context, sig syscall.Signal) ([]FailoverTrial, error) {
	var out []FailoverTrial
	for _, ttl := range s.cfg.ttls {
		for trial := 1; trial <= s.cfg.trials; trial++ {
			for _, run := range []func(context.Context, time.Duration, syscall.Signal, int) (FailoverTrial, error){s.tenureFailover, s.etcdFailover} {
				tr, err := run(ctx, ttl, sig, trial)
				if ctx.Err() != nil {
					return out, ctx.Err()
				}
				if err != nil {
					tr.Error = err.Error()
					slog.Error("trial failed", "kind", sigName(sig), "system", tr.System, "ttl", ttl, "trial", trial, "err", err)
				} else {
					slog.Info("trial", "kind", sigName(sig), "system", tr.System, "ttl", ttl, "trial", trial,
						"failover", secs(tr.Failover), "floor", secs(tr.Floor), "old", tr.OldLeader, "new", tr.NewLeader)
				}
				out = append(out, tr)
			}
		}
	}
	return out, nil
}

func secs(s float64) string { return fmt.Sprintf("%.3fs", s) }

// queries measures closed-loop leader queries with 1 and 8 clients (or
// -clients): tenure's agent t001 over its socket (Client.Leader), and
// etcd's member m1 with Election.Leader, a linearizable Get of the
// election's first key.
func (s *suite) queries(ctx context.Context) ([]QueryResult, error) {
	dir, err := s.dir("queries")
	if err != nil {
		return nil, err
	}
	f, err := startFleet(fleetConfig{bin: s.bin, key: s.key, dir: dir, n: 5, voters: 5, ttl: s.cfg.ttls[len(s.cfg.ttls)-1], timing: s.cfg.timing})
	if err != nil {
		return nil, err
	}
	defer f.stop()
	cs, err := startCandidates(s.candidate, dir, s.etcd, 3, s.cfg.ttls[len(s.cfg.ttls)-1], "/bench/queries")
	if err != nil {
		return nil, err
	}
	defer cs.stop()
	if _, err := f.waitAgree(ctx, "", 100*time.Millisecond, time.Minute); err != nil {
		return nil, err
	}
	if _, _, err := cs.waitAgree(ctx, "", time.Minute); err != nil {
		return nil, err
	}
	sock := f.agents[0].sock
	tenureQuery := func(ctx context.Context) (func(context.Context) error, func(), error) {
		c, err := rpc.Dial(ctx, sock)
		if err != nil {
			return nil, nil, fmt.Errorf("dial tenure: %w", err)
		}
		return func(ctx context.Context) error { _, err := c.Leader(ctx); return err }, func() { c.Close() }, nil
	}
	etcdQuery := func(ctx context.Context) (func(context.Context) error, func(), error) {
		cli, err := clientv3.New(clientv3.Config{Endpoints: s.etcd.endpoints[:1], DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return nil, nil, fmt.Errorf("etcd client: %w", err)
		}
		sess, err := concurrency.NewSession(cli)
		if err != nil {
			cli.Close()
			return nil, nil, fmt.Errorf("etcd session: %w", err)
		}
		e := concurrency.NewElection(sess, "/bench/queries")
		return func(ctx context.Context) error {
				_, err := e.Leader(ctx)
				return err
			}, func() {
				sess.Close()
				cli.Close()
			}, nil
	}
	var out []QueryResult
	for _, n := range s.cfg.clients {
		for _, sys := range []struct {
			name string
			dial func(context.Context) (func(context.Context) error, func(), error)
		}{{"tenure", tenureQuery}, {"etcd", etcdQuery}} {
			r, err := closedLoop(ctx, n, s.cfg.queryTime, sys.dial)
			if err != nil {
				return out, fmt.Errorf("%s queries with %d clients: %w", sys.name, n, err)
			}
			r.System = sys.name
			slog.Info("queries", "system", sys.name, "clients", n, "qps", int(r.QPS), "p50_us", int(r.P50), "p99_us", int(r.P99))
			out = append(out, r)
		}
	}
	return out, nil
}

// closedLoop runs n clients, each asking again as soon as it has an
// answer, for d, and reports the rate and the latencies.
func closedLoop(ctx context.Context, n int, d time.Duration, dial func(context.Context) (func(context.Context) error, func(), error)) (QueryResult, error) {
	queries := make([]func(context.Context) error, n)
	for i := range queries {
		q, closeFn, err := dial(ctx)
		if err != nil {
			return QueryResult{}, err
		}
		defer closeFn()
		queries[i] = q
	}
	var mu sync.Mutex
	var lat []time.Duration
	errs := 0
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(d)
	for _, q := range queries {
		wg.Go(func() {
			var mine []time.Duration
			bad := 0
			for time.Now().Before(end) && ctx.Err() == nil {
				qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				t := time.Now()
				err := q(qctx)
				cancel()
				if err != nil {
					bad++
					continue
				}
				mine = append(mine, time.Since(t))
			}
			mu.Lock()
			lat, errs = append(lat, mine...), errs+bad
			mu.Unlock()
		})
	}
	wg.Wait()
	el := time.Since(start).Seconds()
	slices.Sort(lat)
	r := QueryResult{Clients: n, Seconds: el, Queries: len(lat), QPS: float64(len(lat)) / el, Errors: errs}
	if len(lat) > 0 {
		r.P50 = float64(percentile(lat, 0.50).Microseconds())
		r.P99 = float64(percentile(lat, 0.99).Microseconds())
	}
	return r, ctx.Err()
}

// percentile is the nearest-rank q-quantile of sorted xs.
func percentile[T any](xs []T, q float64) T {
	i := int(q*float64(len(xs))+0.999999) - 1
	return xs[min(max(i, 0), len(xs)-1)]
}

// tenureFleet starts n agents (min(5, n) voters, the rest observers that
// may lead), and measures the time until they all agree, their idle cost,
// and a crash failover with the peer messages it took.
func (s *suite) tenureFleet(ctx context.Context, n int) (FleetResult, error) {
	voters := min(5, n)
	ttl := 10 * time.Second
	r := FleetResult{System: "tenure", N: n, Voters: voters, TTL: ttl.Seconds(), Agree: -1, Failover: -1, Wait: s.cfg.fleetWait.Seconds()}
	r.Load[0] = loadAverage()
	dir, err := s.dir(fmt.Sprintf("tenure-fleet-%d", n))
	if err != nil {
		return r, err
	}
	f, err := startFleet(fleetConfig{bin: s.bin, key: s.key, dir: dir, n: n, voters: voters, ttl: ttl, timing: s.cfg.timing})
	if err != nil {
		return r, err
	}
	defer f.stop()
	l, err := f.waitAgree(ctx, "", 250*time.Millisecond, s.cfg.fleetWait)
	if err != nil {
		r.Note = err.Error()
		slog.Warn("tenure fleet did not agree", "n", n, "err", err)
	} else {
		r.Agree, r.Leader, r.Epoch = l.At.Sub(f.started).Seconds(), l.Leader, l.Epoch
		slog.Info("tenure fleet agreed", "n", n, "after", secs(r.Agree), "leader", l.Leader, "epoch", l.Epoch)
	}
	costs, err := idleCost(ctx, s.cfg.idle, f.procs())
	if err != nil {
		return r, err
	}
	r.Idle = costs[0]
	slog.Info("tenure fleet idle", "n", n, "cpu_pct", r.Idle.CPUPct, "rss_mib", r.Idle.RSSMiB, "load", loadAverage())
	if r.Agree >= 0 {
		if l, err = f.waitAgree(ctx, "", 250*time.Millisecond, 30*time.Second); err != nil {
			r.Note = "lost agreement while idle: " + err.Error()
		} else {
			before, err := f.counters(ctx, l.Leader)
			if err != nil {
				return r, err
			}
			at := f.agent(l.Leader).p.signal(syscall.SIGKILL)
			agr, err := f.waitAgree(ctx, l.Leader, 250*time.Millisecond, ttl+60*time.Second)
			if err != nil {
				r.Note = "no agreement after the leader's kill: " + err.Error()
			} else {
				after, err := f.counters(ctx, l.Leader)
				if err != nil {
					return r, err
				}
				t := traffic(before, after)
				r.Failover, r.Traffic = agr.At.Sub(at).Seconds(), &t
				slog.Info("tenure fleet failover", "n", n, "after", secs(r.Failover), "messages", t.Messages, "bytes", t.RequestBytes)
			}
		}
	}
	r.Load[1] = loadAverage()
	return r, nil
}

// etcdFleet starts n candidates on the cluster and measures the time until
// they all observe one leader, the idle cost of the candidates and of the
// members, and a crash failover.
func (s *suite) etcdFleet(ctx context.Context, n int) (FleetResult, error) {
	ttl := 10 * time.Second
	r := FleetResult{System: "etcd", N: n, TTL: ttl.Seconds(), Agree: -1, Failover: -1, Wait: s.cfg.fleetWait.Seconds()}
	r.Load[0] = loadAverage()
	dir, err := s.dir(fmt.Sprintf("etcd-fleet-%d", n))
	if err != nil {
		return r, err
	}
	cs, err := startCandidates(s.candidate, dir, s.etcd, n, ttl, fmt.Sprintf("/bench/fleet-%d", n))
	if err != nil {
		return r, err
	}
	defer cs.stop()
	leader, at, err := cs.waitAgree(ctx, "", s.cfg.fleetWait)
	if err != nil {
		r.Note = err.Error()
	} else {
		r.Agree, r.Leader = at.Sub(cs.started).Seconds(), leader
		slog.Info("etcd fleet agreed", "n", n, "after", secs(r.Agree), "leader", leader)
	}
	costs, err := idleCost(ctx, s.cfg.idle, cs.live(), s.etcd.members)
	if err != nil {
		return r, err
	}
	r.Idle, r.Members = costs[0], &costs[1]
	mem := costs[1]
	slog.Info("etcd fleet idle", "n", n, "candidate_cpu_pct", r.Idle.CPUPct, "candidate_rss_mib", r.Idle.RSSMiB,
		"member_cpu_pct", mem.CPUPct, "member_rss_mib", mem.RSSMiB)
	if r.Agree >= 0 {
		kill := time.Now()
		cs.byName(leader).signal(syscall.SIGKILL)
		if _, at, err := cs.waitAgree(ctx, leader, ttl+60*time.Second); err != nil {
			r.Note = "no agreement after the leader's kill: " + err.Error()
		} else {
			r.Failover = at.Sub(kill).Seconds()
		}
	}
	r.Load[1] = loadAverage()
	return r, nil
}
