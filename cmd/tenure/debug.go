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
)

// debugServer serves the agent's counters and Go's profiles on a loopback
// address (the hidden --debug-addr flag), for diagnosing what an agent
// spends its time on:
//
//	GET /debug/tenure/counters   the agent's counters as JSON (agent.Agent.Counters)
//	GET /debug/pprof/...         net/http/pprof (profile?seconds=N for CPU)
type debugServer struct {
	srv *http.Server
	ln  net.Listener
}

// startDebug listens on addr, which must be a loopback address: the
// profiles reveal the process's memory, and the endpoint has no
// authentication.
func startDebug(addr string, a *agent.Agent, log *slog.Logger) (*debugServer, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--debug-addr %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("--debug-addr %q: want a loopback address such as 127.0.0.1:6060", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--debug-addr: %w", err)
	}
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
	d := &debugServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, ln: ln}
	go func() {
		if err := d.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("debug endpoint stopped", "err", err)
		}
	}()
	log.Info("debug endpoint listening", "addr", ln.Addr().String())
	return d, nil
}

func (d *debugServer) close() {
	if d != nil {
		d.srv.Close()
	}
}
