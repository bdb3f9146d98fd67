package agent

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tenurehq/tenure/leasing"
)

// BenchmarkCrashFailover measures how long a crash of the leader costs
// among five agents on loopback (real gossip, peer transport and sockets;
// the LAN profile, which is the default), for lease TTLs of 2 s and 10 s.
// Each trial waits until all five agree on the highest node as leader and
// every voter is past its restart hold, sleeps a random part of a renewal
// interval, and halts the leader (Agent.Halt: no resign, no release, no
// gossip leave; to the others it is a kill -9). Right after the halt it
// reads from every surviving voter how long its promise still runs; the
// *floor* is the instant when a majority of the roster is free to grant,
// the earliest any next lease can start. Failover is from the halt until
// another agent says it leads with a valid lease. The killed agent then
// restarts on its gossip address with its data dir, and takes its place
// back by preemption before the next trial.
//
// It reports the median and 99th percentile (with few trials: the worst)
// of the failover and of failover minus floor, in milliseconds:
//
//	go test -run '^$' -bench BenchmarkCrashFailover -benchtime 10x ./agent
func BenchmarkCrashFailover(b *testing.B) {
	clusters := map[time.Duration]*benchCluster{}
	defer func() {
		for _, c := range clusters {
			c.close()
		}
	}()
	for _, ttl := range []time.Duration{2 * time.Second, 10 * time.Second} {
		b.Run(fmt.Sprintf("ttl=%v", ttl), func(b *testing.B) {
			c := clusters[ttl]
			if c == nil {
				c = newBenchCluster(b, ttl)
				clusters[ttl] = c
			}
			var failover, excess []time.Duration
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				f, e := c.crashTrial(b)
				failover, excess = append(failover, f), append(excess, e)
			}
			reportPercentiles(b, "failover", failover)
			reportPercentiles(b, "over-floor", excess)
			b.ReportMetric(0, "ns/op")
		})
	}
}

// benchCluster is five agents n1..n5 on loopback, restarted as trials
// kill them.
type benchCluster struct {
	dir    string
	ttl    time.Duration
	agents []*Agent
	cfgs   []Config
}

func newBenchCluster(b *testing.B, ttl time.Duration) *benchCluster {
	dir, err := os.MkdirTemp("", "tenure-failover-")
	if err != nil {
		b.Fatal(err)
	}
	c := &benchCluster{dir: dir, ttl: ttl}
	for i := 1; i <= 5; i++ {
		cfg := DefaultConfig()
		cfg.Name, cfg.ID = fmt.Sprintf("n%d", i), uint64(i)
		cfg.BindAddr, cfg.PeerBindAddr = "127.0.0.1:0", "127.0.0.1:0"
		cfg.SocketPath, cfg.DataDir = filepath.Join(dir, cfg.Name+".sock"), filepath.Join(dir, cfg.Name)
		cfg.LeaseTTL, cfg.Expect = ttl, 5
		cfg.Logger = slog.New(slog.DiscardHandler)
		if i > 1 {
			cfg.Join = []string{c.agents[0].GossipAddr()}
		}
		a, err := Start(cfg)
		if err != nil {
			c.close()
			b.Fatal(err)
		}
		cfg.BindAddr = a.GossipAddr() // a restart comes back on the same address
		c.agents, c.cfgs = append(c.agents, a), append(c.cfgs, cfg)
	}
	return c
}

func (c *benchCluster) close() {
	for _, a := range c.agents {
		if a != nil {
			a.Halt()
		}
	}
	os.RemoveAll(c.dir)
}

// crashTrial kills the leader once and returns the failover and how far it
// ended after the floor.
func (c *benchCluster) crashTrial(b *testing.B) (failover, overFloor time.Duration) {
	top := len(c.agents) - 1
	c.waitSettled(b, top, 2*time.Minute)
	time.Sleep(rand.N(c.ttl / 3)) // a random point of the renewal cycle
	b.StartTimer()
	killed := time.Now()
	c.agents[top].Halt()
	floor := c.floor(b, top)
	for {
		if i := c.leaderIndex(); i >= 0 && i != top {
			break
		}
		if time.Since(killed) > 4*c.ttl+10*time.Second {
			b.Fatalf("no new leader %v after the kill", time.Since(killed))
		}
		time.Sleep(200 * time.Microsecond)
	}
	done := time.Now()
	b.StopTimer()
	cfg := c.cfgs[top]
	cfg.Join = []string{c.agents[0].GossipAddr()}
	a, err := Start(cfg)
	if err != nil {
		b.Fatalf("restart %s: %v", cfg.Name, err)
	}
	c.agents[top] = a
	return done.Sub(killed), done.Sub(floor)
}

// floor is the wall-clock instant at which a majority of the roster is
// free to grant a new lease, read from the surviving voters' promises to
// the killed node dead (which counts as never free).
func (c *benchCluster) floor(b *testing.B, dead int) time.Time {
	free := map[string]time.Time{}
	var roster leasing.Roster
	for i, a := range c.agents {
		if i == dead {
			continue
		}
		err := a.do(context.Background(), func() {
			roster = a.core.roster()
			now, wall := a.cfg.Clock.Now(), time.Now()
			free[a.cfg.Name] = wall
			if a.core.grants == nil {
				return
			}
			if h, exp, ok := a.core.grants.Promise(now); ok && h.Name == c.cfgs[dead].Name {
				free[a.cfg.Name] = wall.Add(exp.Sub(now))
			}
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	var times []time.Time
	for _, t := range free {
		times = append(times, t)
	}
	slices.SortFunc(times, func(x, y time.Time) int { return x.Compare(y) })
	for _, t := range times {
		if roster.Satisfied(func(v leasing.Node) bool { f, ok := free[v.Name]; return ok && !f.After(t) }) {
			return t
		}
	}
	b.Fatal("no majority of the roster survives")
	return time.Time{}
}

// waitSettled waits until every agent names agent want as leader, it
// leads, and no voter is in its restart hold.
func (c *benchCluster) waitSettled(b *testing.B, want int, d time.Duration) {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c.leaderIndex() != want || !c.agreed(want) {
			continue
		}
		holding := false
		for _, a := range c.agents {
			_ = a.do(context.Background(), func() { holding = holding || a.core.holdingVote(a.cfg.Clock.Now()) })
		}
		if !holding {
			return
		}
	}
	b.Fatalf("%s did not settle as leader within %v", c.cfgs[want].Name, d)
}

// leaderIndex is the agent that says it leads, -1 when none does.
func (c *benchCluster) leaderIndex() int {
	for i, a := range c.agents {
		if a.Status().IsLeader {
			return i
		}
	}
	return -1
}

// agreed reports whether every agent names agent i as leader.
func (c *benchCluster) agreed(i int) bool {
	for _, a := range c.agents {
		if st := a.Status(); st.Leader == nil || st.Leader.Node != c.cfgs[i].Name {
			return false
		}
	}
	return true
}

// reportPercentiles reports the median and the 99th percentile of d (the
// worst sample when there are fewer than a hundred), in milliseconds.
func reportPercentiles(b *testing.B, name string, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	slices.Sort(d)
	ms := func(x time.Duration) float64 { return float64(x.Microseconds()) / 1000 }
	b.ReportMetric(ms(d[len(d)/2]), name+"-p50-ms")
	b.ReportMetric(ms(d[min(len(d)-1, len(d)*99/100)]), name+"-p99-ms")
}
