package gossip

import (
	"bytes"
	"context"
	"log"
	"log/slog"
	"strings"
	"sync"
	"time"
)

// logWriter turns the lines serf and memberlist print through their
// *log.Logger ("[WARN] memberlist: message") into slog records at the
// matching level, with the library's name as the "component" attribute.
// Warnings and errors of one kind (the text before the first colon, such as
// "Decrypt packet failed" for every packet of a node without the cluster
// key) are logged at most once per repeatInterval, with a count of those
// left out, so a flood of bad packets cannot flood the log.
type logWriter struct {
	logger *slog.Logger

	mu      sync.Mutex
	repeats map[string]*repeat
}

type repeat struct {
	last       time.Time
	suppressed int
}

// repeatInterval is how often one kind of warning or error is logged.
const repeatInterval = 30 * time.Second

// newStdLogger returns a *log.Logger that writes into logger.
func newStdLogger(logger *slog.Logger) *log.Logger {
	return log.New(&logWriter{logger: logger, repeats: map[string]*repeat{}}, "", 0)
}

// Write logs each line of p. It never fails.
func (w *logWriter) Write(p []byte) (int, error) {
	for line := range bytes.Lines(p) {
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			continue
		}
		level, component, msg := parseLogLine(string(line))
		if n, ok := w.admit(level, component, msg, time.Now()); ok {
			attrs := []any{"component", component}
			if n > 0 {
				attrs = append(attrs, "similar_suppressed", n)
			}
			w.logger.Log(context.Background(), level, msg, attrs...)
		}
	}
	return len(p), nil
}

// admit rate-limits warnings and errors by kind; it returns how many of
// the kind were left out since the last one logged.
func (w *logWriter) admit(level slog.Level, component, msg string, now time.Time) (int, bool) {
	if level < slog.LevelWarn {
		return 0, true
	}
	kind, _, _ := strings.Cut(msg, ":")
	key := component + "/" + kind
	w.mu.Lock()
	defer w.mu.Unlock()
	r, ok := w.repeats[key]
	if !ok {
		if len(w.repeats) > 1024 {
			clear(w.repeats) // bounded memory: forget old kinds
		}
		w.repeats[key] = &repeat{last: now}
		return 0, true
	}
	if now.Sub(r.last) < repeatInterval {
		r.suppressed++
		return 0, false
	}
	n := r.suppressed
	r.last, r.suppressed = now, 0
	return n, true
}

// parseLogLine splits "[LEVEL] component: message". A line without a level
// is logged at info; one without a known component gets "serf".
func parseLogLine(line string) (slog.Level, string, string) {
	level := slog.LevelInfo
	if rest, ok := strings.CutPrefix(line, "["); ok {
		if tag, after, ok := strings.Cut(rest, "]"); ok {
			level = parseLevel(tag)
			line = strings.TrimLeft(after, " ")
		}
	}
	for _, c := range []string{"memberlist", "serf"} {
		if msg, ok := strings.CutPrefix(line, c+": "); ok {
			return level, c, msg
		}
	}
	return level, "serf", line
}

// parseLevel maps hashicorp's level tags to slog levels.
func parseLevel(tag string) slog.Level {
	switch strings.ToUpper(tag) {
	case "TRACE", "DEBUG":
		return slog.LevelDebug
	case "WARN", "WARNING":
		return slog.LevelWarn
	case "ERR", "ERROR":
		return slog.LevelError
	}
	return slog.LevelInfo
}
