package leasing

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestEpochStoreRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "epoch")
	s, err := OpenEpochStore(path)
	if err != nil {
		t.Fatal(err)
	}
	if s.Epoch() != 0 {
		t.Fatalf("fresh epoch = %d, want 0", s.Epoch())
	}
	for _, e := range []uint64{3, 2, 7, 7} {
		if err := s.Raise(e); err != nil {
			t.Fatal(err)
		}
	}
	s2, err := OpenEpochStore(path)
	if err != nil {
		t.Fatal(err)
	}
	if s2.Epoch() != 7 {
		t.Fatalf("reloaded epoch = %d, want 7 (raises only go up)", s2.Epoch())
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("data dir holds %d entries, want only the epoch file", len(entries))
	}
}

func TestEpochStoreRefusesCorruptFile(t *testing.T) {
	good := string(seenFormat.encode(42))
	cases := map[string]string{
		"empty":        "",
		"truncated":    good[:len(good)-5],
		"flipped":      strings.Replace(good, "42", "43", 1),
		"garbage":      "\x00\xff\xfe",
		"extra line":   good + "x\n",
		"wrong header": strings.Replace(good, "v1", "v9", 1),
		"huge":         strings.Repeat("x", maxStateFile+10),
	}
	for name, content := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "epoch")
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := OpenEpochStore(path)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) {
				t.Fatalf("open = %v, want ErrCorrupt naming %s", err, path)
			}
		})
	}
}

func FuzzDecodeEpoch(f *testing.F) {
	f.Add(seenFormat.encode(0))
	f.Add(seenFormat.encode(1<<64 - 1))
	f.Add([]byte("tenure-epoch v1\nepoch 5\ncrc32 00000000\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := seenFormat.decode(data)
		if err == nil && string(seenFormat.encode(e)) != string(data) {
			t.Fatalf("accepted non-canonical file %q as epoch %d", data, e)
		}
	})
}

// TestVoterStoreRoundTripAndUpgrade: the voter file keeps the highest grant
// and the longest TTL, never lowers either, and reads a v1 file (grant
// only) as having no recorded TTL.
func TestVoterStoreRoundTripAndUpgrade(t *testing.T) {
	path := filepath.Join(t.TempDir(), "voter")
	v1, err := OpenGrantStore(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := v1.Raise(7); err != nil {
		t.Fatal(err)
	}
	s, err := OpenVoterStore(path)
	if err != nil {
		t.Fatal(err)
	}
	if s.Epoch() != 7 || s.LongestTTL() != 0 {
		t.Fatalf("v1 file read as epoch %d ttl %v, want 7 and 0", s.Epoch(), s.LongestTTL())
	}
	for _, rec := range []struct {
		e   uint64
		ttl time.Duration
	}{{8, 1500 * time.Microsecond}, {3, time.Second}, {2, 0}} {
		if err := s.Record(rec.e, rec.ttl); err != nil {
			t.Fatal(err)
		}
	}
	again, err := OpenVoterStore(path)
	if err != nil {
		t.Fatal(err)
	}
	if again.Epoch() != 8 || again.LongestTTL() != time.Second {
		t.Fatalf("read back epoch %d ttl %v, want 8 and 1s", again.Epoch(), again.LongestTTL())
	}
}

// FuzzDecodeVoter: the voter file decoder accepts only what encodeVoter
// writes (v2) or a canonical v1 file, and never a TTL beyond any lease.
func FuzzDecodeVoter(f *testing.F) {
	f.Add(encodeVoter(voterState{epoch: 3, longest: 10 * time.Second}))
	f.Add(grantedFormat.encode(9))
	f.Add([]byte("tenure-voter v2\ngranted 1\nmax_ttl_ms 5\ncrc32 00000000\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := decodeVoter(data)
		if err != nil {
			return
		}
		v1 := string(grantedFormat.encode(st.epoch)) == string(data)
		if !v1 && string(encodeVoter(st)) != string(data) {
			t.Fatalf("accepted non-canonical file %q as %+v", data, st)
		}
		if st.longest > maxRecordedTTL {
			t.Fatalf("accepted a TTL of %v", st.longest)
		}
	})
}
