// Package metrics serves an agent's metrics and health over HTTP: the
// Prometheus text format on /metrics, health checks for load balancers
// and service managers, and the status JSON. It reads the agent's public
// view (Status, Members, Counters) at each request and changes nothing.
//
// The endpoints:
//
//	GET /metrics         Prometheus metrics (the tenure_* families below, Go and process metrics)
//	GET /health          200 while the agent serves and knows its cluster (in quorum
//	                     mode: it holds a roster); 503 with the reason otherwise
//	GET /health/leader   200 only on the node that leads with a valid lease; 503 elsewhere
//	GET /v1/status       the status JSON, as `tenure status --json` prints it
//
// Health answers are JSON: {"status":"ok"|"unavailable","node":...,"reason":...}.
// Nothing here is authenticated: bind the listener to an address only
// trusted scrapers reach.
package metrics

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tenurehq/tenure/rpc"
)

// Source is what the metrics read: *agent.Agent satisfies it.
type Source interface {
	Status() rpc.Status
	Members() []rpc.Member
	Counters() map[string]uint64
	Done() <-chan struct{}
}

// Handler serves the endpoints above for src.
func Handler(src Source) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{src},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		st := src.Status()
		writeHealth(w, st.Node, clusterProblem(src, st))
	})
	mux.HandleFunc("GET /health/leader", func(w http.ResponseWriter, _ *http.Request) {
		st := src.Status()
		why := clusterProblem(src, st)
		if why == "" && !st.IsLeader {
			why = "this node does not lead"
			if st.Leader != nil {
				why += "; " + st.Leader.Node + " does"
			}
		}
		writeHealth(w, st.Node, why)
	})
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(src.Status())
	})
	return mux
}

// clusterProblem says why the agent is not healthy, or "".
func clusterProblem(src Source, st rpc.Status) string {
	select {
	case <-src.Done():
		return "the agent has stopped"
	default:
	}
	if st.Consistency == "quorum" && st.Roster == nil {
		return "no roster yet: " + st.Reason
	}
	return ""
}

type health struct {
	Status string `json:"status"`
	Node   string `json:"node"`
	Reason string `json:"reason,omitempty"`
}

func writeHealth(w http.ResponseWriter, node, why string) {
	w.Header().Set("Content-Type", "application/json")
	h := health{Status: "ok", Node: node, Reason: strings.TrimSpace(why)}
	if why != "" {
		h.Status = "unavailable"
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(h)
}
