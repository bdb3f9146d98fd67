package store

import (
	"bytes"
	"context"
	"errors"
	"github.com/tenurehq/tenure/internal/testlog"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/tenurehq/tenure/leasing"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testTimeout bounds every request in the tests.
const testTimeout = 10 * time.Second

func testLogger(t testing.TB) *slog.Logger { return testlog.New(t, "") }

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// startStore opens a store in dataDir and serves it on 127.0.0.1; both are
// closed when the test ends, or earlier through the returned stop.
func startStore(t *testing.T, dataDir string) (baseURL string, stop func()) {
	t.Helper()
	st, err := New(dataDir, testLogger(t))
	if err != nil {
		t.Fatalf("New: %v", err)
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

// response is what a raw request got back.
type response struct {
	code   int
	body   string
	header http.Header
}

// do sends a request without following redirects; headers come in pairs.
func do(t *testing.T, method, url string, body []byte, headers ...string) response {
	t.Helper()
	req, err := http.NewRequestWithContext(testCtx(t), method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{resp.StatusCode, string(b), resp.Header}
}

func mustPut(t *testing.T, base, key string, token uint64, value string) {
	t.Helper()
	if err := Put(testCtx(t), base, key, token, []byte(value)); err != nil {
		t.Fatalf("Put(%s, %d): %v", key, token, err)
	}
}

// wantValue fails unless key holds value, stored with token.
func wantValue(t *testing.T, base, key string, token uint64, value string) {
	t.Helper()
	got, gotToken, err := Get(testCtx(t), base, key)
	if err != nil || string(got) != value || gotToken != token {
		t.Fatalf("Get(%s) = %q, token %d, %v; want %q, token %d", key, got, gotToken, err, value, token)
	}
}

func TestStaleTokenIsRefusedAndDataKept(t *testing.T) {
	base, _ := startStore(t, t.TempDir())
	mustPut(t, base, "primary", 34, "new leader")
	r := do(t, http.MethodPut, base+"/kv/primary", []byte("old leader"), TokenHeader, "33")
	want := "stale fencing token 33: this store has already accepted token 34; the writer is no longer the leader\n"
	if r.code != http.StatusConflict || r.body != want {
		t.Fatalf("stale PUT = %d %q, want 409 %q", r.code, r.body, want)
	}
	wantValue(t, base, "primary", 34, "new leader")
	// The fence is one for the store: token 33 is stale for every key.
	err := Put(testCtx(t), base, "other-key", 33, []byte("old leader"))
	if !errors.Is(err, ErrStale) || !strings.Contains(err.Error(), "already accepted token 34") {
		t.Fatalf("Put of a stale token to a fresh key = %v, want ErrStale", err)
	}
	if _, _, err := Get(testCtx(t), base, "other-key"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get(other-key) = %v, want ErrNotFound", err)
	}
}

func TestEqualAndHigherTokensAreAccepted(t *testing.T) {
	base, _ := startStore(t, t.TempDir())
	mustPut(t, base, "k", 7, "first")
	mustPut(t, base, "k", 7, "same term, second write")
	wantValue(t, base, "k", 7, "same term, second write")
	mustPut(t, base, "k", 8, "next term")
	wantValue(t, base, "k", 8, "next term")
	mustPut(t, base, "k", 8, "") // an empty value is a value
	wantValue(t, base, "k", 8, "")
	if r := do(t, http.MethodGet, base+"/fence", nil); r.code != http.StatusOK || r.body != "8\n" || r.header.Get(TokenHeader) != "8" {
		t.Fatalf("GET /fence = %d %q (header %q), want 200 \"8\"", r.code, r.body, r.header.Get(TokenHeader))
	}
	if r := do(t, http.MethodPut, base+"/kv/k", []byte("x"), TokenHeader, "8"); r.code != http.StatusOK || !strings.Contains(r.body, "fencing token 8") {
		t.Fatalf("PUT = %d %q", r.code, r.body)
	}
}

func TestRestartedStoreStillRefusesOldTokens(t *testing.T) {
	dataDir := t.TempDir()
	base, stop := startStore(t, dataDir)
	mustPut(t, base, "primary", 10, "term 10")
	stop()

	base, _ = startStore(t, dataDir)
	if err := Put(testCtx(t), base, "primary", 9, []byte("term 9")); !errors.Is(err, ErrStale) {
		t.Fatalf("Put with token 9 after restart = %v, want ErrStale", err)
	}
	wantValue(t, base, "primary", 10, "term 10")
	mustPut(t, base, "primary", 10, "term 10 again")
}

func TestBadTokenHeaderIs400(t *testing.T) {
	base, _ := startStore(t, t.TempDir())
	cases := map[string][]string{
		"missing":  nil,
		"empty":    {TokenHeader, ""},
		"word":     {TokenHeader, "abc"},
		"negative": {TokenHeader, "-1"},
		"fraction": {TokenHeader, "1.5"},
		"overflow": {TokenHeader, "18446744073709551616"},
		"spaces":   {TokenHeader, "1 2"},
		"two":      {TokenHeader, "1", TokenHeader, "2"},
	}
	for name, headers := range cases {
		t.Run(name, func(t *testing.T) {
			r := do(t, http.MethodPut, base+"/kv/k", []byte("v"), headers...)
			if r.code != http.StatusBadRequest || !strings.Contains(r.body, TokenHeader) {
				t.Fatalf("PUT = %d %q, want 400 naming the header", r.code, r.body)
			}
		})
	}
	if _, _, err := Get(testCtx(t), base, "k"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a refused PUT stored something: %v", err)
	}
}

func TestKeysCannotEscapeTheDataDir(t *testing.T) {
	root := t.TempDir()
	dataDir := filepath.Join(root, "data")
	base, _ := startStore(t, dataDir)
	for _, path := range []string{
		"/kv/..%2F..%2Fescape", "/kv/%2E%2E", "/kv/.hidden", "/kv/a%2Fb", "/kv/a%5Cb",
		"/kv/%00", "/kv/" + strings.Repeat("k", MaxKeyLen+1), "/kv/..%2Ffence",
	} {
		r := do(t, http.MethodPut, base+path, []byte("v"), TokenHeader, "1")
		if r.code != http.StatusBadRequest || !strings.Contains(r.body, "invalid key") {
			t.Fatalf("PUT %s = %d %q, want 400 invalid key", path, r.code, r.body)
		}
	}
	// A literal ".." is cleaned by the router, which redirects; never stored.
	if r := do(t, http.MethodPut, base+"/kv/../../escape", []byte("v"), TokenHeader, "1"); r.code/100 == 2 {
		t.Fatalf("PUT /kv/../../escape = %d %q", r.code, r.body)
	}
	if r := do(t, http.MethodGet, base+"/kv/..%2Ffence", nil); r.code != http.StatusBadRequest {
		t.Fatalf("GET of the fence file through a key = %d %q", r.code, r.body)
	}
	if entries, _ := os.ReadDir(root); len(entries) != 1 {
		t.Fatalf("files appeared beside the data dir: %v", entries)
	}
	if entries, _ := os.ReadDir(filepath.Join(dataDir, "kv")); len(entries) != 0 {
		t.Fatalf("refused keys were stored: %v", entries)
	}
}

func TestValueSizeIsBounded(t *testing.T) {
	base, _ := startStore(t, t.TempDir())
	mustPut(t, base, "k", 1, "small")
	r := do(t, http.MethodPut, base+"/kv/k", make([]byte, MaxValueSize+1), TokenHeader, "2")
	if r.code != http.StatusRequestEntityTooLarge || !strings.Contains(r.body, "too large") {
		t.Fatalf("oversized PUT = %d %q, want 413", r.code, r.body)
	}
	wantValue(t, base, "k", 1, "small")
	mustPut(t, base, "k", 2, string(make([]byte, MaxValueSize)))
}

func TestCorruptStateIsRefused(t *testing.T) {
	dataDir := t.TempDir()
	base, stop := startStore(t, dataDir)
	mustPut(t, base, "k", 5, "value")
	valueFile := filepath.Join(dataDir, "kv", "k")
	if err := os.WriteFile(valueFile, []byte("torn"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := do(t, http.MethodGet, base+"/kv/k", nil); r.code != http.StatusInternalServerError {
		t.Fatalf("GET of a corrupt value = %d %q, want 500", r.code, r.body)
	}
	stop()
	if err := os.WriteFile(filepath.Join(dataDir, "fence"), []byte("torn"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(dataDir, testLogger(t)); !errors.Is(err, leasing.ErrCorrupt) {
		t.Fatalf("New with a corrupt fence = %v, want leasing.ErrCorrupt", err)
	}
}

func TestClosedStoreRefusesWrites(t *testing.T) {
	st, err := New(t.TempDir(), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(st.Handler())
	defer srv.Close()
	defer http.DefaultClient.CloseIdleConnections()
	st.Close()
	st.Close()
	if r := do(t, http.MethodPut, srv.URL+"/kv/k", []byte("v"), TokenHeader, "1"); r.code != http.StatusServiceUnavailable {
		t.Fatalf("PUT after Close = %d %q, want 503", r.code, r.body)
	}
}

func TestValueFileRoundTrip(t *testing.T) {
	for _, v := range []string{"", "x", "line\nbreaks\n", string(make([]byte, 1000))} {
		token, value, err := decodeValue(encodeValue(42, []byte(v)))
		if err != nil || token != 42 || string(value) != v {
			t.Fatalf("round trip of %q = %d %q %v", v, token, value, err)
		}
	}
	good := encodeValue(42, []byte("value"))
	for name, bad := range map[string][]byte{
		"truncated": good[:len(good)-1],
		"flipped":   bytes.Replace(good, []byte("value"), []byte("valuf"), 1),
		"token":     bytes.Replace(good, []byte("token 42"), []byte("token 43"), 1),
		"header":    bytes.Replace(good, []byte("v1"), []byte("v2"), 1),
		"empty":     nil,
	} {
		if _, _, err := decodeValue(bad); err == nil {
			t.Fatalf("%s: decoded a corrupt value file", name)
		}
	}
}
