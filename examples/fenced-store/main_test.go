package main

import (
	"log/slog"
	"strings"
	"testing"
)

func TestRunRequiresDataDir(t *testing.T) {
	err := run([]string{"--listen", "127.0.0.1:0"}, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "--data-dir is required") {
		t.Fatalf("run without --data-dir = %v", err)
	}
}

// TestHelpIsNotAFailure: -h prints the usage and exits 0, without an
// ERROR record (it used to log "flag: help requested" and exit 1).
func TestHelpIsNotAFailure(t *testing.T) {
	if err := run([]string{"-h"}, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatalf("run -h = %v", err)
	}
}

// TestUnknownFenceModeIsRefused: --fence takes one or per-key only.
func TestUnknownFenceModeIsRefused(t *testing.T) {
	err := run([]string{"--data-dir", t.TempDir(), "--fence", "per-row"}, slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), `unknown fence mode "per-row"`) {
		t.Fatalf("run --fence per-row = %v", err)
	}
}
