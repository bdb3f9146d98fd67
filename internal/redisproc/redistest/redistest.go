// Package redistest starts real redis-server processes for tests (package
// redisproc), skipping the test with a clear message when redis-server is
// not installed, and stopping them when the test ends.
package redistest

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/redisproc"
)

// Start starts n redis-server processes on loopback ports, each empty and
// without persistence, and kills them when t ends. It skips t when
// redis-server is missing.
func Start(t testing.TB, n int) []*redisproc.Server {
	t.Helper()
	if !redisproc.Available() {
		t.Skip("redis-server is not installed: run scripts/install-redis.sh (Debian's redis-server package) to run the Redis and Redlock tests")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	servers := make([]*redisproc.Server, 0, n)
	t.Cleanup(func() {
		for _, s := range servers {
			s.Kill()
		}
	})
	for i := range n {
		s, err := redisproc.Start(ctx, filepath.Join(dir, fmt.Sprintf("redis-%d", i)))
		if err != nil {
			t.Fatalf("start redis-server %d: %v", i, err)
		}
		servers = append(servers, s)
	}
	return servers
}

// Addrs returns the servers' addresses.
func Addrs(servers []*redisproc.Server) []string {
	out := make([]string, len(servers))
	for i, s := range servers {
		out[i] = s.Addr()
	}
	return out
}
