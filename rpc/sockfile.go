package rpc

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// staleProbeTimeout bounds the dial that tells a live socket from a stale one.
const staleProbeTimeout = time.Second

// DefaultSocketPath returns where the agent listens unless told otherwise:
// /run/tenure/tenure.sock for root; otherwise $XDG_RUNTIME_DIR/tenure/tenure.sock,
// or <temp dir>/tenure-<uid>/tenure.sock when XDG_RUNTIME_DIR is unset.
func DefaultSocketPath() string {
	return defaultSocketPath(os.Geteuid(), os.Getenv("XDG_RUNTIME_DIR"), os.TempDir())
}

func defaultSocketPath(euid int, xdgRuntime, tmp string) string {
	switch {
	case euid == 0:
		return "/run/tenure/tenure.sock"
	case xdgRuntime != "":
		return filepath.Join(xdgRuntime, "tenure", "tenure.sock")
	}
	return filepath.Join(tmp, "tenure-"+strconv.Itoa(euid), "tenure.sock")
}

// listenSocket prepares path's directory, clears a stale socket and listens
// on path with the given mode. The listener removes the file when closed.
func listenSocket(path string, mode os.FileMode, group *int, log *slog.Logger) (*net.UnixListener, error) {
	if err := prepareDir(filepath.Dir(path), log); err != nil {
		return nil, err
	}
	if err := shareDir(filepath.Dir(path), group); err != nil {
		return nil, err
	}
	if err := clearStale(path); err != nil {
		return nil, err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("rpc: listen on %s: %w", path, err)
	}
	// Between bind and chmod the socket has the umask's mode; the parent
	// directory, writable and searchable by its owner only, is what keeps
	// other users out in that window.
	if err := os.Chmod(path, mode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("rpc: set mode of %s: %w", path, err)
	}
	if group != nil {
		if err := os.Chown(path, -1, *group); err != nil {
			ln.Close()
			return nil, fmt.Errorf("rpc: give %s to group %d: %w", path, *group, err)
		}
	}
	return ln, nil
}

// prepareDir creates dir (mode 0700) if missing and checks who owns it.
func prepareDir(dir string, log *slog.Logger) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("rpc: create socket directory: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("rpc: inspect socket directory: %w", err)
	}
	if err := checkOwner(dir, fi); err != nil {
		return err
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 && fi.Mode()&fs.ModeSticky == 0 {
		log.Warn("rpc: socket directory is writable by other users, who could replace the socket",
			"dir", dir, "mode", perm.String())
	}
	return nil
}

// clearStale makes path free: nothing there, or a stale socket, which it
// removes. A live socket or a file of another kind is an error.
func clearStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("rpc: inspect socket path: %w", err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("rpc: %s exists and is not a socket; not removing it", path)
	}
	nc, err := net.DialTimeout("unix", path, staleProbeTimeout)
	if err == nil {
		nc.Close()
		return fmt.Errorf("rpc: another agent is already serving at %s", path)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("rpc: cannot tell whether the socket %s is in use: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("rpc: remove stale socket: %w", err)
	}
	return nil
}
