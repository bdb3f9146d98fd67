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
