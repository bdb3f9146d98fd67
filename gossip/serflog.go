package gossip

import (
	"context"
	"log"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
)

// logWriter turns the messages serf and memberlist print through their
// *log.Logger ("[WARN] memberlist: message") into slog records at the
// matching level, with the library's name as the "component" attribute.
//
// Their messages carry bytes from the network (node names, labels, decode
// errors, addresses), so:
//   - each Write is one record (log.Logger writes each message with one
//     Write): a newline inside a foreign string cannot start a forged line;
//     control characters and invalid UTF-8 are escaped, messages longer
//     than maxLogMessage are cut, and the node name or label after a known
//     prefix is quoted and cut to maxLogWord;
//   - warnings and errors are rate-limited by kind, once per repeatInterval
//     with a count of those left out, and the kind is something sent bytes
//     cannot vary: a known message prefix, or the message's first words up
//     to the first one holding anything but letters (a number, an address,
//     a quote); at most maxLogKinds kinds are tracked, and further kinds
//     share one "other" kind per component.
type logWriter struct {
	logger *slog.Logger
	// watch, if set, sees each message's component and text as the library
	// wrote it, before it is cleaned or left out (see conflictGate).
	watch func(component, msg string)

	mu      sync.Mutex
	repeats map[string]*repeat
}

type repeat struct {
	last       time.Time
	suppressed int
}

const (
	// repeatInterval is how often one kind of warning or error is logged.
	repeatInterval = 30 * time.Second
	// maxLogKinds bounds the kinds tracked at once, and so the warning and
	// error lines logged per repeatInterval.
	maxLogKinds = 64
	// maxKindWords is how many leading words name a kind.
	maxKindWords = 3
	// maxLogWord and maxLogMessage bound what a library message may put in
	// the log, in bytes.
	maxLogWord    = 64
	maxLogMessage = 1024
	// otherKind is the kind of messages with no leading words, or arriving
	// when maxLogKinds kinds are already tracked.
	otherKind = "other"
)

// foreignPrefixes are memberlist and serf messages in which a name chosen by
// the sender (a node name, a label) follows a fixed prefix without quotes,
// where the leading words would take it into the kind. The rest of such a
// message is logged quoted.
var foreignPrefixes = []string{
	"Got ping for unexpected node",              // memberlist: p.Node
	"Rejected node",                             // memberlist: a.Node
	"Rejected IP update from",                   // memberlist: a.Node
	"Push/Pull with",                            // memberlist: node.Name
	"Was able to connect to",                    // memberlist: node.Name
	"discarding packet with unacceptable label", // memberlist: label
	"discarding stream with unacceptable label", // memberlist: label
}

// newStdLogger returns a *log.Logger that writes into logger, showing each
// message to watch first if watch is not nil.
func newStdLogger(logger *slog.Logger, watch func(component, msg string)) *log.Logger {
	return log.New(&logWriter{logger: logger, watch: watch, repeats: map[string]*repeat{}}, "", 0)
}

// Write logs p as one record. It never fails.
func (w *logWriter) Write(p []byte) (int, error) {
	line := strings.TrimRight(string(p), "\r\n")
	if line == "" {
		return len(p), nil
	}
	level, component, msg := parseLogLine(line)
	if w.watch != nil {
		w.watch(component, msg)
	}
	kind, msg := classify(msg)
	if n, ok := w.admit(level, component, kind, time.Now()); ok {
		attrs := []any{"component", component}
		if n > 0 {
			attrs = append(attrs, "similar_suppressed", n)
		}
		w.logger.Log(context.Background(), level, msg, attrs...)
	}
	return len(p), nil
}

// admit rate-limits warnings and errors by kind; it returns how many of
// the kind were left out since the last one logged.
func (w *logWriter) admit(level slog.Level, component, kind string, now time.Time) (int, bool) {
	if level < slog.LevelWarn {
		return 0, true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	r := w.repeatOf(component, kind, now)
	if r == nil {
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

// repeatOf returns the record of kind, or nil after creating it (the first
// of a kind is logged). When maxLogKinds kinds are tracked it forgets those
// last logged an interval ago or more; if none can go, a new kind counts as
// otherKind.
func (w *logWriter) repeatOf(component, kind string, now time.Time) *repeat {
	key := component + "/" + kind
	if r, ok := w.repeats[key]; ok {
		return r
	}
	if len(w.repeats) >= maxLogKinds {
		for k, r := range w.repeats {
			if now.Sub(r.last) >= repeatInterval {
				delete(w.repeats, k)
			}
		}
	}
	if len(w.repeats) >= maxLogKinds && kind != otherKind {
		return w.repeatOf(component, otherKind, now)
	}
	w.repeats[key] = &repeat{last: now}
	return nil
}

// classify returns a library message's kind and the message as it may be
// logged.
func classify(msg string) (kind, clean string) {
	for _, p := range foreignPrefixes {
		if rest, ok := strings.CutPrefix(msg, p); ok {
			return p, p + " " + quoteForeign(strings.TrimSpace(rest))
		}
	}
	return leadingWords(msg), cleanMessage(msg)
}

// leadingWords returns up to maxKindWords words that start msg, stopping
// at the first one holding anything but letters and inner slashes, hyphens
// or apostrophes (a word's own trailing colon, semicolon, comma or period
// ends the kind after it). It returns otherKind if msg starts with no such
// word.
func leadingWords(msg string) string {
	var words []string
	for _, f := range strings.Fields(msg) {
		w := strings.TrimRight(f, ":;,.")
		if !isWord(w) || len(words) == maxKindWords {
			break
		}
		words = append(words, w)
		if len(w) < len(f) {
			break
		}
	}
	if len(words) == 0 {
		return otherKind
	}
	return strings.Join(words, " ")
}

func isWord(w string) bool {
	if w == "" || len(w) > maxLogWord {
		return false
	}
	for i, r := range w {
		inner := i > 0 && i < len(w)-1 && (r == '/' || r == '-' || r == '\'')
		if !inner && (r > unicode.MaxASCII || !unicode.IsLetter(r)) {
			return false
		}
	}
	return true
}

// quoteForeign quotes a string that came from the network, cut to
// maxLogWord bytes, keeping a trailing " from=address" (as memberlist
// appends) outside the quotes.
func quoteForeign(s string) string {
	from := ""
	if i := strings.LastIndex(s, " from="); i >= 0 && !strings.ContainsAny(s[i+1:], " \t") {
		s, from = s[:i], s[i:]
	}
	cut := ""
	if len(s) > maxLogWord {
		i := maxLogWord
		for i > 0 && !utf8.RuneStart(s[i]) {
			i--
		}
		s, cut = s[:i], "…("+strconv.Itoa(len(s)-i)+" bytes cut)"
	}
	return strconv.Quote(s) + cut + cutForeign(from, maxLogWord)
}

// cleanMessage escapes control characters and invalid UTF-8 in msg and
// cuts it to maxLogMessage.
func cleanMessage(msg string) string {
	return cutForeign(msg, maxLogMessage)
}

// cutForeign escapes control characters and invalid UTF-8 in s and cuts it
// to about limit bytes, saying how many were left out.
func cutForeign(s string, limit int) string {
	var b strings.Builder
	for i, r := range s {
		if b.Len() >= limit {
			b.WriteString("…(" + strconv.Itoa(len(s)-i) + " bytes cut)")
			break
		}
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			b.WriteString(`\x` + strconv.FormatUint(uint64(s[i]), 16)) // s[i] >= 0x80
		case !unicode.IsPrint(r):
			b.WriteString(strings.Trim(strconv.QuoteRune(r), "'"))
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// quietSerf are the starts of serf's info messages logged at debug:
//   - "EventMemberJoin: n2 10.0.0.2": the agent logs each membership event
//     itself; twice per member and per agent was a good part of the log
//     while a fleet started;
//   - "attempting reconnect to n2 10.0.0.2:7946": serf tries a failed
//     member every ReconnectInterval (5 s with the LAN profile, 0.5 s with
//     the local one) until it is reaped, a day later; `tenure members`
//     shows the member failed.
var quietSerf = []string{"EventMember", "attempting reconnect to"}

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
			if c == "serf" && level == slog.LevelInfo && slices.ContainsFunc(quietSerf, func(p string) bool { return strings.HasPrefix(msg, p) }) {
				level = slog.LevelDebug
			}
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
