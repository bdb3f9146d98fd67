package leasing

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
)

// ErrCorrupt marks persisted state that cannot be read back. The agent must
// refuse to start rather than reset it: an epoch silently reset to zero would
// let a later term reuse an epoch that fenced resources already accepted.
var ErrCorrupt = errors.New("leasing: persisted state is corrupt")

// maxStateFile bounds how much of a persisted state file is read.
const maxStateFile = 4 << 10

const epochHeader = "tenure-epoch v1"

// EpochStore keeps the highest epoch a node has seen or used in a small file,
// replaced atomically on every increase. It is safe for concurrent use.
type EpochStore struct {
	path string

	mu    sync.Mutex
	epoch uint64
}

// OpenEpochStore reads the epoch file at path. A missing file means a fresh
// node (epoch 0); an unreadable, truncated or corrupt one is an error that
// wraps ErrCorrupt and names the file.
func OpenEpochStore(path string) (*EpochStore, error) {
	s := &EpochStore{path: path}
	data, err := readBounded(path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("leasing: read epoch file: %w", err)
	}
	s.epoch, err = decodeEpoch(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v (refusing to start: an epoch reset would break fencing; restore the file or remove it only if no term was ever led with this data dir)", ErrCorrupt, path, err)
	}
	return s, nil
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
	if err := writeFileAtomic(s.path, encodeEpoch(epoch), 0o600); err != nil {
		return fmt.Errorf("leasing: store epoch %d: %w", epoch, err)
	}
	s.epoch = epoch
	return nil
}

// encodeEpoch renders the file: a header, the epoch, and a CRC-32 of both
// lines, so a torn or edited file is detected rather than misread.
func encodeEpoch(epoch uint64) []byte {
	body := fmt.Sprintf("%s\nepoch %d\n", epochHeader, epoch)
	return fmt.Appendf(nil, "%scrc32 %08x\n", body, crc32.ChecksumIEEE([]byte(body)))
}

func decodeEpoch(data []byte) (uint64, error) {
	lines := strings.Split(string(data), "\n")
	if len(lines) != 4 || lines[3] != "" {
		return 0, fmt.Errorf("want 3 lines, got %q", truncate(data))
	}
	if lines[0] != epochHeader {
		return 0, fmt.Errorf("bad header %q", truncate([]byte(lines[0])))
	}
	body := lines[0] + "\n" + lines[1] + "\n"
	if want := fmt.Sprintf("crc32 %08x", crc32.ChecksumIEEE([]byte(body))); lines[2] != want {
		return 0, fmt.Errorf("checksum mismatch: file says %q, content gives %q", truncate([]byte(lines[2])), want)
	}
	num, ok := strings.CutPrefix(lines[1], "epoch ")
	if !ok {
		return 0, fmt.Errorf("bad epoch line %q", truncate([]byte(lines[1])))
	}
	epoch, err := strconv.ParseUint(num, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bad epoch: %w", err)
	}
	return epoch, nil
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
