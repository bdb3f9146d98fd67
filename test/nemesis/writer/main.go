// Command writer is the workload of a nemesis run: the child `tenure run`
// starts on the leader. It writes to the fenced store with its term's
// epoch as fencing token, reads the value back, and records every
// completed operation as one JSON line of the history the checker
// (package test/nemesis/check, type Op) reads.
//
//	TENURE_EPOCH=7 writer --store http://10.0.0.1:8080 --history run/history-h1.jsonl --node h1
//
// Loop: PUT {store}/kv/{key} with Fencing-Token: <epoch> and a unique
// value <node>-e<epoch>-p<pid>-<seq>, record it; GET it back, record it;
// sleep --interval. Each call is bounded by 500ms. A write answered 200 is
// "ok", 409 "stale", anything else (timeout, connection error, another
// status) "unknown" with return 0: it may or may not have taken effect. A
// read answered 200 is "ok" with the Fencing-Token and body the store
// returned, 404 "absent", anything else "unknown".
//
// Each line is appended with one write(2) on a file opened O_APPEND, so
// writers of one node that overlap (a restart) never interleave their
// lines. On SIGTERM or SIGINT the writer finishes the operation in flight
// (at most 500ms), records it, and exits 0; it starts no other.
//
// It uses only the standard library, and shares no code with the agent.
//
// Exit codes: 0 after a signal, 1 when the history cannot be written, 2
// for bad flags or a missing TENURE_EPOCH.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// callTimeout bounds each HTTP call to the store.
const callTimeout = 500 * time.Millisecond

func main() {
	os.Exit(run(os.Args[1:], os.Getenv, os.Stderr))
}

// run is main with its inputs passed in; it returns the exit code.
func run(args []string, getenv func(string) string, stderr io.Writer) int {
	cfg, err := parseConfig(args, getenv, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(stderr, "writer: %v\n", err)
		}
		return 2
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil)).With("node", cfg.node, "epoch", cfg.epoch)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := writeLoop(ctx, cfg, logger); err != nil {
		logger.Error("writer stopped", "err", err)
		return 1
	}
	return 0
}

// config is the writer's flags and environment.
type config struct {
	store    string // base URL, no trailing slash
	history  string
	node     string
	key      string
	interval time.Duration
	epoch    uint64
	timeout  time.Duration // per HTTP call; callTimeout
}

func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	cfg := config{timeout: callTimeout}
	fs := flag.NewFlagSet("writer", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.store, "store", "", "base URL of the fenced store (required)")
	fs.StringVar(&cfg.history, "history", "", "history file to append to (required)")
	fs.StringVar(&cfg.node, "node", getenv("NEMESIS_NODE"), "this node's name (default $NEMESIS_NODE)")
	fs.StringVar(&cfg.key, "key", "reg", "the store key to write and read")
	fs.DurationVar(&cfg.interval, "interval", 20*time.Millisecond, "pause between a read and the next write")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	cfg.store = strings.TrimSuffix(cfg.store, "/")
	switch {
	case fs.NArg() > 0:
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	case cfg.store == "" || cfg.history == "":
		return cfg, errors.New("--store and --history are required")
	case cfg.node == "":
		return cfg, errors.New("no node name: give --node or set NEMESIS_NODE")
	case cfg.interval < 0:
		return cfg, errors.New("--interval must not be negative")
	}
	return cfg, parseEpoch(&cfg, getenv("TENURE_EPOCH"))
}

func parseEpoch(cfg *config, s string) error {
	if s == "" {
		return errors.New("TENURE_EPOCH is not set: run me under `tenure run`, which passes the term's epoch")
	}
	epoch, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return fmt.Errorf("TENURE_EPOCH %q is not a decimal epoch", s)
	}
	cfg.epoch = epoch
	return nil
}
