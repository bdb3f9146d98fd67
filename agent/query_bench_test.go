package agent_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tenurehq/tenure/agent"
	"github.com/tenurehq/tenure/rpc"
)

// BenchmarkLeaderQueries measures leader queries (the socket's leader op)
// through the real Unix socket against a real agent: one agent on
// loopback (Local timing, a cluster of one, so it leads), asked by 1 and by
// 8 concurrent Go clients, each with its own connection. b.N queries are
// shared among the clients. It reports queries per second over the whole
// run and the p50 and p99 latency of one query as the client sees it.
//
//	go test -run '^$' -bench BenchmarkLeaderQueries -count 3 ./agent
func BenchmarkLeaderQueries(b *testing.B) {
	dir, err := os.MkdirTemp("", "tenure-query-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	cfg := agent.DefaultConfig()
	cfg.Name, cfg.ID = "n1", 1
	cfg.BindAddr, cfg.PeerBindAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.SocketPath, cfg.DataDir = filepath.Join(dir, "n1.sock"), filepath.Join(dir, "n1")
	cfg.Profile, cfg.LeaseTTL, cfg.Expect = agent.Local, 2*time.Second, 1
	cfg.Logger = slog.New(slog.DiscardHandler)
	a, err := agent.Start(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer a.Halt()
	agreedLeader(b, []*agent.Agent{a}, 30*time.Second)
	for _, clients := range []int{1, 8} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			benchQueries(b, a.SocketPath(), clients)
		})
	}
}

// benchQueries runs b.N leader queries from clients connections at once
// and reports q/s, p50-µs and p99-µs, and cpu-µs/q: the CPU time of the
// whole process (clients, server, agent, user and system) per query, which
// other work on the machine disturbs less than the rate.
func benchQueries(b *testing.B, path string, clients int) {
	ctx := context.Background()
	conns := make([]*rpc.Client, clients)
	for i := range conns {
		c, err := rpc.Dial(ctx, path)
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Leader(ctx); err != nil { // warm the connection
			b.Fatal(err)
		}
		conns[i] = c
	}
	var left atomic.Int64
	left.Store(int64(b.N))
	lat := make([][]time.Duration, clients)
	errs := make(chan error, clients)
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	start, cpu0 := time.Now(), cpuTime(b)
	for i, c := range conns {
		wg.Go(func() {
			samples := make([]time.Duration, 0, b.N/clients+1)
			for left.Add(-1) >= 0 {
				t0 := time.Now()
				if _, err := c.Leader(ctx); err != nil {
					errs <- err
					return
				}
				samples = append(samples, time.Since(t0))
			}
			lat[i] = samples
		})
	}
	wg.Wait()
	elapsed, cpu := time.Since(start), cpuTime(b)-cpu0
	b.StopTimer()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "q/s")
	b.ReportMetric(float64(all[len(all)/2].Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(all[len(all)*99/100].Nanoseconds())/1e3, "p99-µs")
	b.ReportMetric(float64(cpu.Nanoseconds())/1e3/float64(b.N), "cpu-µs/q")
}

// cpuTime returns the CPU time the process has used, user and system.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
