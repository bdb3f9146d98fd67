package rpc

import (
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func listenT(t *testing.T, path string) (*Server, error) {
	t.Helper()
	srv, err := Listen(ServerConfig{Path: path, Backend: newFakeBackend(), Logger: testLogger(t)})
	if err == nil {
		t.Cleanup(func() { srv.Close() })
	}
	return srv, err
}

func TestListenReplacesStaleSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tenure.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close() // a dead agent's socket file stays behind
	if fi, err := os.Lstat(path); err != nil || fi.Mode().Type() != fs.ModeSocket {
		t.Fatalf("stale socket not in place: %v", err)
	}
	if _, err := listenT(t, path); err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	checkServing(t, path)
}

func TestListenRefusesLiveSocket(t *testing.T) {
	srv := startServer(t, newFakeBackend(), nil)
	_, err := listenT(t, srv.Path())
	if err == nil || !strings.Contains(err.Error(), "another agent is already serving at "+srv.Path()) {
		t.Fatalf("second Listen = %v, want a clear refusal", err)
	}
	checkServing(t, srv.Path())
}

func TestListenKeepsNonSocket(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tenure.sock")
	if err := os.WriteFile(path, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := listenT(t, path)
	if err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("Listen over a regular file = %v, want a refusal", err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "precious" {
		t.Fatalf("the file was touched: %q, %v", b, err)
	}
}

func TestSocketModeAndDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run", "tenure")
	path := filepath.Join(dir, "tenure.sock")
	srv, err := listenT(t, path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(path)
	if err != nil || fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket = %v, %v; want a socket with mode 0600", fi.Mode(), err)
	}
	if di, err := os.Stat(dir); err != nil || di.Mode().Perm() != 0o700 {
		t.Fatalf("directory = %v, %v; want mode 0700", di.Mode(), err)
	}
	srv.Close()
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("socket after Close: %v, want it removed", err)
	}
	if err := srv.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestSocketCustomMode(t *testing.T) {
	srv := startServer(t, newFakeBackend(), func(cfg *ServerConfig) { cfg.Mode = 0o660 })
	if fi, err := os.Lstat(srv.Path()); err != nil || fi.Mode().Perm() != 0o660 {
		t.Fatalf("socket mode = %v, %v; want 0660", fi.Mode(), err)
	}
}

func TestListenRefusesForeignDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a directory to another user")
	}
	dir := filepath.Join(t.TempDir(), "theirs")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	_, err := listenT(t, filepath.Join(dir, "tenure.sock"))
	if err == nil || !strings.Contains(err.Error(), "belongs to uid 4242") {
		t.Fatalf("Listen in a foreign directory = %v, want a refusal", err)
	}
}

func TestDialNothingListening(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.sock")
	_, err := Dial(testCtx(t), missing)
	if !errors.Is(err, ErrAgentUnreachable) {
		t.Fatalf("Dial = %v, want ErrAgentUnreachable", err)
	}
	want := "rpc: no tenure agent is listening on " + missing + ": connect: no such file or directory"
	if err.Error() != want {
		t.Errorf("error text = %q, want %q", err, want)
	}

	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	_, err = Dial(testCtx(t), stale)
	want = "rpc: no tenure agent is listening on " + stale + ": connect: connection refused"
	if !errors.Is(err, ErrAgentUnreachable) || err.Error() != want {
		t.Errorf("Dial to a stale socket = %v, want %q", err, want)
	}
}

func TestDefaultSocketPath(t *testing.T) {
	for _, tc := range []struct {
		euid      int
		xdg, want string
	}{
		{0, "/run/user/0", "/run/tenure/tenure.sock"},
		{1000, "/run/user/1000", "/run/user/1000/tenure/tenure.sock"},
		{1000, "", "/tmp/tenure-1000/tenure.sock"},
	} {
		if got := defaultSocketPath(tc.euid, tc.xdg, "/tmp"); got != tc.want {
			t.Errorf("defaultSocketPath(%d, %q) = %q, want %q", tc.euid, tc.xdg, got, tc.want)
		}
	}
	if p := DefaultSocketPath(); !filepath.IsAbs(p) || filepath.Base(p) != "tenure.sock" {
		t.Errorf("DefaultSocketPath() = %q", p)
	}
}
