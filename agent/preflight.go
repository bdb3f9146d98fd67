package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/tenurehq/tenure/gossip"
)

// The files the agent keeps in its data dir.
const (
	epochFile     = "epoch"
	voterFile     = "voter"
	rosterFile    = "roster"
	bootstrapFile = "bootstrap"
	keyringFile   = "keyring" // unless Config.KeyringFile names another
	snapshotFile  = "serf.snapshot"
	// serf writes a compacted snapshot here (truncating whatever is
	// there), then renames it over snapshotFile.
	snapshotCompactFile = snapshotFile + ".compact"
	// addrFile holds the gossip address the node advertised in its last
	// run (gossip.Config.AddrFile).
	addrFile = "gossip-addr"
	// instanceFile names the agent process that last ran on the data dir
	// (leasing.Request.Instance), in decimal (instance.go).
	instanceFile = "instance"
	// lockFile is locked while an agent runs on the data dir
	// (lockDataDir).
	lockFile = "lock"
)

// preflight checks, before anything is opened, that the agent's state files
// are regular files and that it may run with the keys it has; it returns c
// with KeyringFile set to the default keyring file when that file exists,
// so that a keyring file, once created, is always used.
func preflight(c Config) (Config, error) {
	if err := checkStateFiles(c.stateFiles()); err != nil {
		return c, err
	}
	if def := filepath.Join(c.DataDir, keyringFile); c.KeyringFile == "" && exists(def) {
		c.KeyringFile = def
	}
	if err := checkKeyringFile(c.KeyringFile, c.EncryptKey); err != nil {
		return c, err
	}
	switch {
	case len(c.EncryptKey) > 0 || exists(c.KeyringFile):
		if c.InsecureNoEncryption {
			c.Logger.Info("--insecure-no-encryption has no effect: this agent has a cluster key")
		}
		return c, nil
	case c.KeyringFile != "":
		return c, fmt.Errorf("agent: keyring file %s does not exist, and no --encrypt key was given to create it", c.KeyringFile)
	}
	return c, c.checkKeyless()
}

// checkKeyringFile refuses a keyring file that is corrupt or lacks the
// --encrypt key, naming the file and the ways out. The agent does not
// start: the file's keys would be used and the key given ignored, and if
// the cluster uses that key, the agent could never be understood by the
// others, a failure that shows only as decryption errors on other hosts.
func checkKeyringFile(path string, key []byte) error {
	if path == "" {
		return nil
	}
	err := gossip.CheckKeyringFile(path, key)
	if errors.Is(err, gossip.ErrKeyNotInKeyring) {
		return fmt.Errorf("agent: %w, and the file wins over --encrypt once it exists: refusing to start. "+
			"If the cluster uses the --encrypt key (this host missed a key rotation, or was once started with another key), remove %s and start again: it is created from --encrypt. "+
			"If the cluster still uses the file's key and --encrypt is a new one, start without --encrypt and move the cluster to the new key with tenure keys install KEY, then tenure keys use KEY. "+
			"tenure keys list on a running member shows the keys the cluster uses",
			err, path)
	}
	if err != nil {
		return fmt.Errorf("agent: %w", err)
	}
	return nil
}

// stateFiles returns the paths of the files the agent reads and writes: those
// in its data dir, and the keyring file wherever it is.
func (c Config) stateFiles() []string {
	var paths []string
	for _, name := range []string{epochFile, voterFile, rosterFile, bootstrapFile, keyringFile, snapshotFile, snapshotCompactFile, drainedFile, addrFile, instanceFile, lockFile} {
		paths = append(paths, filepath.Join(c.DataDir, name))
	}
	if c.KeyringFile != "" {
		paths = append(paths, c.KeyringFile)
	}
	return paths
}

// checkStateFiles refuses the first of paths that exists and is not a
// regular file. Opening one would follow a link to another file or a device
// (a snapshot linked to /dev/zero is read without end), or block on a FIFO.
func checkStateFiles(paths []string) error {
	for _, path := range paths {
		if err := checkRegular(path); err != nil {
			return err
		}
	}
	return nil
}

// checkRegular refuses path if it exists and is not a regular file. It
// follows no link: os.Lstat reports the link itself.
func checkRegular(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return nil // not created yet, or the data dir is no directory: openDataDir says so
	}
	if err != nil {
		return fmt.Errorf("agent: state file: %w", err)
	}
	if fi.Mode().IsRegular() {
		return nil
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		target, _ := os.Readlink(path)
		return fmt.Errorf("agent: state file %s is a symbolic link (to %s), not a regular file: the agent follows no link among its state files, even to a regular file, so that whoever can change its data dir cannot point it at another file or a device; put the file itself there, or remove the link",
			path, target)
	}
	return fmt.Errorf("agent: state file %s is %s, not a regular file: remove it (or put the real file there) and start again",
		path, fileKind(fi.Mode()))
}

// fileKind names the type of a file that is neither regular nor a link.
func fileKind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe (FIFO)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	}
	return fmt.Sprintf("of type %v", m.Type())
}

// exists tells whether path names an existing file ("" never does).
func exists(path string) bool {
	if path == "" {
		return false
	}
	_, err := os.Lstat(path)
	return err == nil
}

// checkKeyless refuses to run without a cluster key on an address other
// hosts can reach, unless InsecureNoEncryption says so: anyone who reaches
// it could join, vote and claim leadership.
func (c Config) checkKeyless() error {
	what, addr := c.exposedAddr()
	if addr == "" || c.InsecureNoEncryption {
		return nil
	}
	return fmt.Errorf("agent: no cluster key, and the %s %s is not a loopback address: anyone who can reach it could join, vote and claim leadership; give every agent the same --encrypt KEY (make one with tenure keygen), or start with --insecure-no-encryption to run in the clear",
		what, addr)
}

// exposedAddr returns the first address of the agent that is not a
// loopback address, and what it is; "" when all are loopback.
func (c Config) exposedAddr() (what, addr string) {
	for _, a := range []struct{ what, addr string }{
		{"gossip bind address (--bind)", c.BindAddr},
		{"peer bind address (--peer-bind)", c.PeerBindAddr},
		{"advertise address (--advertise)", c.AdvertiseAddr},
	} {
		if a.addr != "" && !isLoopback(a.addr) {
			return a.what, a.addr
		}
	}
	return "", ""
}

// isLoopback tells whether addr ("host:port" or "host") is on a loopback
// address. An empty or unspecified host (0.0.0.0, ::) listens on every
// address, so it is not.
func isLoopback(addr string) bool {
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
