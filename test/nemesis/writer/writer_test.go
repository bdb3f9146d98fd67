package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tenurehq/tenure/test/nemesis/check"
)

// asWriter makes the test binary run main, for the tests that need a
// process to signal.
const asWriter = "NEMESIS_WRITER_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asWriter) == "1" {
		main()
	}
	goleak.VerifyTestMain(m)
}

// fakeStore imitates examples/fenced-store for one key: a PUT with a
// token at or above the highest accepted is stored (200), a lower one is
// refused (409); a GET returns the value and its token, or 404.
type fakeStore struct {
	mu       sync.Mutex
	fence    uint64
	value    string
	present  bool
	accepted []string      // values stored, in order
	puts     chan struct{} // one send per PUT, if not nil
	status   int           // if not 0, every request gets it
}

func (s *fakeStore) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.status != 0 {
		w.WriteHeader(s.status)
		return
	}
	if r.URL.Path != "/kv/reg" {
		http.NotFound(w, r)
		return
	}
	switch r.Method {
	case http.MethodPut:
		s.put(w, r)
	case http.MethodGet:
		if !s.present {
			http.Error(w, "no value", http.StatusNotFound)
			return
		}
		w.Header().Set("Fencing-Token", strconv.FormatUint(s.fence, 10))
		io.WriteString(w, s.value)
	}
}

func (s *fakeStore) put(w http.ResponseWriter, r *http.Request) {
	token, err := strconv.ParseUint(r.Header.Get("Fencing-Token"), 10, 64)
	body, _ := io.ReadAll(r.Body)
	switch {
	case err != nil:
		http.Error(w, "bad token", http.StatusBadRequest)
	case token < s.fence:
		http.Error(w, "stale", http.StatusConflict)
	default:
		s.fence, s.value, s.present = token, string(body), true
		s.accepted = append(s.accepted, s.value)
	}
	if s.puts != nil {
		select {
		case s.puts <- struct{}{}:
		default:
		}
	}
}

func testConfig(t *testing.T, url string) config {
	return config{store: url, history: filepath.Join(t.TempDir(), "history-h1.jsonl"), node: "h1", key: "reg",
		interval: time.Millisecond, epoch: 7, timeout: callTimeout}
}

// runUntil runs the write loop until the store has seen n PUTs.
func runUntil(t *testing.T, cfg config, st *fakeStore, n int) []check.Op {
	t.Helper()
	st.puts = make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- writeLoop(ctx, cfg, slog.New(slog.DiscardHandler)) }()
	for range n {
		<-st.puts
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ops, err := check.ReadHistory(cfg.history)
	if err != nil {
		t.Fatal(err)
	}
	return ops
}

func TestWriterRecordsWritesAndReads(t *testing.T) {
	st := &fakeStore{}
	srv := httptest.NewServer(st)
	defer srv.Close()
	ops := runUntil(t, testConfig(t, srv.URL), st, 3)
	if len(ops) < 5 || len(ops) > 6 {
		t.Fatalf("%d operations for 3 writes: %+v", len(ops), ops)
	}
	pid := os.Getpid()
	for i, o := range ops {
		value := fmt.Sprintf("h1-e7-p%d-%d", pid, i/2+1)
		want := check.Op{Node: "h1", PID: pid, Op: check.OpWrite, Epoch: 7, Value: value, Result: check.ResultOK,
			Invoke: o.Invoke, Return: o.Return}
		if i%2 == 1 {
			want.Op = check.OpRead
		}
		if o != want || o.Return < o.Invoke || (i > 0 && o.Invoke < ops[i-1].Return) {
			t.Errorf("operation %d: %+v, want %+v, after the one before", i, o, want)
		}
	}
	checkAgrees(t, st, ops)
}

// checkAgrees checks that the writes recorded ok are exactly those the
// store accepted, in order.
func checkAgrees(t *testing.T, st *fakeStore, ops []check.Op) {
	t.Helper()
	var ok []string
	for _, o := range ops {
		if o.Op == check.OpWrite && o.Result == check.ResultOK {
			ok = append(ok, o.Value)
		}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if !slices.Equal(ok, st.accepted) {
		t.Fatalf("recorded ok %q, the store accepted %q", ok, st.accepted)
	}
}

func TestWriterRecordsStaleAndAbsent(t *testing.T) {
	st := &fakeStore{fence: 9}
	srv := httptest.NewServer(st)
	defer srv.Close()
	ops := runUntil(t, testConfig(t, srv.URL), st, 2)
	for i, o := range ops {
		want := check.ResultStale
		if o.Op == check.OpRead {
			want = check.ResultAbsent
		}
		if o.Result != want || o.Return < o.Invoke {
			t.Errorf("operation %d: %+v, want %s", i, o, want)
		}
	}
}

func TestWriterRecordsUnknown(t *testing.T) {
	st := &fakeStore{status: http.StatusInternalServerError}
	srv := httptest.NewServer(st)
	defer srv.Close()
	cfg := testConfig(t, srv.URL)
	st.puts = make(chan struct{}) // never sent to: status answers first
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := writeLoop(ctx, cfg, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	srv.Close() // now every call fails to connect
	ctx, cancel = context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := writeLoop(ctx, cfg, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	ops, err := check.ReadHistory(cfg.history)
	if err != nil || len(ops) < 2 {
		t.Fatalf("%d operations, %v", len(ops), err)
	}
	for i, o := range ops {
		if o.Result != check.ResultUnknown || o.Return != 0 {
			t.Errorf("operation %d: %+v, want unknown with return 0", i, o)
		}
	}
}

func TestWriterNeedsEpochAndFlags(t *testing.T) {
	good := map[string]string{"TENURE_EPOCH": "7", "NEMESIS_NODE": "h1"}
	args := []string{"--store", "http://127.0.0.1:1", "--history", filepath.Join(t.TempDir(), "h")}
	for name, c := range map[string]struct {
		args []string
		env  map[string]string // changes to good; "" unsets
		want string
	}{
		"no epoch":   {args, map[string]string{"TENURE_EPOCH": ""}, "TENURE_EPOCH is not set"},
		"bad epoch":  {args, map[string]string{"TENURE_EPOCH": "seven"}, "not a decimal epoch"},
		"no node":    {args, map[string]string{"NEMESIS_NODE": ""}, "no node name"},
		"no store":   {args[2:], nil, "--store and --history are required"},
		"extra args": {append(slices.Clone(args), "x"), nil, "unexpected arguments"},
	} {
		t.Run(name, func(t *testing.T) {
			env := maps.Clone(good)
			maps.Copy(env, c.env)
			var stderr bytes.Buffer
			code := run(c.args, func(k string) string { return env[k] }, &stderr)
			if code != 2 || !strings.Contains(stderr.String(), c.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, stderr.String(), c.want)
			}
		})
	}
}

// A writer process told to stop finishes its operation, records it, and
// exits 0; every write it recorded ok is one the store accepted.
func TestWriterExitsOnSIGTERM(t *testing.T) {
	st := &fakeStore{puts: make(chan struct{}, 1)}
	srv := httptest.NewServer(st)
	defer srv.Close()
	hist := filepath.Join(t.TempDir(), "history-h1.jsonl")
	cmd := exec.Command(os.Args[0], "--store", srv.URL, "--history", hist, "--interval", "1ms")
	cmd.Env = append(os.Environ(), asWriter+"=1", "TENURE_EPOCH=7", "NEMESIS_NODE=h1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		<-st.puts
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		var exit *exec.ExitError
		if errors.As(err, &exit) || err != nil {
			t.Fatalf("writer exited with %v; stderr:\n%s", err, stderr.String())
		}
	case <-time.After(5 * time.Second):
		cmd.Process.Kill()
		<-exited
		t.Fatal("writer did not exit within 5s of SIGTERM")
	}
	ops, err := check.ReadHistory(hist)
	if err != nil || len(ops) < 3 {
		t.Fatalf("%d operations, %v", len(ops), err)
	}
	checkAgrees(t, st, ops)
}
