package leasing

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/tenurehq/tenure/internal/fsutil"
	"io"
	"os"
	"sync"
)

// ErrCorrupt marks persisted state that cannot be read back. The agent must
// refuse to start rather than reset it: an epoch silently reset to zero would
// let a later term reuse an epoch that fenced resources already accepted.
var ErrCorrupt = errors.New("leasing: persisted state is corrupt")

// maxStateFile bounds how much of a persisted state file is read.
const maxStateFile = 4 << 10

// The two epoch files a node keeps: the highest epoch it has seen or used,
// and (on a voter) the highest epoch it has granted.
var (
	seenFormat    = epochFormat{header: "tenure-epoch v1", field: "epoch"}
	grantedFormat = epochFormat{header: "tenure-voter v1", field: "granted"}
)

type epochFormat struct{ header, field string }

// EpochStore keeps an epoch that only grows in a small file, replaced
// atomically on every increase. It is safe for concurrent use.
type EpochStore struct {
	path   string
	format epochFormat

	mu    sync.Mutex
	epoch uint64
}

// OpenEpochStore reads the file holding the highest epoch this node has seen
// or used. A missing file means a fresh node (epoch 0); an unreadable,
// truncated or corrupt one is an error that wraps ErrCorrupt and names the
// file.
func OpenEpochStore(path string) (*EpochStore, error) { return openEpochFile(path, seenFormat) }

// OpenGrantStore reads a voter's file holding the highest epoch it has
// granted, with the same rules as OpenEpochStore.
func OpenGrantStore(path string) (*EpochStore, error) { return openEpochFile(path, grantedFormat) }

func openEpochFile(path string, f epochFormat) (*EpochStore, error) {
	epoch, _, err := readStateFile(path, "epoch",
		"refusing to start: an epoch reset would break fencing; restore the file or remove it only if no term was ever led with this data dir",
		f.decode)
	if err != nil {
		return nil, err
	}
	return &EpochStore{path: path, format: f, epoch: epoch}, nil
}

// Path returns the file the store writes.
func (s *EpochStore) Path() string { return s.path }

// Epoch returns the highest stored epoch.
func (s *EpochStore) Epoch() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epoch
}

// Raise durably stores epoch if it is higher than the stored one; it returns
// only once the new value is on disk. A lower or equal epoch is a no-op.
func (s *EpochStore) Raise(epoch uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if epoch <= s.epoch {
		return nil
	}
	if err := fsutil.WriteFileAtomic(s.path, s.format.encode(epoch), 0o600); err != nil {
		return fmt.Errorf("leasing: store epoch %d: %w", epoch, err)
	}
	s.epoch = epoch
	return nil
}

// encode renders the file: a header, the epoch, and a CRC-32 (see
// encodeChecked), so a torn or edited file is detected rather than misread.
func (f epochFormat) encode(epoch uint64) []byte {
	return encodeChecked(f.header, fmt.Appendf(nil, "%s %d\n", f.field, epoch))
}

func (f epochFormat) decode(data []byte) (uint64, error) {
	body, err := decodeChecked(f.header, data)
	if err != nil {
		return 0, err
	}
	return parseUintLine(body, f.field)
}

// readBounded reads at most maxStateFile bytes of path, failing on a larger
// file instead of allocating for it.
func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var buf bytes.Buffer
	n, err := buf.ReadFrom(io.LimitReader(f, maxStateFile+1))
	if err != nil {
		return nil, err
	}
	if n > maxStateFile {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrCorrupt, path, maxStateFile)
	}
	return buf.Bytes(), nil
}

func truncate(b []byte) string {
	if len(b) > 64 {
		return string(b[:64]) + "…"
	}
	return string(b)
}
