package store

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/tenurehq/tenure/leasing"
)

// startPerKeyStore is startStore with one fence per key (PerKey).
func startPerKeyStore(t *testing.T, dataDir string) (baseURL string, stop func()) {
	t.Helper()
	st, err := Open(dataDir, PerKey, testLogger(t))
	if err != nil {
		t.Fatalf("Open(PerKey): %v", err)
	}
	srv := httptest.NewServer(st.Handler())
	var once sync.Once
	stop = func() {
		once.Do(func() {
			srv.Close()
			http.DefaultClient.CloseIdleConnections()
			st.Close()
		})
	}
	t.Cleanup(stop)
	return srv.URL, stop
}

// TestPerKeyFenceRefusesOnlyPerKey: a token is compared only with the
// tokens accepted for the same key, as the partitions of a tenure group
// need (each partition's token grows on its own).
func TestPerKeyFenceRefusesOnlyPerKey(t *testing.T) {
	base, _ := startPerKeyStore(t, t.TempDir())
	mustPut(t, base, "part-3", 100, "p3 first owner")
	// A lower token for another key is not stale: with one fence it would be.
	mustPut(t, base, "part-7", 5, "p7 first owner")
	mustPut(t, base, "part-7", 5, "p7 first owner, again") // equal: the same holder
	mustPut(t, base, "part-3", 101, "p3 second owner")

	r := do(t, http.MethodPut, base+"/kv/part-3", []byte("p3 first owner, late"), TokenHeader, "100")
	want := "stale fencing token 100 for key \"part-3\": this store has already accepted token 101 for that key; the writer no longer holds it\n"
	if r.code != http.StatusConflict || r.body != want {
		t.Fatalf("stale PUT = %d %q, want 409 %q", r.code, r.body, want)
	}
	err := Put(testCtx(t), base, "part-7", 4, []byte("older"))
	if !errors.Is(err, ErrStale) || !strings.Contains(err.Error(), "already accepted token 5 for that key") {
		t.Fatalf("Put(part-7, 4) = %v, want ErrStale naming token 5", err)
	}
	wantValue(t, base, "part-3", 101, "p3 second owner")
	wantValue(t, base, "part-7", 5, "p7 first owner, again")

	// A fresh key starts at 0, whatever the other keys accepted.
	mustPut(t, base, "part-9", 1, "p9")

	if r := do(t, http.MethodGet, base+"/fence", nil); r.code != http.StatusOK || r.body != "part-3 101\npart-7 5\npart-9 1\n" {
		t.Fatalf("GET /fence = %d %q, want the per-key list", r.code, r.body)
	}
	for key, want := range map[string]string{"part-3": "101", "part-7": "5", "never-written": "0"} {
		r := do(t, http.MethodGet, base+"/fence/"+key, nil)
		if r.code != http.StatusOK || r.body != want+"\n" || r.header.Get(TokenHeader) != want {
			t.Fatalf("GET /fence/%s = %d %q (header %q), want %s", key, r.code, r.body, r.header.Get(TokenHeader), want)
		}
	}
	if r := do(t, http.MethodGet, base+"/fence/.hidden", nil); r.code != http.StatusBadRequest {
		t.Fatalf("GET /fence/.hidden = %d %q, want 400", r.code, r.body)
	}
}

// TestPerKeyFenceSurvivesRestart: the per-key fences are on disk, so a
// restarted store still refuses each key's old tokens, and only those.
func TestPerKeyFenceSurvivesRestart(t *testing.T) {
	dataDir := t.TempDir()
	base, stop := startPerKeyStore(t, dataDir)
	mustPut(t, base, "a", 10, "a10")
	mustPut(t, base, "b", 3, "b3")
	stop()

	base, _ = startPerKeyStore(t, dataDir)
	if err := Put(testCtx(t), base, "a", 9, []byte("a9")); !errors.Is(err, ErrStale) {
		t.Fatalf("Put(a, 9) after restart = %v, want ErrStale", err)
	}
	if err := Put(testCtx(t), base, "b", 2, []byte("b2")); !errors.Is(err, ErrStale) {
		t.Fatalf("Put(b, 2) after restart = %v, want ErrStale", err)
	}
	mustPut(t, base, "b", 3, "b3 again")
	mustPut(t, base, "c", 1, "c1")
	wantValue(t, base, "a", 10, "a10")
}

// TestFenceModeCannotBeSwitched: a data directory written in one mode is
// refused in the other, whose fence would start every key at 0.
func TestFenceModeCannotBeSwitched(t *testing.T) {
	one := t.TempDir()
	base, stop := startStore(t, one)
	mustPut(t, base, "k", 7, "v")
	stop()
	if _, err := Open(one, PerKey, testLogger(t)); !errors.Is(err, leasing.ErrCorrupt) || !strings.Contains(err.Error(), "--fence one") {
		t.Fatalf("Open(PerKey) of a one-fence directory = %v, want ErrCorrupt naming --fence one", err)
	}

	perKey := t.TempDir()
	base, stop = startPerKeyStore(t, perKey)
	mustPut(t, base, "k", 7, "v")
	stop()
	if _, err := New(perKey, testLogger(t)); !errors.Is(err, leasing.ErrCorrupt) || !strings.Contains(err.Error(), "--fence per-key") {
		t.Fatalf("New of a per-key directory = %v, want ErrCorrupt naming --fence per-key", err)
	}
}

func TestParseFenceMode(t *testing.T) {
	for _, m := range []FenceMode{OneFence, PerKey} {
		if got, err := ParseFenceMode(m.String()); err != nil || got != m {
			t.Fatalf("ParseFenceMode(%q) = %v, %v", m.String(), got, err)
		}
	}
	if _, err := ParseFenceMode("per-row"); err == nil {
		t.Fatal("ParseFenceMode(per-row) succeeded")
	}
}

// TestPerKeyConcurrentWritersNeverGoBackwards: on each of several keys,
// writers with different tokens race (the tokens of different keys
// overlap on purpose); each key's stored token never goes down, and each
// key ends with its own highest token's last write.
func TestPerKeyConcurrentWritersNeverGoBackwards(t *testing.T) {
	base, _ := startPerKeyStore(t, t.TempDir())
	const keys, writers, writes = 3, 4, 8
	ctx := testCtx(t)
	var wg sync.WaitGroup
	errs := make(chan error, keys*(writers*writes+1))
	for k := range keys {
		key := fmt.Sprintf("part-%d", k)
		for w := 1; w <= writers; w++ {
			token := uint64(10*w - k) // key 0: 10..40; key 2: 8..38
			wg.Go(func() {
				for j := range writes {
					err := Put(ctx, base, key, token, []byte(writeValue(token, j)))
					if err != nil && !errors.Is(err, ErrStale) {
						errs <- err
					}
				}
			})
		}
		wg.Go(func() {
			var last uint64
			for range writers * writes {
				value, token, err := Get(ctx, base, key)
				switch {
				case errors.Is(err, ErrNotFound):
				case err != nil:
					errs <- err
					return
				case token < last:
					errs <- fmt.Errorf("%s: stored token went back from %d to %d", key, last, token)
					return
				case !strings.HasPrefix(string(value), fmt.Sprintf("token %d write ", token)):
					errs <- fmt.Errorf("%s: value %q stored under token %d", key, value, token)
					return
				default:
					last = token
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for k := range keys {
		top := uint64(10*writers - k)
		wantValue(t, base, fmt.Sprintf("part-%d", k), top, writeValue(top, writes-1))
	}
}
