// Package store is a small key-value store behind HTTP that refuses writes
// from deposed leaders: the resource side of fencing (invariant I4 in
// docs/DESIGN.md).
//
// Every PUT carries the writer's fencing token (its leadership epoch, which
// `tenure run` passes to its child as TENURE_EPOCH) in the Fencing-Token
// header. The store keeps one leasing.DurableFence for all its keys: a write
// whose token is lower than the highest the store has accepted gets 409
// Conflict and changes nothing, even when its writer still believes it leads
// (a leader paused past the end of its lease, say). The fence survives
// restarts, so a restarted store still refuses old tokens.
//
// One fence for the whole store means one leadership domain: the store
// follows a single leader, and a write of any key raises the fence for all.
// Opened with PerKey (Open), the store keeps a leasing.DurableKeyedFence
// instead, one fence per key: a write to key K is refused only if its token
// is lower than the highest accepted for K. That is the mode for writers
// whose tokens are comparable only per key, such as the partitions of a
// tenure group (TENURE_PARTITIONS gives each partition its own token).
// The fence check and the write happen under one lock of the store (admit
// then apply under the same lock), so a write admitted with an older token
// can never land after one with a newer token; that lock also serialises
// writes, fsyncs included, which is plenty for an example.
//
// The HTTP API:
//
//	PUT /kv/{key}   body = value, header Fencing-Token: N
//	                200 stored, 400 bad key or token, 409 stale token,
//	                413 value over MaxValueSize
//	GET /kv/{key}   200 with the value and header Fencing-Token (the token
//	                of the write that stored it), 404 when absent
//	GET /fence      200 with the highest token accepted, as text; with
//	                PerKey, one line "KEY TOKEN" per key holding a value,
//	                sorted by key
//	GET /fence/{key} 200 with the lowest token a write to key is admitted
//	                with: the highest accepted for key (PerKey) or for all
//
// On disk the data directory holds the fence file "fence" (PerKey: one
// fence file per key under "fences/") and one file per key under "kv/",
// each replaced atomically (temporary file, fsync, rename, fsync of the
// directory) and checksummed.
package store

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/tenurehq/tenure/internal/broken"
	"github.com/tenurehq/tenure/internal/fsutil"
	"github.com/tenurehq/tenure/leasing"
)

// TokenHeader is the HTTP header that carries a fencing token: on a PUT the
// writer's, on a GET the token of the write that stored the value.
const TokenHeader = "Fencing-Token"

// errClosed is returned by writes after Close.
var errClosed = errors.New("store: closed")

// FenceMode says which writes a token is compared with.
type FenceMode int

const (
	// OneFence keeps one fence for all keys: a write is refused when its
	// token is lower than the highest accepted for any key. The default.
	OneFence FenceMode = iota
	// PerKey keeps one fence per key: a write to key K is refused only when
	// its token is lower than the highest accepted for K.
	PerKey
)

// String returns the mode's name as ParseFenceMode reads it.
func (m FenceMode) String() string {
	switch m {
	case OneFence:
		return "one"
	case PerKey:
		return "per-key"
	default:
		return "FenceMode(" + strconv.Itoa(int(m)) + ")"
	}
}

// ParseFenceMode reads a mode's name: "one" or "per-key".
func ParseFenceMode(name string) (FenceMode, error) {
	for _, m := range []FenceMode{OneFence, PerKey} {
		if name == m.String() {
			return m, nil
		}
	}
	return 0, fmt.Errorf("store: unknown fence mode %q: want one or per-key", name)
}

// fencer is the fence of a Store in either mode.
type fencer interface {
	Check(key string, token uint64) error
	Admit(key string, token uint64) error
	Highest(key string) uint64
}

// oneFence is the OneFence mode's fencer: every key shares one fence.
type oneFence struct{ f *leasing.DurableFence }

func (o oneFence) Check(_ string, token uint64) error { return o.f.Check(token) }
func (o oneFence) Admit(_ string, token uint64) error { return o.f.Admit(token) }
func (o oneFence) Highest(string) uint64              { return o.f.Highest() }

// Store is the key-value store. Its methods are safe for concurrent use.
type Store struct {
	kvDir  string
	mode   FenceMode
	logger *slog.Logger

	mu     sync.Mutex // held across fence admission and the value write
	fence  fencer
	closed bool
}

// New opens the store in dataDir with one fence for all keys (OneFence);
// see Open.
func New(dataDir string, logger *slog.Logger) (*Store, error) {
	return Open(dataDir, OneFence, logger)
}

// Open opens the store in dataDir with the given fence mode, creating the
// directory (mode 0700) if needed. A corrupt fence file is an error wrapping
// leasing.ErrCorrupt: the store refuses to start rather than forget which
// tokens it has accepted. So is a data directory written in the other
// mode: its fences would not be read, and every old writer let back in. A
// nil logger discards logs.
func Open(dataDir string, mode FenceMode, logger *slog.Logger) (*Store, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	kvDir := filepath.Join(dataDir, "kv")
	if err := os.MkdirAll(kvDir, 0o700); err != nil {
		return nil, fmt.Errorf("store: create data dir: %w", err)
	}
	oneFile, keyedDir := filepath.Join(dataDir, "fence"), filepath.Join(dataDir, "fences")
	s := &Store{kvDir: kvDir, mode: mode, logger: logger}
	switch mode {
	case OneFence:
		if err := refuseOther(keyedDir, "per-key"); err != nil {
			return nil, err
		}
		f, err := leasing.OpenDurableFence(oneFile)
		if err != nil {
			return nil, fmt.Errorf("store: open fence: %w", err)
		}
		s.fence = oneFence{f}
		logger.Info("store open", "data_dir", dataDir, "fence", mode.String(), "highest_token", f.Highest())
	case PerKey:
		if err := refuseOther(oneFile, "one"); err != nil {
			return nil, err
		}
		f, err := leasing.OpenDurableKeyedFence(keyedDir)
		if err != nil {
			return nil, fmt.Errorf("store: open per-key fences: %w", err)
		}
		s.fence = f
		logger.Info("store open", "data_dir", dataDir, "fence", mode.String())
	default:
		return nil, fmt.Errorf("store: open %s: unknown fence mode %d", dataDir, mode)
	}
	return s, nil
}

// refuseOther fails when path, the fence of the other mode, exists.
func refuseOther(path, mode string) error {
	_, err := os.Stat(path)
	switch {
	case err == nil:
		return fmt.Errorf("store: %w: %s exists, so this data directory was written with --fence %s; open it in that mode (its fences are not read in this one)", leasing.ErrCorrupt, path, mode)
	case errors.Is(err, fs.ErrNotExist):
		return nil
	default:
		return fmt.Errorf("store: check for %s: %w", path, err)
	}
}

// Mode returns the store's fence mode.
func (s *Store) Mode() FenceMode { return s.mode }

// Close stops the store accepting writes; later PUTs get 503. It does not
// wait for requests in flight: shut the HTTP server down first. Close is
// idempotent and always returns nil.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// Highest returns the highest fencing token the store has accepted: with
// PerKey, the highest over the keys that hold a value (0 if it cannot
// list them).
func (s *Store) Highest() uint64 {
	if s.mode == OneFence {
		return s.fence.Highest("")
	}
	fences, _ := s.Fences()
	var highest uint64
	for _, token := range fences {
		highest = max(highest, token)
	}
	return highest
}

// HighestFor returns the highest fencing token accepted for key: the
// lowest a write to key is admitted with. With OneFence it is Highest.
func (s *Store) HighestFor(key string) uint64 { return s.fence.Highest(key) }

// Fences returns, for every key that holds a value, the highest fencing
// token accepted for it (HighestFor).
func (s *Store) Fences() (map[string]uint64, error) {
	entries, err := os.ReadDir(s.kvDir)
	if err != nil {
		return nil, fmt.Errorf("store: list keys: %w", err)
	}
	fences := make(map[string]uint64, len(entries))
	for _, e := range entries {
		if e.Type().IsRegular() && checkKey(e.Name()) == nil {
			fences[e.Name()] = s.fence.Highest(e.Name())
		}
	}
	return fences, nil
}

// Handler returns the HTTP API described in the package documentation.
func (s *Store) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /kv/{key}", s.handlePut)
	mux.HandleFunc("GET /kv/{key}", s.handleGet)
	mux.HandleFunc("GET /fence", s.handleFence)
	mux.HandleFunc("GET /fence/{key}", s.handleKeyFence)
	return mux
}

// put admits token and stores value under key, both under s.mu: the check
// and the write must be one atomic step, or a write admitted with an older
// token could land after a newer one.
func (s *Store) put(key string, token uint64, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	if err := s.fence.Admit(key, token); err != nil && !broken.Is(broken.StoreNoFence) {
		return err
	}
	if err := fsutil.WriteFileAtomic(filepath.Join(s.kvDir, key), encodeValue(token, value), 0o600); err != nil {
		return fmt.Errorf("store: write %q: %w", key, err)
	}
	return nil
}

// get returns key's value and the token that stored it.
func (s *Store) get(key string) (uint64, []byte, error) {
	return readValueFile(filepath.Join(s.kvDir, key))
}

func (s *Store) handlePut(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	token, err := parseTokenHeader(r.Header)
	if err == nil {
		err = checkKey(key)
	}
	if err != nil {
		s.reply(w, r, http.StatusBadRequest, err.Error())
		return
	}
	if err := s.fence.Check(key, token); err != nil && !broken.Is(broken.StoreNoFence) { // refuse early, before reading the body
		s.refuse(w, r, key, err)
		return
	}
	value, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxValueSize))
	if err != nil {
		s.badBody(w, r, err)
		return
	}
	if err := s.put(key, token, value); err != nil {
		s.refuse(w, r, key, err)
		return
	}
	s.logger.Info("stored", "key", key, "token", token, "bytes", len(value))
	s.reply(w, r, http.StatusOK, fmt.Sprintf("stored %d bytes at key %q with fencing token %d", len(value), key, token))
}

// parseTokenHeader reads the one Fencing-Token header of a request.
func parseTokenHeader(h http.Header) (uint64, error) {
	values := h.Values(TokenHeader)
	switch len(values) {
	case 0:
		return 0, fmt.Errorf("missing %s header: every write must carry the writer's fencing token (its leadership epoch, e.g. $TENURE_EPOCH)", TokenHeader)
	case 1:
	default:
		return 0, fmt.Errorf("%d %s headers: send exactly one", len(values), TokenHeader)
	}
	token, err := strconv.ParseUint(values[0], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid %s header %q: want a decimal integer from 0 to 18446744073709551615", TokenHeader, values[0])
	}
	return token, nil
}

// refuse answers a write that was not applied.
func (s *Store) refuse(w http.ResponseWriter, r *http.Request, key string, err error) {
	var stale *leasing.StaleTokenError
	switch {
	case errors.As(err, &stale) && stale.Key != "":
		s.logger.Warn("refused stale write", "key", key, "token", stale.Token, "highest", stale.Highest)
		s.reply(w, r, http.StatusConflict, fmt.Sprintf(
			"stale fencing token %d for key %q: this store has already accepted token %d for that key; the writer no longer holds it",
			stale.Token, key, stale.Highest))
	case errors.As(err, &stale):
		s.logger.Warn("refused stale write", "key", key, "token", stale.Token, "highest", stale.Highest)
		s.reply(w, r, http.StatusConflict, fmt.Sprintf(
			"stale fencing token %d: this store has already accepted token %d; the writer is no longer the leader",
			stale.Token, stale.Highest))
	case errors.Is(err, leasing.ErrTooManyKeys):
		s.logger.Error("refused a write to a new key", "key", key, "err", err)
		s.reply(w, r, http.StatusInsufficientStorage, fmt.Sprintf("too many keys: the per-key fence holds at most %d", leasing.MaxFenceKeys))
	case errors.Is(err, errClosed):
		s.reply(w, r, http.StatusServiceUnavailable, "store is shutting down")
	default:
		s.logger.Error("write failed", "key", key, "err", err)
		s.reply(w, r, http.StatusInternalServerError, "write failed; see the store's log")
	}
}

func (s *Store) badBody(w http.ResponseWriter, r *http.Request, err error) {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		s.reply(w, r, http.StatusRequestEntityTooLarge, fmt.Sprintf("value too large: the limit is %d bytes", MaxValueSize))
		return
	}
	s.reply(w, r, http.StatusBadRequest, "reading the request body: "+err.Error())
}

func (s *Store) handleGet(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	if err := checkKey(key); err != nil {
		s.reply(w, r, http.StatusBadRequest, err.Error())
		return
	}
	token, value, err := s.get(key)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		s.reply(w, r, http.StatusNotFound, fmt.Sprintf("no value for key %q", key))
	case err != nil:
		s.logger.Error("read failed", "key", key, "err", err)
		s.reply(w, r, http.StatusInternalServerError, "read failed; see the store's log")
	default:
		w.Header().Set(TokenHeader, strconv.FormatUint(token, 10))
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.Itoa(len(value)))
		_, _ = w.Write(value)
	}
}

func (s *Store) handleFence(w http.ResponseWriter, r *http.Request) {
	if s.mode == OneFence {
		highest := strconv.FormatUint(s.fence.Highest(""), 10)
		w.Header().Set(TokenHeader, highest)
		s.reply(w, r, http.StatusOK, highest)
		return
	}
	fences, err := s.Fences()
	if err != nil {
		s.logger.Error("listing the fences failed", "err", err)
		s.reply(w, r, http.StatusInternalServerError, "listing the fences failed; see the store's log")
		return
	}
	keys := slices.Sorted(maps.Keys(fences))
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s %d\n", k, fences[k])
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = io.WriteString(w, b.String())
}

// handleKeyFence answers GET /fence/{key}: the highest token accepted for
// key (for all keys with OneFence).
func (s *Store) handleKeyFence(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	if err := checkKey(key); err != nil {
		s.reply(w, r, http.StatusBadRequest, err.Error())
		return
	}
	highest := strconv.FormatUint(s.fence.Highest(key), 10)
	w.Header().Set(TokenHeader, highest)
	s.reply(w, r, http.StatusOK, highest)
}

// reply writes a one-line plain-text answer.
func (s *Store) reply(w http.ResponseWriter, r *http.Request, code int, msg string) {
	if code >= 400 && code != http.StatusConflict {
		s.logger.Debug("request refused", "method", r.Method, "path", r.URL.Path, "code", code, "reason", msg)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, msg+"\n")
}
