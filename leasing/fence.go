package leasing

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/tenurehq/tenure/internal/fsutil"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
)

// Fencing: how a resource keeps a deposed leader from writing.
//
// A lease cannot stop a leader that was paused (GC, swap, a stalled disk, a
// suspended VM) past the end of its lease: it wakes, still believes it leads,
// and writes. Only the resource, which sees every write, can order them. So
// every write carries the writer's fencing token, the epoch of its term
// (TENURE_EPOCH for `tenure run` children), and the resource keeps the highest
// token it has admitted and refuses anything lower (invariant I4 in
// docs/DESIGN.md). Epochs only grow, so a new leader's first write raises the
// fence and every later write of any older leader is refused.

// ErrStaleToken is wrapped by every error that refuses a token because a higher
// one was already admitted. The writer is no longer the leader and must not
// retry with the same token; the resource must leave its data unchanged.
// Use errors.As with *StaleTokenError for the two numbers.
var ErrStaleToken = errors.New("leasing: stale fencing token")

// ErrTooManyKeys is wrapped by the error a keyed fence returns for a new key
// once it holds MaxFenceKeys keys. Keys are never forgotten (forgetting one
// would reset its fence to 0), so the bound is what keeps memory finite.
var ErrTooManyKeys = errors.New("leasing: too many fence keys")

const (
	// MaxFenceKeys bounds the keys of a KeyedFence or DurableKeyedFence.
	// Each key costs a few hundred bytes of memory (and one small file for a
	// durable fence), so the bound caps a keyed fence at about 2 MiB.
	MaxFenceKeys = 4096
	// MaxFenceKeyLen bounds the length of a fence key in bytes.
	MaxFenceKeyLen = 256
)

// StaleTokenError is the error for a refused token. It wraps ErrStaleToken.
type StaleTokenError struct {
	Key     string // the fence key; empty for an unkeyed fence
	Token   uint64 // the token offered
	Highest uint64 // the highest token the fence had admitted
}

// Error says both numbers, e.g.
// "leasing: stale fencing token: 33 < 34 (highest admitted)".
func (e *StaleTokenError) Error() string {
	if e.Key != "" {
		return fmt.Sprintf("%v for key %q: %d < %d (highest admitted)", ErrStaleToken, e.Key, e.Token, e.Highest)
	}
	return fmt.Sprintf("%v: %d < %d (highest admitted)", ErrStaleToken, e.Token, e.Highest)
}

// Unwrap returns ErrStaleToken.
func (e *StaleTokenError) Unwrap() error { return ErrStaleToken }

// admissible is the one test every fence makes: a token is admitted when it
// is at least the highest admitted so far. Equal is admitted, since a leader
// writes many times within its term.
func admissible(key string, token, highest uint64) error {
	if token < highest {
		return &StaleTokenError{Key: key, Token: token, Highest: highest}
	}
	return nil
}

// Fence is the check a resource makes before every write: Admit accepts a
// token greater than or equal to the highest admitted so far, records it, and
// refuses a lower one with an error wrapping ErrStaleToken. An equal token is
// admitted because the same leader writes many times in its term.
//
// The check and the write must be atomic at the resource. Hold one lock of
// the resource across both, "admit then apply under the same lock":
//
//	func (r *Resource) Write(token uint64, v Value) error {
//		r.mu.Lock()
//		defer r.mu.Unlock()
//		if err := r.fence.Admit(token); err != nil {
//			return err // stale: the writer no longer leads; change nothing
//		}
//		return r.apply(v) // still under r.mu
//	}
//
// Without that lock a writer with token 5 can be admitted, stall, and apply
// its write after a writer with token 6 was admitted and applied: every
// Admit passed, yet the data went backwards. The fence's own lock makes each
// call safe but cannot cover the caller's apply. For the same reason Check
// alone never guards a write; it is for rejecting early (before reading a
// large body, say) or for reads.
//
// A Fence lives in memory and a restarted resource forgets it; use
// DurableFence when the resource outlives its process. The zero value is an
// empty fence (highest 0). A Fence is safe for concurrent use and must not be
// copied after first use.
//
// Fencing only orders writers whose epochs differ. In available mode two
// leaders on the two sides of a partition may hold the same epoch, and a
// fence admits both.
type Fence struct {
	mu      sync.Mutex
	highest uint64
}

// Admit records token as the highest admitted if it is not lower than the
// current highest, and returns an error wrapping ErrStaleToken otherwise.
func (f *Fence) Admit(token uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := admissible("", token, f.highest); err != nil {
		return err
	}
	f.highest = token
	return nil
}

// Check makes Admit's test without recording token.
func (f *Fence) Check(token uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return admissible("", token, f.highest)
}

// Highest returns the highest token admitted (0 for a fresh fence).
func (f *Fence) Highest() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.highest
}

// DurableFence is a Fence whose highest token is kept in a file, so a
// restarted resource still refuses the tokens it refused before. Admit of a
// higher token returns nil only once the token is on disk (written to a
// temporary file, fsynced, renamed over the file, directory fsynced); an
// equal or stale token touches no disk. Use it exactly like Fence: admit then
// apply under the resource's lock.
//
// If writing the file fails, Admit returns that error (not ErrStaleToken) and
// the fence is unchanged; the caller must not apply the write. A DurableFence
// is safe for concurrent use within one process; two processes must not open
// the same file.
type DurableFence struct {
	path string
	key  string // written into the file; empty for a standalone fence

	mu      sync.Mutex
	highest uint64
}

// OpenDurableFence reads the fence file at path; its directory must exist. A
// missing file means a fresh fence (highest 0). An unreadable, truncated or
// corrupt file is an error wrapping ErrCorrupt that names the file: the fence
// is never silently reset to 0, which would admit a deposed leader's writes.
func OpenDurableFence(path string) (*DurableFence, error) {
	highest, err := loadFence(path)
	if err != nil {
		return nil, err
	}
	return &DurableFence{path: path, highest: highest}, nil
}

// Path returns the file the fence writes.
func (f *DurableFence) Path() string { return f.path }

// Admit is Fence.Admit, except that a higher token is made durable before
// Admit returns nil.
func (f *DurableFence) Admit(token uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := admissible(f.key, token, f.highest); err != nil {
		return err
	}
	if token == f.highest {
		return nil
	}
	if err := fsutil.WriteFileAtomic(f.path, encodeFence(f.key, token), 0o600); err != nil {
		return fmt.Errorf("leasing: persist fencing token %d: %w", token, err)
	}
	f.highest = token
	return nil
}

// Check makes Admit's test without recording token.
func (f *DurableFence) Check(token uint64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return admissible(f.key, token, f.highest)
}

// Highest returns the highest token admitted, as stored on disk.
func (f *DurableFence) Highest() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.highest
}

// KeyedFence keeps one fence per key, for a resource that serves several
// leadership domains (one per shard, say, each with its own leader and
// epochs). A key names a domain, not a data item: at most MaxFenceKeys keys of
// at most MaxFenceKeyLen bytes, and a key once admitted is never forgotten.
// The same rules as Fence apply: admit then apply under the resource's lock
// (a lock per key is enough when the keys guard disjoint data).
//
// The zero value is empty and ready to use; a KeyedFence is safe for
// concurrent use and must not be copied after first use. It lives in memory;
// see DurableKeyedFence.
type KeyedFence struct {
	mu      sync.Mutex
	highest map[string]uint64
}

// Admit is Fence.Admit for key. A new key starts at 0; it is refused with an
// error wrapping ErrTooManyKeys when the fence already holds MaxFenceKeys.
func (k *KeyedFence) Admit(key string, token uint64) error {
	if err := validFenceKey(key); err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	highest, known := k.highest[key]
	if err := admissible(key, token, highest); err != nil {
		return err
	}
	if !known && len(k.highest) >= MaxFenceKeys {
		return tooManyKeys(key, MaxFenceKeys)
	}
	if k.highest == nil {
		k.highest = make(map[string]uint64)
	}
	k.highest[key] = token
	return nil
}

// Check makes Admit's test for key without recording anything.
func (k *KeyedFence) Check(key string, token uint64) error {
	if err := validFenceKey(key); err != nil {
		return err
	}
	return admissible(key, token, k.Highest(key))
}

// Highest returns the highest token admitted for key (0 for an unknown key).
func (k *KeyedFence) Highest(key string) uint64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.highest[key]
}

// DurableKeyedFence is a KeyedFence kept in a directory, one small file per
// key in the format of DurableFence, named by the SHA-256 of the key (so any
// key is a safe file name) and holding the key itself. A file per key keeps
// each Admit's write small and lets keys be raised in parallel: only Admits
// on the same key wait for each other's fsync.
//
// The directory should belong to the fence alone: files not named like a
// fence file are ignored, and so are leftover temporary files (names starting
// with a dot) from a crash.
type DurableKeyedFence struct {
	dir     string
	maxKeys int // MaxFenceKeys; lowered only by tests

	mu     sync.Mutex
	fences map[string]*DurableFence
}

// OpenDurableKeyedFence loads every fence file in dir, creating dir (mode
// 0700) if it is missing. A corrupt file, or one whose key does not match its
// name, is an error wrapping ErrCorrupt that names the file; more than
// MaxFenceKeys files is an error wrapping ErrTooManyKeys.
func OpenDurableKeyedFence(dir string) (*DurableKeyedFence, error) {
	return openDurableKeyedFence(dir, MaxFenceKeys)
}

func openDurableKeyedFence(dir string, maxKeys int) (*DurableKeyedFence, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("leasing: create fence dir: %w", err)
	}
	names, err := fenceFileNames(dir, maxKeys)
	if err != nil {
		return nil, err
	}
	k := &DurableKeyedFence{dir: dir, maxKeys: maxKeys, fences: make(map[string]*DurableFence, len(names))}
	for _, name := range names {
		if err := k.load(name); err != nil {
			return nil, err
		}
	}
	return k, nil
}

// fenceFileNames lists the fence files in dir, at most maxKeys of them.
func fenceFileNames(dir string, maxKeys int) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("leasing: read fence dir: %w", err)
	}
	var names []string
	for _, e := range entries {
		if e.Type().IsRegular() && isFenceFileName(e.Name()) {
			names = append(names, e.Name())
		}
	}
	if len(names) > maxKeys {
		return nil, fmt.Errorf("%w: %s holds %d fence files, more than %d", ErrTooManyKeys, dir, len(names), maxKeys)
	}
	return names, nil
}

// load adds the fence in the named file, which must hold the key the name
// was derived from.
func (k *DurableKeyedFence) load(name string) error {
	path := filepath.Join(k.dir, name)
	key, highest, found, err := readFenceFile(path)
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("leasing: fence file %s vanished while opening the fence", path)
	}
	if key == "" || fenceFileName(key) != name {
		return corruptFence(path, fmt.Errorf("file holds key %q, which belongs in %s", truncate([]byte(key)), fenceFileName(key)))
	}
	k.fences[key] = &DurableFence{path: path, key: key, highest: highest}
	return nil
}

// Dir returns the directory the fence writes.
func (k *DurableKeyedFence) Dir() string { return k.dir }

// Admit is KeyedFence.Admit, except that a higher token is made durable
// before Admit returns nil (see DurableFence).
func (k *DurableKeyedFence) Admit(key string, token uint64) error {
	if err := validFenceKey(key); err != nil {
		return err
	}
	f, err := k.fence(key)
	if err != nil {
		return err
	}
	return f.Admit(token)
}

// fence returns key's fence, adding an empty one for a new key.
func (k *DurableKeyedFence) fence(key string) (*DurableFence, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if f, ok := k.fences[key]; ok {
		return f, nil
	}
	if len(k.fences) >= k.maxKeys {
		return nil, tooManyKeys(key, k.maxKeys)
	}
	f := &DurableFence{path: filepath.Join(k.dir, fenceFileName(key)), key: key}
	k.fences[key] = f
	return f, nil
}

// Check makes Admit's test for key without recording anything.
func (k *DurableKeyedFence) Check(key string, token uint64) error {
	if err := validFenceKey(key); err != nil {
		return err
	}
	return admissible(key, token, k.Highest(key))
}

// Highest returns the highest token admitted for key (0 for an unknown key).
func (k *DurableKeyedFence) Highest(key string) uint64 {
	k.mu.Lock()
	f := k.fences[key]
	k.mu.Unlock()
	if f == nil {
		return 0
	}
	return f.Highest()
}

func validFenceKey(key string) error {
	if key == "" || len(key) > MaxFenceKeyLen {
		return fmt.Errorf("leasing: invalid fence key %q: want 1 to %d bytes", truncate([]byte(key)), MaxFenceKeyLen)
	}
	return nil
}

func tooManyKeys(key string, limit int) error {
	return fmt.Errorf("%w: cannot add key %q, the fence already holds %d", ErrTooManyKeys, truncate([]byte(key)), limit)
}

const (
	fenceHeader  = "tenure-fence v1"
	fenceFileExt = ".fence"
)

// fenceFileName names key's file in a DurableKeyedFence directory.
func fenceFileName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:]) + fenceFileExt
}

func isFenceFileName(name string) bool {
	hexPart, ok := strings.CutSuffix(name, fenceFileExt)
	if !ok || len(hexPart) != 2*sha256.Size {
		return false
	}
	_, err := hex.DecodeString(hexPart)
	return err == nil
}

// loadFence reads the highest token of the standalone fence at path; a
// missing file is a fresh fence.
func loadFence(path string) (uint64, error) {
	key, highest, _, err := readFenceFile(path)
	if err == nil && key != "" {
		err = corruptFence(path, fmt.Errorf("file belongs to a keyed fence (key %q)", truncate([]byte(key))))
	}
	return highest, err
}

// readFenceFile reads and decodes a fence file; a missing one gives found
// false.
func readFenceFile(path string) (key string, highest uint64, found bool, err error) {
	type fenceFile struct {
		key     string
		highest uint64
	}
	f, found, err := readStateFile(path, "fence", fenceAdvice, func(b []byte) (fenceFile, error) {
		key, highest, err := decodeFence(b)
		return fenceFile{key, highest}, err
	})
	return f.key, f.highest, found, err
}

// fenceAdvice says what to do about a corrupt fence file.
const fenceAdvice = "refusing to open the fence: a fence reset to 0 would admit a deposed leader's writes; restore the file, or remove it only if no fenced write was ever accepted with this data"

func corruptFence(path string, err error) error {
	return fmt.Errorf("%w: %s: %v (%s)", ErrCorrupt, path, err, fenceAdvice)
}

// encodeFence renders a fence file in the checked format (see encodeChecked):
// a header, the key (Go-quoted; empty for a standalone DurableFence), the
// highest token, and a CRC-32, so a torn or edited file is detected rather
// than misread.
func encodeFence(key string, highest uint64) []byte {
	return encodeChecked(fenceHeader, fmt.Appendf(nil, "key %s\nhighest %d\n", strconv.Quote(key), highest))
}

// decodeFence parses what encodeFence wrote and accepts nothing else: every
// file it accepts encodes back to the same bytes.
func decodeFence(data []byte) (key string, highest uint64, err error) {
	body, err := decodeChecked(fenceHeader, data)
	if err != nil {
		return "", 0, err
	}
	lines := strings.Split(string(body), "\n")
	if len(lines) != 3 || lines[2] != "" {
		return "", 0, fmt.Errorf("want a key and a highest line, got %q", truncate(body))
	}
	if key, err = decodeFenceKey(lines[0]); err != nil {
		return "", 0, err
	}
	if highest, err = decodeFenceHighest(lines[1]); err != nil {
		return "", 0, err
	}
	return key, highest, nil
}

func decodeFenceKey(line string) (string, error) {
	quoted, ok := strings.CutPrefix(line, "key ")
	if !ok {
		return "", fmt.Errorf("bad key line %q", truncate([]byte(line)))
	}
	key, err := strconv.Unquote(quoted)
	if err != nil || strconv.Quote(key) != quoted {
		return "", fmt.Errorf("bad key %q", truncate([]byte(quoted)))
	}
	if len(key) > MaxFenceKeyLen {
		return "", fmt.Errorf("key of %d bytes is longer than %d", len(key), MaxFenceKeyLen)
	}
	return key, nil
}

func decodeFenceHighest(line string) (uint64, error) {
	num, ok := strings.CutPrefix(line, "highest ")
	if !ok {
		return 0, fmt.Errorf("bad highest line %q", truncate([]byte(line)))
	}
	highest, err := strconv.ParseUint(num, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bad highest token: %w", err)
	}
	if strconv.FormatUint(highest, 10) != num {
		return 0, fmt.Errorf("non-canonical highest token %q", num)
	}
	return highest, nil
}
