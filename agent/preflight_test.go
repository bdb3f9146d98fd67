//go:build unix

package agent

import (
	"bytes"
	"cmp"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCheckRegularRefusesEachKind: a missing or regular state file passes;
// a symbolic link (even to a regular file), a FIFO, a directory, a socket
// and a device are each refused in one line that names the file and what
// it is.
func TestCheckRegularRefusesEachKind(t *testing.T) {
	dir, err := os.MkdirTemp("", "tenure-pf-") // short: socket paths are limited
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	p := func(name string) string { return filepath.Join(dir, name) }
	must(t, os.WriteFile(p("regular"), []byte("x"), 0o600))
	must(t, os.Symlink(p("regular"), p("link")))
	must(t, os.Symlink("/dev/zero", p("zero")))
	must(t, syscall.Mkfifo(p("fifo"), 0o600))
	must(t, os.Mkdir(p("dir"), 0o700))
	l, err := net.Listen("unix", p("sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	for _, path := range []string{p("missing"), p("regular"), p("regular/below"), p("missing/below")} {
		if err := checkRegular(path); err != nil {
			t.Errorf("%s: %v; want no error", path, err)
		}
	}
	refused := map[string]string{
		p("link"):   "is a symbolic link (to " + p("regular") + "), not a regular file: the agent follows no link among its state files, even to a regular file",
		p("zero"):   "is a symbolic link (to /dev/zero)",
		p("fifo"):   "is a named pipe (FIFO), not a regular file: remove it",
		p("dir"):    "is a directory, not a regular file",
		p("sock"):   "is a socket, not a regular file",
		"/dev/null": "is a character device, not a regular file",
	}
	for path, want := range refused {
		err := checkRegular(path)
		if err == nil || !strings.Contains(err.Error(), "agent: state file "+path+" "+want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v; want one line saying %q", path, err, want)
		}
	}
}

// TestStartRefusesNonRegularStateFiles: each of the agent's state files,
// made a FIFO (which would block the start) or a link to /dev/zero (which
// would be read without end), makes Start fail at once, naming the file,
// before it opens or creates anything.
func TestStartRefusesNonRegularStateFiles(t *testing.T) {
	c := newTestCluster(t)
	cfg := c.config("n1", 1)
	names := []string{epochFile, voterFile, rosterFile, bootstrapFile, keyringFile, snapshotFile, snapshotCompactFile, drainedFile, addrFile, instanceFile, lockFile}
	if got := len(cfg.withDefaults().stateFiles()); got != len(names) {
		t.Fatalf("the agent keeps %d state files, the test covers %d", got, len(names))
	}
	for i, name := range names {
		cfg.DataDir = filepath.Join(c.dir, "d"+name)
		must(t, os.Mkdir(cfg.DataDir, 0o700))
		bad := filepath.Join(cfg.DataDir, name)
		if i%2 == 0 {
			must(t, syscall.Mkfifo(bad, 0o600))
		} else {
			must(t, os.Symlink("/dev/zero", bad))
		}
		startRefused(t, cfg, "agent: state file "+bad+" is a ")
		if entries, _ := os.ReadDir(cfg.DataDir); len(entries) != 1 {
			t.Errorf("%s: the refused start left %d files in the data dir, want only the bad one", name, len(entries))
		}
		if _, err := os.Lstat(cfg.SocketPath); err == nil {
			t.Errorf("%s: the refused start created the socket", name)
		}
	}
	// A keyring file given outside the data dir is checked too.
	cfg.DataDir = filepath.Join(c.dir, "dkeyring-file")
	cfg.KeyringFile = filepath.Join(c.dir, "elsewhere")
	must(t, os.Symlink("/dev/zero", cfg.KeyringFile))
	startRefused(t, cfg, "agent: state file "+cfg.KeyringFile+" is a symbolic link (to /dev/zero)")
}

// startRefused checks that Start returns an error starting with want,
// without hanging.
func startRefused(t *testing.T, cfg Config, want string) {
	t.Helper()
	type result struct {
		a   *Agent
		err error
	}
	done := make(chan result, 1)
	go func() {
		a, err := Start(cfg)
		done <- result{a, err}
	}()
	select {
	case r := <-done:
		if r.err == nil {
			r.a.Halt()
			t.Fatalf("Start succeeded; want an error starting %q", want)
		}
		if !strings.HasPrefix(r.err.Error(), want) {
			t.Fatalf("Start: %v; want an error starting %q", r.err, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("Start hangs; want an error starting %q", want)
	}
}

// TestKeylessAgentNeedsLoopbackOrInsecure: without a cluster key an agent
// starts on loopback addresses only, unless InsecureNoEncryption says
// otherwise; with a key it starts anywhere.
func TestKeylessAgentNeedsLoopbackOrInsecure(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:7946": true, "127.0.0.2:0": true, "[::1]:7946": true, "::1": true, "localhost:7947": true,
		"0.0.0.0:7946": false, "[::]:7946": false, "::": false, ":7947": false, "10.0.0.1": false, "10.0.0.1:7946": false,
	} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
	c := newTestCluster(t)
	cfg := c.config("n1", 1)
	for _, tc := range []struct{ bind, peer, adv, what string }{
		{bind: "0.0.0.0:0", what: "gossip bind address (--bind) 0.0.0.0:0"},
		{peer: "[::]:0", what: "peer bind address (--peer-bind) [::]:0"},
		{adv: "10.0.0.1", what: "advertise address (--advertise) 10.0.0.1"},
	} {
		cfg := cfg
		cfg.BindAddr = cmp.Or(tc.bind, cfg.BindAddr)
		cfg.PeerBindAddr = cmp.Or(tc.peer, cfg.PeerBindAddr)
		cfg.AdvertiseAddr = tc.adv
		startRefused(t, cfg, "agent: no cluster key, and the "+tc.what+" is not a loopback address: anyone who can reach it could join, vote and claim leadership; give every agent the same --encrypt KEY (make one with tenure keygen), or start with --insecure-no-encryption to run in the clear")
	}
	cfg.AdvertiseAddr = "10.0.0.1"
	cfg.InsecureNoEncryption = true
	a := c.start(cfg)
	if a.peerTLS != nil {
		t.Fatal("the insecure agent has a peer key")
	}
	a.Halt()
	cfg.InsecureNoEncryption, cfg.EncryptKey = false, newKey(t)
	c.start(cfg).Halt()
}

// TestKeyringFileIsAlwaysUsed: once an agent created its keyring file, a
// restart without --encrypt is still encrypted with the file's keys (and
// may then use addresses other than loopback); a restart with a key the
// file lacks is refused, naming the file and the ways out.
func TestKeyringFileIsAlwaysUsed(t *testing.T) {
	c := newTestCluster(t)
	key := newKey(t)
	cfg := c.config("n1", 1)
	cfg.EncryptKey = key
	c.start(cfg).Halt()
	file := filepath.Join(cfg.DataDir, keyringFile)

	cfg.EncryptKey, cfg.AdvertiseAddr = nil, "10.0.0.1"
	a := c.start(cfg)
	if primary, _ := a.members.LocalKeys(); !bytes.Equal(primary, key) || a.peerTLS == nil {
		t.Fatalf("restarted without a key: gossip key %x, peer TLS %v; want the keyring file's key on both", primary, a.peerTLS != nil)
	}
	a.Halt()

	cfg.EncryptKey = newKey(t)
	startRefused(t, cfg, "agent: gossip: the encrypt key is not in the keyring file "+file+" (it holds 1 other key), and the file wins over --encrypt once it exists: refusing to start. "+
		"If the cluster uses the --encrypt key (this host missed a key rotation, or was once started with another key), remove "+file+" and start again: it is created from --encrypt. "+
		"If the cluster still uses the file's key and --encrypt is a new one, start without --encrypt and move the cluster to the new key with tenure keys install KEY, then tenure keys use KEY.")
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
