package agent_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tenurehq/tenure/agent"
)

// BenchmarkHandover measures a graceful hand-over among five agents on
// loopback (Local timing, 2 s TTL): from the leader's resign until another
// agent says it leads with a valid lease. It reports the median and the
// worst trial; one trial per iteration, with a pause between trials for
// the resign hold to pass (run with -benchtime=20x or so).
//
//	go test -run '^$' -bench BenchmarkHandover -benchtime 20x ./agent
func BenchmarkHandover(b *testing.B) {
	dir, err := os.MkdirTemp("", "tenure-handover-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	var agents []*agent.Agent
	for i := 1; i <= 5; i++ {
		cfg := agent.DefaultConfig()
		cfg.Name, cfg.ID = fmt.Sprintf("n%d", i), uint64(i)
		cfg.BindAddr, cfg.PeerBindAddr = "127.0.0.1:0", "127.0.0.1:0"
		cfg.SocketPath, cfg.DataDir = filepath.Join(dir, cfg.Name+".sock"), filepath.Join(dir, cfg.Name)
		cfg.Profile, cfg.LeaseTTL, cfg.Expect = agent.Local, 2*time.Second, 5
		cfg.Logger = slog.New(slog.DiscardHandler)
		if len(agents) > 0 {
			cfg.Join = []string{agents[0].GossipAddr()}
		}
		a, err := agent.Start(cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer a.Halt()
		agents = append(agents, a)
	}
	var samples []time.Duration
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		time.Sleep(3500 * time.Millisecond) // the resign hold (3 s in Local timing) passes
		leader := agreedLeader(b, agents, 30*time.Second)
		b.StartTimer()
		start := time.Now()
		if err := leader.ResignFor(context.Background(), 0); err != nil {
			b.Fatal(err)
		}
		for !otherLeads(agents, leader) {
			if time.Since(start) > 10*time.Second {
				b.Fatal("no other leader within 10 s of the resign")
			}
			time.Sleep(100 * time.Microsecond)
		}
		samples = append(samples, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(samples)
	b.ReportMetric(float64(samples[len(samples)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(samples[len(samples)-1].Microseconds())/1000, "max-ms")
	b.ReportMetric(0, "ns/op")
}

// agreedLeader waits until every agent names the same leader, which says
// it leads, and returns it.
func agreedLeader(b *testing.B, agents []*agent.Agent, d time.Duration) *agent.Agent {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var name string
		var leader *agent.Agent
		agreed := true
		for _, a := range agents {
			st := a.Status()
			if st.Leader == nil || (name != "" && st.Leader.Node != name) {
				agreed = false
				break
			}
			name = st.Leader.Node
			if st.IsLeader {
				leader = a
			}
		}
		if agreed && leader != nil {
			return leader
		}
	}
	b.Fatal("no agreed leader")
	return nil
}

func otherLeads(agents []*agent.Agent, old *agent.Agent) bool {
	for _, a := range agents {
		if a != old && a.Status().IsLeader {
			return true
		}
	}
	return false
}
