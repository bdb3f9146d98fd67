package leasing

import (
	"bytes"
	"fmt"
	"sync"
	"time"

	"github.com/tenurehq/tenure/internal/fsutil"
)

// The voter file's formats: v1 held only the highest grant; v2 adds the
// longest TTL the voter ever promised, which its restart hold must cover.
var voterFormatV2 = "tenure-voter v2"

// VoterStore keeps a voter's durable state in one small file, replaced
// atomically whenever it grows: the highest epoch the voter has granted and
// the longest TTL it has promised. It is safe for concurrent use and
// implements GrantStore.
type VoterStore struct {
	path string

	mu sync.Mutex
	st voterState
}

// voterState is what the voter file holds.
type voterState struct {
	epoch   uint64        // the highest epoch granted
	longest time.Duration // the longest TTL promised
}

// OpenVoterStore reads a voter's file. A missing file means a voter that
// never granted; a file written by an older version (v1) has no TTL, which
// reads as zero; an unreadable or corrupt one is an error wrapping
// ErrCorrupt that names the file.
func OpenVoterStore(path string) (*VoterStore, error) {
	st, _, err := readStateFile(path, "voter",
		"refusing to start: this voter's grants would be forgotten; restore the file, or remove the whole data dir to rejoin as a voter that lost its disk",
		decodeVoter)
	if err != nil {
		return nil, err
	}
	return &VoterStore{path: path, st: st}, nil
}

// Path returns the file the store writes.
func (s *VoterStore) Path() string { return s.path }

// Epoch returns the highest epoch granted.
func (s *VoterStore) Epoch() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.epoch
}

// LongestTTL returns the longest TTL promised.
func (s *VoterStore) LongestTTL() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.longest
}

// Raise durably stores epoch if it is higher than the stored one.
func (s *VoterStore) Raise(epoch uint64) error { return s.Record(epoch, 0) }

// Record durably stores epoch and ttl where they exceed the stored values;
// it returns only once they are on disk. Nothing lower is ever stored.
func (s *VoterStore) Record(epoch uint64, ttl time.Duration) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if epoch <= s.st.epoch && ttl <= s.st.longest {
		return nil
	}
	next := voterState{epoch: max(s.st.epoch, epoch), longest: max(s.st.longest, ttl)}
	if err := fsutil.WriteFileAtomic(s.path, encodeVoter(next), 0o600); err != nil {
		return fmt.Errorf("leasing: store voter state (epoch %d, ttl %v): %w", next.epoch, next.longest, err)
	}
	s.st = next
	return nil
}

// encodeVoter renders the file; the TTL is rounded up to a whole
// millisecond, so the hold it sets is never shorter than a promise.
func encodeVoter(st voterState) []byte {
	ms := (st.longest + time.Millisecond - 1) / time.Millisecond
	return encodeChecked(voterFormatV2, fmt.Appendf(nil, "granted %d\nmax_ttl_ms %d\n", st.epoch, ms))
}

func decodeVoter(data []byte) (voterState, error) {
	if bytes.HasPrefix(data, []byte(grantedFormat.header+"\n")) {
		e, err := grantedFormat.decode(data)
		return voterState{epoch: e}, err
	}
	body, err := decodeChecked(voterFormatV2, data)
	if err != nil {
		return voterState{}, err
	}
	first, rest, ok := bytes.Cut(body, []byte("\n"))
	if !ok {
		return voterState{}, fmt.Errorf("truncated voter state %q", truncate(body))
	}
	e, err := parseUintLine(append(first, '\n'), "granted")
	if err != nil {
		return voterState{}, err
	}
	ms, err := parseUintLine(rest, "max_ttl_ms")
	if err != nil {
		return voterState{}, err
	}
	if ms > uint64(maxRecordedTTL.Milliseconds()) {
		return voterState{}, fmt.Errorf("max_ttl_ms %d is beyond any lease TTL", ms)
	}
	return voterState{epoch: e, longest: time.Duration(ms) * time.Millisecond}, nil
}

// maxRecordedTTL bounds a TTL read back from disk.
const maxRecordedTTL = 24 * time.Hour
