package gossip

import (
	"bytes"
	"context"
	"log"
	"log/slog"
	"strings"
)

// logWriter turns the lines serf and memberlist print through their
// *log.Logger ("[WARN] memberlist: message") into slog records at the
// matching level, with the library's name as the "component" attribute.
type logWriter struct {
	logger *slog.Logger
}

// newStdLogger returns a *log.Logger that writes into logger.
func newStdLogger(logger *slog.Logger) *log.Logger {
	return log.New(logWriter{logger: logger}, "", 0)
}

// Write logs each line of p. It never fails.
func (w logWriter) Write(p []byte) (int, error) {
	for line := range bytes.Lines(p) {
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			continue
		}
		level, component, msg := parseLogLine(string(line))
		w.logger.Log(context.Background(), level, msg, "component", component)
	}
	return len(p), nil
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
