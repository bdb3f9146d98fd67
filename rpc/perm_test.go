//go:build unix

package rpc

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// TestSocketPermissions: as root, run a client as the unprivileged user
// nobody: it cannot use a 0600 socket, and can once the socket and its
// directory are given to nobody's group with mode 0660.
func TestSocketPermissions(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to run a client as another user")
	}
	const nobody = 65534
	bin := copyTestBinary(t)
	dir, err := os.MkdirTemp("", "tenure-perm-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	private := startServer(t, newFakeBackend(), func(c *ServerConfig) { c.Path = filepath.Join(dir, "private", "s.sock") })
	if code := probeAs(t, bin, private.Path(), uint32(nobody)); code == 0 {
		t.Fatal("user nobody used a 0600 socket in a 0700 directory")
	}
	g := nobody
	shared := startServer(t, newFakeBackend(), func(c *ServerConfig) {
		c.Path = filepath.Join(dir, "shared", "s.sock")
		c.Mode, c.Group = 0o660, &g
	})
	if code := probeAs(t, bin, shared.Path(), uint32(nobody)); code != 0 {
		t.Fatalf("user nobody, in the socket's group, could not use it (exit %d)", code)
	}
}

// copyTestBinary copies the running test binary where user nobody can run it.
func copyTestBinary(t *testing.T) string {
	dir, err := os.MkdirTemp("", "tenure-bin-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	bin := filepath.Join(dir, "rpc.test")
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return bin
}

func probeAs(t *testing.T, bin, path string, uid uint32) int {
	t.Helper()
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = []string{probeEnv + "=" + path}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}}
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	if err != nil {
		t.Fatalf("run probe as %d: %v", uid, err)
	}
	return 0
}
