// Command fenced-store is a small HTTP key-value store that refuses writes
// carrying a fencing token lower than one it has already accepted, so a
// deposed tenure leader cannot overwrite its successor's data. See README.md
// and package store for the API.
//
//	go run ./examples/fenced-store --data-dir /tmp/store [--listen 127.0.0.1:8080] [--fence per-key]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tenurehq/tenure/examples/fenced-store/store"
)

func main() {
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(os.Args[1:], logger); err != nil {
		logger.Error("fenced-store stopped", "err", err)
		os.Exit(1)
	}
}

// run parses flags, serves until SIGINT or SIGTERM, then shuts down.
func run(args []string, logger *slog.Logger) error {
	fs := flag.NewFlagSet("fenced-store", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8080", "address to serve HTTP on")
	dataDir := fs.String("data-dir", "", "directory for the values and the fence (required)")
	fenceName := fs.String("fence", store.OneFence.String(), "one: one fence for all keys (one leader writes); per-key: a fence per key (e.g. one per partition, each with its own tokens)")
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return nil // -h: the usage is printed; not a failure
	} else if err != nil {
		return err
	}
	if *dataDir == "" {
		return errors.New("fenced-store: --data-dir is required")
	}
	mode, err := store.ParseFenceMode(*fenceName)
	if err != nil {
		return fmt.Errorf("fenced-store: --fence: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return serve(ctx, *listen, *dataDir, mode, logger)
}

// serve opens the store in dataDir and serves it on addr until ctx ends.
func serve(ctx context.Context, addr, dataDir string, mode store.FenceMode, logger *slog.Logger) error {
	st, err := store.Open(dataDir, mode, logger)
	if err != nil {
		return err
	}
	defer st.Close()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("fenced-store: %w", err)
	}
	srv := &http.Server{
		Handler:           st.Handler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	logger.Info("serving", "addr", ln.Addr().String(), "data_dir", dataDir)
	select {
	case err := <-errc:
		return fmt.Errorf("fenced-store: %w", err)
	case <-ctx.Done():
	}
	logger.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(shutdownCtx)
}
