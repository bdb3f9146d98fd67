package gossip

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	oldKey = []byte("0123456789abcdef0123456789abcdef")
	newKey = []byte("ABCDEFGHIJKLMNOPQRSTUVWXYZ012345")
)

func b64(k []byte) string { return base64.StdEncoding.EncodeToString(k) }

// keyLog records the keyrings an OnKeyringChange callback reported.
type keyLog struct {
	mu    sync.Mutex
	calls [][][]byte
}

func watchKeys(m *Membership) *keyLog {
	l := &keyLog{}
	m.OnKeyringChange(func(primary []byte, all [][]byte) {
		if len(all) == 0 || !bytes.Equal(primary, all[0]) {
			panic(fmt.Sprintf("callback primary %x is not all[0] of %x", primary, all))
		}
		l.mu.Lock()
		l.calls = append(l.calls, all)
		l.mu.Unlock()
	})
	return l
}

// last returns the latest keyring reported, nil if none.
func (l *keyLog) last() [][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.calls) == 0 {
		return nil
	}
	return l.calls[len(l.calls)-1]
}

func sameKeys(a, b [][]byte) bool { return slices.EqualFunc(a, b, bytes.Equal) }

// aliveMonitor records every time a node sees another one not alive, until
// stopped.
type aliveMonitor struct {
	stop chan struct{}
	done chan struct{}
	mu   sync.Mutex
	bad  []string
}

func monitorAlive(nodes []*node) *aliveMonitor {
	am := &aliveMonitor{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(am.done)
		for {
			for _, nd := range nodes {
				members := nd.Members()
				if len(members) != len(nodes) {
					am.note(fmt.Sprintf("%s sees %d members", nd.cfg.Name, len(members)))
				}
				for _, mb := range members {
					if mb.Status != StatusAlive {
						am.note(fmt.Sprintf("%s sees %s %s", nd.cfg.Name, mb.Name, mb.Status))
					}
				}
			}
			select {
			case <-am.stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	return am
}

func (am *aliveMonitor) note(s string) {
	am.mu.Lock()
	defer am.mu.Unlock()
	if len(am.bad) < 20 {
		am.bad = append(am.bad, s)
	}
}

func (am *aliveMonitor) finish(t *testing.T) {
	t.Helper()
	close(am.stop)
	<-am.done
	if len(am.bad) > 0 {
		t.Errorf("members were not all alive during the rotation: %v", am.bad)
	}
}

// requireAllAlive checks, without waiting, that every node sees all of
// nodes alive.
func requireAllAlive(t *testing.T, step string, nodes []*node) {
	t.Helper()
	for _, nd := range nodes {
		for _, target := range nodes {
			if s, ok := statusOf(nd, target.cfg.Name); !ok || s != StatusAlive {
				t.Fatalf("after %s: %s sees %s as %v (known %v)", step, nd.cfg.Name, target.cfg.Name, s, ok)
			}
		}
	}
}

// checkStatus checks a successful query's status on a cluster of n members.
func checkStatus(t *testing.T, step string, st KeyringStatus, err error, n int, keys, primary map[string]int) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v (status %+v)", step, err, st)
	}
	if st.NumNodes != n || st.NumResp != n || st.NumErr != 0 {
		t.Fatalf("%s: status %+v, want %d nodes, all answered, no error", step, st, n)
	}
	if keys != nil && (!mapsEqual(st.Keys, keys) || !mapsEqual(st.PrimaryKeys, primary)) {
		t.Fatalf("%s: keys %v primary %v, want %v and %v", step, st.Keys, st.PrimaryKeys, keys, primary)
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// checkFile checks the keys a keyring file holds, and its mode.
func checkFile(t *testing.T, path string, want [][]byte) {
	t.Helper()
	got, err := readKeyringFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !sameKeys(got, want) {
		t.Fatalf("keyring file %s holds %q, want %q", path, got, want)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if mode := fi.Mode().Perm(); mode != 0o600 {
		t.Fatalf("keyring file %s has mode %v, want 0600", path, mode)
	}
}

// waitKeys waits until every node's keyring, and what its OnKeyringChange
// callback last reported, are want.
func waitKeys(t *testing.T, step string, nodes []*node, logs []*keyLog, want [][]byte) {
	t.Helper()
	for i, nd := range nodes {
		waitFor(t, 3*time.Second, fmt.Sprintf("%s: %s to report keys %q", step, nd.cfg.Name, want), func() bool {
			primary, all := nd.LocalKeys()
			return bytes.Equal(primary, want[0]) && sameKeys(all, want) && sameKeys(logs[i].last(), want)
		})
	}
}

func TestKeyRotation(t *testing.T) {
	dir := t.TempDir()
	files := make([]string, 3)
	nodes := startCluster(t, 3, func(i int, c *Config) {
		c.EncryptKey = oldKey
		files[i] = filepath.Join(dir, c.Name+".keyring")
		c.KeyringFile = files[i]
	})
	logs := make([]*keyLog, len(nodes))
	for i, nd := range nodes {
		logs[i] = watchKeys(nd.Membership)
	}
	for _, f := range files {
		checkFile(t, f, [][]byte{oldKey})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	admin := nodes[0] // initiates every change; nodes[1:] only follow

	st, err := admin.ListKeys(ctx)
	checkStatus(t, "list before", st, err, 3, map[string]int{b64(oldKey): 3}, map[string]int{b64(oldKey): 3})

	mon := monitorAlive(nodes)

	// 1. Install the new key everywhere.
	st, err = admin.InstallKey(ctx, newKey)
	checkStatus(t, "install", st, err, 3, nil, nil)
	st, err = admin.ListKeys(ctx)
	checkStatus(t, "list after install", st, err, 3,
		map[string]int{b64(oldKey): 3, b64(newKey): 3}, map[string]int{b64(oldKey): 3})
	waitKeys(t, "install", nodes, logs, [][]byte{oldKey, newKey})
	requireAllAlive(t, "install", nodes)

	// 2. Make it primary.
	st, err = admin.UseKey(ctx, newKey)
	checkStatus(t, "use", st, err, 3, nil, nil)
	st, err = admin.ListKeys(ctx)
	checkStatus(t, "list after use", st, err, 3,
		map[string]int{b64(oldKey): 3, b64(newKey): 3}, map[string]int{b64(newKey): 3})
	waitKeys(t, "use", nodes, logs, [][]byte{newKey, oldKey})
	requireAllAlive(t, "use", nodes)

	// The primary cannot be removed: every member refuses, and says so.
	st, err = admin.RemoveKey(ctx, newKey)
	if err == nil || st.NumErr != 3 || st.NumResp != 3 {
		t.Fatalf("removing the primary: status %+v, err %v; want 3 failures", st, err)
	}
	for _, nd := range nodes {
		if !strings.Contains(err.Error(), nd.cfg.Name+": ") || !strings.Contains(st.Messages[nd.cfg.Name], "primary") {
			t.Fatalf("removing the primary: error %q / messages %v do not explain %s's refusal", err, st.Messages, nd.cfg.Name)
		}
	}
	t.Logf("removing the primary: %v", err)

	// 3. Remove the old key.
	st, err = admin.RemoveKey(ctx, oldKey)
	checkStatus(t, "remove", st, err, 3, nil, nil)
	st, err = admin.ListKeys(ctx)
	checkStatus(t, "list after remove", st, err, 3, map[string]int{b64(newKey): 3}, map[string]int{b64(newKey): 3})
	waitKeys(t, "remove", nodes, logs, [][]byte{newKey})
	requireAllAlive(t, "remove", nodes)

	mon.finish(t)
	for _, f := range files {
		checkFile(t, f, [][]byte{newKey})
	}
	for i, l := range logs[1:] {
		l.mu.Lock()
		n := len(l.calls)
		l.mu.Unlock()
		if n != 3 {
			t.Errorf("%s: OnKeyringChange called %d times for 3 changes", nodes[i+1].cfg.Name, n)
		}
	}

	// A node that only has the old key can no longer join.
	stranger := testConfig(t, 3)
	stranger.EncryptKey = oldKey
	s := startNode(t, stranger)
	if n, err := s.Join(ctx, []string{admin.LocalMember().Addr}); err == nil {
		t.Fatalf("a node with only the removed key joined (%d reached)", n)
	} else {
		t.Logf("join with the removed key: %v", err)
	}

	// A node restarted with its config still naming the removed key is
	// refused, naming its keyring file; restarted with its keyring file
	// alone, it rejoins with the new key.
	nodes[2].Shutdown()
	cfg := nodes[2].cfg
	cfg.BindAddr = nodes[2].LocalMember().Addr
	cfg.Join = []string{admin.LocalMember().Addr}
	if m, err := Start(cfg); err == nil {
		m.Shutdown()
		t.Fatal("a node restarted with the removed key as its encrypt key started")
	} else if !errors.Is(err, ErrKeyNotInKeyring) || !strings.Contains(err.Error(), cfg.KeyringFile) {
		t.Fatalf("restart with the removed key: %v; want ErrKeyNotInKeyring naming %s", err, cfg.KeyringFile)
	}
	cfg.EncryptKey = nil
	back := startNode(t, cfg)
	if primary, all := back.LocalKeys(); !bytes.Equal(primary, newKey) || !sameKeys(all, [][]byte{newKey}) {
		t.Fatalf("restarted node has keys %q, want only the new key", all)
	}
	all := []*node{nodes[0], nodes[1], back}
	for _, nd := range all {
		waitStatus(t, 10*time.Second, nd, all, StatusAlive)
	}
	if _, ok := statusOf(admin, stranger.Name); ok {
		t.Fatal("the cluster knows the node with the removed key")
	}
	st, err = admin.ListKeys(ctx)
	checkStatus(t, "list after restart", st, err, 3, map[string]int{b64(newKey): 3}, map[string]int{b64(newKey): 3})
}

func TestKeyringWithoutEncryption(t *testing.T) {
	cfg := testConfig(t, 0)
	cfg.KeyringFile = filepath.Join(t.TempDir(), "keyring") // no file, no key: not encrypted
	nd := startNode(t, cfg)
	ctx := context.Background()
	_, errList := nd.ListKeys(ctx)
	_, errInstall := nd.InstallKey(ctx, newKey)
	_, errUse := nd.UseKey(ctx, newKey)
	_, errRemove := nd.RemoveKey(ctx, newKey)
	for _, err := range []error{errList, errInstall, errUse, errRemove} {
		if !errors.Is(err, ErrNoKeyring) || err.Error() != "gossip: no keyring: the agent was started without --encrypt" {
			t.Fatalf("key operation without encryption: %v", err)
		}
	}
	if primary, all := nd.LocalKeys(); primary != nil || all != nil {
		t.Fatalf("LocalKeys without encryption = %q, %q", primary, all)
	}
	if _, err := os.Stat(cfg.KeyringFile); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("keyring file created without a key: %v", err)
	}
}

// TestKeyringFileIsAlwaysUsed: an existing keyring file gives the keys,
// with or without an encrypt key; an encrypt key the file lacks is an error
// naming the file, never silently ignored.
func TestKeyringFileIsAlwaysUsed(t *testing.T) {
	file := filepath.Join(t.TempDir(), "keyring")
	if err := writeKeyringFile(file, [][]byte{newKey, oldKey}); err != nil {
		t.Fatal(err)
	}
	for _, key := range [][]byte{oldKey, newKey, nil} {
		cfg := testConfig(t, 0)
		cfg.EncryptKey = key
		cfg.KeyringFile = file
		nd := startNode(t, cfg)
		if primary, all := nd.LocalKeys(); !bytes.Equal(primary, newKey) || !sameKeys(all, [][]byte{newKey, oldKey}) {
			t.Fatalf("encrypt key %q: LocalKeys = %q, %q; want the file's keys", key, primary, all)
		}
		nd.Shutdown()
	}
	cfg := testConfig(t, 0)
	cfg.EncryptKey = []byte("another key, in no keyring file.")
	cfg.KeyringFile = file
	m, err := Start(cfg)
	if err == nil {
		m.Shutdown()
		t.Fatal("Start used a keyring file that lacks the encrypt key")
	}
	want := "gossip: the encrypt key is not in the keyring file " + file + " (it holds 2 other keys)"
	if !errors.Is(err, ErrKeyNotInKeyring) || err.Error() != want {
		t.Fatalf("Start with a key the file lacks: %q; want %q", err, want)
	}
	if err := CheckKeyringFile(file, cfg.EncryptKey); !errors.Is(err, ErrKeyNotInKeyring) || err.Error() != want {
		t.Fatalf("CheckKeyringFile with a key the file lacks: %v; want %q", err, want)
	}
	for _, key := range [][]byte{oldKey, newKey, nil} {
		if err := CheckKeyringFile(file, key); err != nil {
			t.Fatalf("CheckKeyringFile with key %q: %v", key, err)
		}
	}
	if err := CheckKeyringFile(file+".missing", oldKey); err != nil {
		t.Fatalf("CheckKeyringFile of a missing file: %v", err)
	}
	checkFile(t, file, [][]byte{newKey, oldKey})
}

func TestKeyringFileErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, content, want string
	}{
		{"not json", "garbage", "is corrupt"},
		{"not an array", `{"a": 1}`, "is corrupt"},
		{"empty", `[]`, "holds no keys"},
		{"null", `null`, "holds no keys"},
		{"bad base64", `["!!!"]`, "not base64"},
		{"short key", fmt.Sprintf("[%q]", b64([]byte("short"))), "has 5 bytes"},
		{"too large", fmt.Sprintf("[%q]", strings.Repeat("A", 70<<10)), "larger than 64 KiB"},
	}
	for i, tt := range tests {
		file := filepath.Join(dir, fmt.Sprintf("keyring%d", i))
		if err := os.WriteFile(file, []byte(tt.content), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg := testConfig(t, 0)
		cfg.EncryptKey = oldKey
		cfg.KeyringFile = file
		m, err := Start(cfg)
		if err == nil {
			m.Shutdown()
			t.Errorf("%s: Start succeeded", tt.name)
			continue
		}
		if !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: error %q does not name the file and say %q", tt.name, err, tt.want)
		}
	}
	// A keyring file that cannot be created.
	cfg := testConfig(t, 0)
	cfg.EncryptKey = oldKey
	cfg.KeyringFile = filepath.Join(dir, "no", "such", "dir", "keyring")
	if m, err := Start(cfg); err == nil {
		m.Shutdown()
		t.Error("Start succeeded with a keyring file in a missing directory")
	} else if !strings.Contains(err.Error(), cfg.KeyringFile) {
		t.Errorf("error %q does not name the keyring file", err)
	}
}

func TestKeyQueryErrors(t *testing.T) {
	nodes := startCluster(t, 2, func(_ int, c *Config) { c.EncryptKey = oldKey })
	a, b := nodes[0], nodes[1]
	ctx := context.Background()

	if _, err := a.InstallKey(ctx, []byte("short")); err == nil || !strings.Contains(err.Error(), "16, 24 or 32") {
		t.Fatalf("InstallKey with a short key: %v", err)
	}
	if _, err := a.InstallKey(ctx, nil); err == nil {
		t.Fatal("InstallKey with no key succeeded")
	}

	// Every member fails: the status and the error say which and why.
	st, err := a.UseKey(ctx, newKey)
	if err == nil || st.NumErr != 2 || st.NumResp != 2 || st.NumNodes != 2 {
		t.Fatalf("UseKey of a key nobody has: status %+v, err %v", st, err)
	}
	for _, name := range []string{"n0", "n1"} {
		if !strings.Contains(err.Error(), name+": requested key is not in the keyring") {
			t.Fatalf("UseKey error %q does not explain %s's failure", err, name)
		}
	}

	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := a.ListKeys(cancelled); !errors.Is(err, context.Canceled) {
		t.Fatalf("ListKeys with a cancelled context: %v", err)
	}

	// A member that stopped without leaving is still counted until it is
	// declared failed: the query waits for it until its timeout, or until
	// ctx ends.
	b.Shutdown()
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	started := time.Now()
	if _, err := a.ListKeys(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ListKeys with a short deadline: %v", err)
	}
	if d := time.Since(started); d > 500*time.Millisecond {
		t.Fatalf("ListKeys returned %v after its context ended", d)
	}
	st, err = a.ListKeys(ctx)
	if err == nil || st.NumResp != 1 || st.NumNodes != 2 || !strings.Contains(err.Error(), "only 1 of 2 members answered") {
		t.Fatalf("ListKeys with a silent member: status %+v, err %v", st, err)
	}
	if st.Keys[b64(oldKey)] != 1 {
		t.Fatalf("ListKeys with a silent member: keys %v", st.Keys)
	}

	a.Shutdown()
	if _, err := a.ListKeys(ctx); !errors.Is(err, ErrShutdown) {
		t.Fatalf("ListKeys after Shutdown: %v", err)
	}
}

func TestKeyQueryError(t *testing.T) {
	ok := KeyringStatus{NumNodes: 3, NumResp: 3, Messages: map[string]string{"n1": "a warning"}}
	if err := keyQueryError("install key", ok, nil); err != nil {
		t.Fatalf("all answered, none failed: %v", err)
	}
	partial := KeyringStatus{NumNodes: 3, NumResp: 2, NumErr: 1,
		Messages: map[string]string{"n2": "disk full", "n1": "boom"}}
	err := keyQueryError("install key", partial, errors.New("serf says"))
	want := "gossip: install key: 1 of 3 members failed, only 2 of 3 members answered before the query timed out (n1: boom; n2: disk full)"
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %q", err, want)
	}
	serfErr := errors.New("query failed")
	if err := keyQueryError("use key", KeyringStatus{}, serfErr); !errors.Is(err, serfErr) {
		t.Fatalf("serf's own error lost: %v", err)
	}
}
