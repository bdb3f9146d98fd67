package leasing

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"pgregory.net/rapid"
)

// fencer is what every fence offers once a keyed fence is bound to one key.
type fencer interface {
	Admit(token uint64) error
	Check(token uint64) error
	Highest() uint64
}

type keyedFencer interface {
	Admit(key string, token uint64) error
	Check(key string, token uint64) error
	Highest(key string) uint64
}

// oneKey binds a keyed fence to one key.
type oneKey struct {
	k   keyedFencer
	key string
}

func (o oneKey) Admit(token uint64) error { return o.k.Admit(o.key, token) }
func (o oneKey) Check(token uint64) error { return o.k.Check(o.key, token) }
func (o oneKey) Highest() uint64          { return o.k.Highest(o.key) }

// fenceKind makes one kind of fence. open is called with the same dir to
// simulate a restart; an in-memory kind returns a fresh fence every time.
type fenceKind struct {
	name    string
	durable bool
	open    func(dir string) (fencer, error)
}

var fenceKinds = []fenceKind{
	{"Fence", false, func(string) (fencer, error) { return &Fence{}, nil }},
	{"KeyedFence", false, func(string) (fencer, error) { return oneKey{&KeyedFence{}, "shard/1"}, nil }},
	{"DurableFence", true, func(dir string) (fencer, error) {
		return OpenDurableFence(filepath.Join(dir, "fence"))
	}},
	{"DurableKeyedFence", true, func(dir string) (fencer, error) {
		k, err := OpenDurableKeyedFence(filepath.Join(dir, "fences"))
		if err != nil {
			return nil, err
		}
		return oneKey{k, "shard/1"}, nil
	}},
}

// failer is what the helpers need of a *testing.T or a *rapid.T.
type failer interface {
	Helper()
	Fatalf(format string, args ...any)
}

func mustOpen(t failer, kind fenceKind, dir string) fencer {
	t.Helper()
	f, err := kind.open(dir)
	if err != nil {
		t.Fatalf("open %s: %v", kind.name, err)
	}
	return f
}

// wantStale fails unless err refuses token because highest was admitted.
func wantStale(t failer, err error, token, highest uint64) {
	t.Helper()
	var se *StaleTokenError
	if !errors.Is(err, ErrStaleToken) || !errors.As(err, &se) {
		t.Fatalf("err = %v, want a *StaleTokenError wrapping ErrStaleToken", err)
	}
	if se.Token != token || se.Highest != highest {
		t.Fatalf("err = %v, want token %d refused below highest %d", err, token, highest)
	}
	if want := fmt.Sprintf(": %d < %d (highest admitted)", token, highest); !strings.HasSuffix(err.Error(), want) {
		t.Fatalf("err = %q, want it to end with %q", err, want)
	}
}

func TestFenceAdmitCheckHighest(t *testing.T) {
	for _, kind := range fenceKinds {
		t.Run(kind.name, func(t *testing.T) {
			f := mustOpen(t, kind, t.TempDir())
			steps := []struct {
				op      string
				token   uint64
				stale   bool
				highest uint64
			}{
				{"admit", 0, false, 0}, // a fresh fence admits anything
				{"admit", 34, false, 34},
				{"admit", 34, false, 34}, // equal: the same leader writes again
				{"check", 35, false, 34}, // check records nothing
				{"check", 33, true, 34},
				{"admit", 33, true, 34},
				{"admit", 0, true, 34},
				{"admit", 1<<64 - 1, false, 1<<64 - 1},
				{"admit", 1<<64 - 2, true, 1<<64 - 1},
			}
			for i, s := range steps {
				var err error
				if s.op == "admit" {
					err = f.Admit(s.token)
				} else {
					err = f.Check(s.token)
				}
				if s.stale {
					wantStale(t, err, s.token, s.highest)
				} else if err != nil {
					t.Fatalf("step %d: %s(%d) = %v, want nil", i, s.op, s.token, err)
				}
				if got := f.Highest(); got != s.highest {
					t.Fatalf("step %d: Highest() = %d after %s(%d), want %d", i, got, s.op, s.token, s.highest)
				}
			}
		})
	}
}

func TestStaleTokenErrorMessage(t *testing.T) {
	var f Fence
	_ = f.Admit(34)
	if err := f.Admit(33); err == nil || err.Error() != "leasing: stale fencing token: 33 < 34 (highest admitted)" {
		t.Fatalf("err = %v", err)
	}
	var k KeyedFence
	_ = k.Admit("shard-a", 34)
	if err := k.Admit("shard-a", 33); err == nil || err.Error() != `leasing: stale fencing token for key "shard-a": 33 < 34 (highest admitted)` {
		t.Fatalf("err = %v", err)
	}
}

// admission is one Admit as the resource saw it, under its lock.
type admission struct {
	token uint64
	err   error
}

// TestFenceConcurrentWritersProperty runs writers with random tokens against
// a resource that admits then applies under its lock, and checks the
// resulting order: no token lower than an earlier admitted one was admitted,
// and every refusal was of a token below the highest admitted at that time.
func TestFenceConcurrentWritersProperty(t *testing.T) {
	for _, kind := range fenceKinds {
		t.Run(kind.name, func(t *testing.T) {
			base := t.TempDir()
			rapid.Check(t, func(rt *rapid.T) {
				writers := drawWriters(rt)
				dir, err := os.MkdirTemp(base, "")
				if err != nil {
					rt.Fatal(err)
				}
				f := mustOpen(rt, kind, dir)
				log := runLockedWriters(f, writers)
				highest := checkAdmissionOrder(rt, log)
				checkReopen(rt, kind, dir, f, highest)
			})
		})
	}
}

// drawWriters draws 1-8 writers with 1-20 tokens each, from a small range so
// that equal and stale tokens are common.
func drawWriters(rt *rapid.T) [][]uint64 {
	n := rapid.IntRange(1, 8).Draw(rt, "writers")
	writers := make([][]uint64, n)
	for i := range writers {
		writers[i] = rapid.SliceOfN(rapid.Uint64Range(0, 30), 1, 20).Draw(rt, fmt.Sprintf("tokens%d", i))
	}
	return writers
}

// runLockedWriters runs each writer in its own goroutine; each write is
// admitted and logged under one resource lock, the pattern Fence documents.
func runLockedWriters(f fencer, writers [][]uint64) []admission {
	var (
		mu  sync.Mutex
		log []admission
		wg  sync.WaitGroup
	)
	for _, tokens := range writers {
		wg.Go(func() {
			for _, tok := range tokens {
				mu.Lock()
				log = append(log, admission{tok, f.Admit(tok)})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return log
}

// checkAdmissionOrder checks the invariant over the log and returns the
// highest token admitted.
func checkAdmissionOrder(rt *rapid.T, log []admission) uint64 {
	var highest uint64
	for i, a := range log {
		if a.err == nil {
			if a.token < highest {
				rt.Fatalf("admission %d: token %d admitted after %d was", i, a.token, highest)
			}
			highest = a.token
			continue
		}
		var se *StaleTokenError
		if !errors.Is(a.err, ErrStaleToken) || !errors.As(a.err, &se) {
			rt.Fatalf("admission %d: token %d refused with %v, want ErrStaleToken", i, a.token, a.err)
		}
		if a.token >= highest || se.Token != a.token || se.Highest != highest {
			rt.Fatalf("admission %d: token %d refused with %v while the highest admitted was %d", i, a.token, a.err, highest)
		}
	}
	return highest
}

// checkReopen checks the fence's final state and, for a durable fence, that
// a restarted one still refuses what the first refused.
func checkReopen(rt *rapid.T, kind fenceKind, dir string, f fencer, highest uint64) {
	if got := f.Highest(); got != highest {
		rt.Fatalf("Highest() = %d, want %d", got, highest)
	}
	if !kind.durable {
		return
	}
	g := mustOpen(rt, kind, dir)
	if got := g.Highest(); got != highest {
		rt.Fatalf("after restart Highest() = %d, want %d", got, highest)
	}
	if highest > 0 {
		wantStale(rt, g.Admit(highest-1), highest-1, highest)
	}
}

// TestFenceConcurrentAdmitProperty calls Admit from many goroutines with no
// lock of the caller's: each call must still be atomic.
func TestFenceConcurrentAdmitProperty(t *testing.T) {
	for _, kind := range fenceKinds {
		t.Run(kind.name, func(t *testing.T) {
			base := t.TempDir()
			rapid.Check(t, func(rt *rapid.T) {
				writers := drawWriters(rt)
				dir, err := os.MkdirTemp(base, "")
				if err != nil {
					rt.Fatal(err)
				}
				f := mustOpen(rt, kind, dir)
				results := make([][]admission, len(writers))
				var wg sync.WaitGroup
				for i, tokens := range writers {
					wg.Go(func() {
						for _, tok := range tokens {
							results[i] = append(results[i], admission{tok, f.Admit(tok)})
						}
					})
				}
				wg.Wait()
				checkUnlockedResults(rt, f.Highest(), writers, results)
			})
		})
	}
}

// checkUnlockedResults checks what holds without a caller's lock: the
// highest offered token is the final highest (nothing can refuse it), no
// admitted token exceeds it, each writer's own admitted tokens never go down
// (its calls are ordered), and every refusal names a higher admitted token.
func checkUnlockedResults(rt *rapid.T, final uint64, writers [][]uint64, results [][]admission) {
	var maxOffered uint64
	for _, tokens := range writers {
		for _, tok := range tokens {
			maxOffered = max(maxOffered, tok)
		}
	}
	if final != maxOffered {
		rt.Fatalf("final Highest() = %d, want the highest offered token %d", final, maxOffered)
	}
	for w, res := range results {
		var last uint64
		for _, a := range res {
			var se *StaleTokenError
			switch {
			case a.err == nil && (a.token < last || a.token > final):
				rt.Fatalf("writer %d: token %d admitted after its own %d (final highest %d)", w, a.token, last, final)
			case a.err == nil:
				last = a.token
			case !errors.As(a.err, &se) || se.Token != a.token || se.Token >= se.Highest || se.Highest > final || se.Highest < last:
				rt.Fatalf("writer %d: token %d refused with %v (final highest %d, own last %d)", w, a.token, a.err, final, last)
			}
		}
	}
}

func TestDurableFenceSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "fence")
	f, err := OpenDurableFence(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []uint64{3, 34, 34} {
		if err := f.Admit(tok); err != nil {
			t.Fatal(err)
		}
	}
	g, err := OpenDurableFence(path)
	if err != nil {
		t.Fatal(err)
	}
	if g.Highest() != 34 || g.Path() != path {
		t.Fatalf("reopened fence: highest %d at %s, want 34 at %s", g.Highest(), g.Path(), path)
	}
	wantStale(t, g.Admit(33), 33, 34)
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("dir holds %d entries, want only the fence file", len(entries))
	}
}

func TestDurableFenceWriteFailureChangesNothing(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "gone")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := OpenDurableFence(filepath.Join(dir, "fence"))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Admit(5); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	err = f.Admit(6)
	if err == nil || errors.Is(err, ErrStaleToken) || !strings.Contains(err.Error(), "persist fencing token 6") {
		t.Fatalf("Admit(6) with the dir gone = %v, want a persist error", err)
	}
	if f.Highest() != 5 {
		t.Fatalf("Highest() = %d after a failed write, want 5", f.Highest())
	}
	if err := f.Admit(5); err != nil {
		t.Fatalf("Admit(5) = %v: an equal token needs no write", err)
	}
}

// fenceFile returns a fence file with a valid header and checksum around
// the body lines.
func fenceFile(lines ...string) string {
	return string(encodeChecked(fenceHeader, []byte(strings.Join(lines, "\n")+"\n")))
}

// corruptFenceFiles are files a fence must refuse, each with a reason.
func corruptFenceFiles() map[string]string {
	good := string(encodeFence("", 42))
	return map[string]string{
		"empty":         "",
		"truncated":     good[:len(good)-5],
		"no newline":    good[:len(good)-1],
		"flipped":       strings.Replace(good, "42", "43", 1),
		"garbage":       "\x00\xff\xfe",
		"extra line":    good + "x\n",
		"wrong header":  strings.Replace(good, "v1", "v9", 1),
		"epoch file":    string(seenFormat.encode(42)),
		"huge":          strings.Repeat("x", maxStateFile+10),
		"leading zero":  fenceFile(`key ""`, "highest 042"),
		"negative":      fenceFile(`key ""`, "highest -1"),
		"overflow":      fenceFile(`key ""`, "highest 18446744073709551616"),
		"raw key":       fenceFile("key ``", "highest 42"),
		"unquoted key":  fenceFile("key x", "highest 42"),
		"other key":     string(encodeFence("x", 42)),
		"missing key":   fenceFile("highest 42"),
		"long key":      string(encodeFence(strings.Repeat("k", MaxFenceKeyLen+1), 42)),
		"escaped key":   fenceFile(`key "\x00"`, "highest 42"),
		"swapped lines": fenceFile("highest 42", `key ""`),
	}
}

func TestDurableFenceRefusesCorruptFile(t *testing.T) {
	for name, content := range corruptFenceFiles() {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "fence")
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := OpenDurableFence(path)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) {
				t.Fatalf("open = %v, want ErrCorrupt naming %s", err, path)
			}
		})
	}
}

func TestDurableKeyedFenceRefusesCorruptFile(t *testing.T) {
	cases := map[string]func(dir string) string{
		"bad content": func(dir string) string {
			return writeFenceFile(t, dir, fenceFileName("a"), "garbage")
		},
		"renamed": func(dir string) string {
			return writeFenceFile(t, dir, fenceFileName("b"), string(encodeFence("a", 7)))
		},
		"empty key": func(dir string) string {
			return writeFenceFile(t, dir, fenceFileName(""), string(encodeFence("", 7)))
		},
	}
	for name, write := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := write(dir)
			_, err := OpenDurableKeyedFence(dir)
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), path) {
				t.Fatalf("open = %v, want ErrCorrupt naming %s", err, path)
			}
		})
	}
}

func writeFenceFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestKeyedFenceKeysAreIndependent(t *testing.T) {
	kinds := map[string]func(t *testing.T) keyedFencer{
		"KeyedFence": func(*testing.T) keyedFencer { return &KeyedFence{} },
		"DurableKeyedFence": func(t *testing.T) keyedFencer {
			k, err := OpenDurableKeyedFence(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return k
		},
	}
	for name, open := range kinds {
		t.Run(name, func(t *testing.T) {
			k := open(t)
			if err := k.Admit("a", 10); err != nil {
				t.Fatal(err)
			}
			if err := k.Admit("b", 3); err != nil {
				t.Fatalf("Admit(b, 3) = %v: keys must not share a fence", err)
			}
			wantStale(t, k.Admit("a", 3), 3, 10)
			if err := k.Check("never-seen", 0); err != nil || k.Highest("never-seen") != 0 {
				t.Fatalf("unknown key: Check = %v, Highest = %d", err, k.Highest("never-seen"))
			}
			for _, bad := range []string{"", strings.Repeat("k", MaxFenceKeyLen+1)} {
				if err := k.Admit(bad, 1); err == nil || errors.Is(err, ErrStaleToken) {
					t.Fatalf("Admit(%q) = %v, want an invalid key error", bad, err)
				}
				if err := k.Check(bad, 1); err == nil || errors.Is(err, ErrStaleToken) {
					t.Fatalf("Check(%q) = %v, want an invalid key error", bad, err)
				}
			}
		})
	}
}

func TestKeyedFenceBoundsKeys(t *testing.T) {
	dk, err := OpenDurableKeyedFence(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for name, k := range map[string]keyedFencer{"KeyedFence": &KeyedFence{}, "DurableKeyedFence": dk} {
		t.Run(name, func(t *testing.T) {
			for i := range MaxFenceKeys {
				if err := k.Admit(fmt.Sprint("key-", i), 0); err != nil {
					t.Fatalf("key %d: %v", i, err)
				}
			}
			if err := k.Admit("one-too-many", 1); !errors.Is(err, ErrTooManyKeys) {
				t.Fatalf("Admit of key %d = %v, want ErrTooManyKeys", MaxFenceKeys+1, err)
			}
			if err := k.Admit("key-7", 9); err != nil {
				t.Fatalf("Admit on a known key of a full fence = %v", err)
			}
		})
	}
}

func TestDurableKeyedFenceRefusesTooManyFiles(t *testing.T) {
	const limit = 8 // MaxFenceKeys files take seconds to create on a slow disk
	dir := t.TempDir()
	for i := range limit {
		key := fmt.Sprint("key-", i)
		writeFenceFile(t, dir, fenceFileName(key), string(encodeFence(key, 1)))
	}
	if _, err := openDurableKeyedFence(dir, limit); err != nil {
		t.Fatalf("open with %d files = %v", limit, err)
	}
	writeFenceFile(t, dir, fenceFileName("one-too-many"), "") // counted before any is read
	if _, err := openDurableKeyedFence(dir, limit); !errors.Is(err, ErrTooManyKeys) {
		t.Fatalf("open with %d files = %v, want ErrTooManyKeys", limit+1, err)
	}
}

func TestDurableKeyedFenceSurvivesRestart(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "fences") // created by Open
	k, err := OpenDurableKeyedFence(dir)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]uint64{"a": 5, "../../escape": 7, "with\nnewline": 9, "ünïcode": 11}
	for key, tok := range keys {
		if err := k.Admit(key, tok); err != nil {
			t.Fatalf("Admit(%q): %v", key, err)
		}
	}
	writeFenceFile(t, dir, "."+fenceFileName("a")+".tmp-123", "torn") // a crash's leftover
	writeFenceFile(t, dir, "README", "not a fence")
	k2, err := OpenDurableKeyedFence(dir)
	if err != nil {
		t.Fatal(err)
	}
	for key, tok := range keys {
		if got := k2.Highest(key); got != tok {
			t.Fatalf("after restart Highest(%q) = %d, want %d", key, got, tok)
		}
		wantStale(t, k2.Admit(key, tok-1), tok-1, tok)
	}
	if entries, _ := os.ReadDir(root); len(entries) != 1 || k2.Dir() != dir {
		t.Fatalf("fence wrote outside its dir: %v", entries)
	}
}

func FuzzDecodeFence(f *testing.F) {
	f.Add(encodeFence("", 0))
	f.Add(encodeFence("", 1<<64-1))
	f.Add(encodeFence("shard/1", 34))
	f.Add(encodeFence("\x00\xff\n\"", 7))
	f.Add([]byte("tenure-fence v1\nkey \"\"\nhighest 5\ncrc32 00000000\n"))
	f.Add([]byte(fenceFile(`key ""`, "highest 05")))
	f.Fuzz(func(t *testing.T, data []byte) {
		key, highest, err := decodeFence(data)
		if err == nil && string(encodeFence(key, highest)) != string(data) {
			t.Fatalf("accepted non-canonical file %q as key %q, highest %d", data, key, highest)
		}
	})
}

func TestFenceFileRoundTrip(t *testing.T) {
	for _, key := range []string{"", "shard/1", "\x00\xff\n\"", strings.Repeat("k", MaxFenceKeyLen)} {
		for _, highest := range []uint64{0, 34, 1<<64 - 1} {
			gotKey, gotHighest, err := decodeFence(encodeFence(key, highest))
			if err != nil || gotKey != key || gotHighest != highest {
				t.Fatalf("decode(encode(%q, %d)) = %q, %d, %v", key, highest, gotKey, gotHighest, err)
			}
		}
	}
}
