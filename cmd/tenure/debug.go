package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/tenurehq/tenure/agent"
	"github.com/tenurehq/tenure/agent/metrics"
)

// httpServer serves one of the agent's HTTP endpoints until closed.
type httpServer struct{ srv *http.Server }

// serveHTTP listens on addr (flag names the flag it came from, for errors)
// and serves h. With loopbackOnly, addr must be a loopback address.
func serveHTTP(flag, addr string, loopbackOnly bool, h http.Handler, log *slog.Logger) (*httpServer, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--%s %q: %w", flag, addr, err)
	}
	if ip := net.ParseIP(host); loopbackOnly && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("--%s %q: want a loopback address such as 127.0.0.1:6060", flag, addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--%s: %w", flag, err)
	}
	s := &httpServer{srv: &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("http endpoint stopped", "flag", flag, "err", err)
		}
	}()
	log.Info("http endpoint listening", "flag", flag, "addr", ln.Addr().String())
	return s, nil
}

func (s *httpServer) close() {
	if s != nil {
		s.srv.Close()
	}
}

// startMetrics serves metrics, health and status (package agent/metrics)
// on addr, the --http-addr flag.
func startMetrics(addr string, a *agent.Agent, log *slog.Logger) (*httpServer, error) {
	return serveHTTP("http-addr", addr, false, metrics.Handler(a), log)
}

// startDebug serves the agent's counters and Go's profiles on a loopback
// address (the hidden --debug-addr flag), for diagnosing what an agent
// spends its time on; loopback only, since the profiles reveal the
// process's memory and nothing authenticates the endpoint:
//
//	GET /debug/tenure/counters   the agent's counters as JSON (agent.Agent.Counters)
//	GET /debug/pprof/...         net/http/pprof (profile?seconds=N for CPU)
func startDebug(addr string, a *agent.Agent, log *slog.Logger) (*httpServer, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/debug/tenure/counters", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(a.Counters())
	})
	return serveHTTP("debug-addr", addr, true, mux, log)
}
