package gossip

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/hashicorp/serf/serf"
)

// ErrNoKeyring is returned by the key operations of a Membership started
// without encryption.
var ErrNoKeyring = errors.New("gossip: no keyring: the agent was started without --encrypt")

// ErrKeyNotInKeyring is returned by Start when Config.EncryptKey is set and
// the existing Config.KeyringFile does not hold it: the cluster rotated to
// other keys since the file was written, or the key is wrong. Start never
// ignores a key it is given.
var ErrKeyNotInKeyring = errors.New("gossip: the encrypt key is not in the keyring file")

// maxKeyringFileSize bounds how much of a keyring file is read. A file holds
// a few base64 keys of at most 44 characters each.
const maxKeyringFileSize = 64 << 10

// keyringPollInterval is how often the keyring watcher looks for changes
// made by key queries, which serf handles without telling this package.
const keyringPollInterval = time.Second

// KeyringStatus is the cluster's view of its gossip keys, as gathered by one
// key query. Keys are base64 (standard encoding, with padding).
type KeyringStatus struct {
	// Keys maps each key to the number of members that have it installed.
	// Only ListKeys fills it.
	Keys map[string]int
	// PrimaryKeys maps each key to the number of members using it as
	// their primary key. Only ListKeys fills it.
	PrimaryKeys map[string]int
	// NumNodes is the number of members this node believed alive when it
	// sent the query; NumResp how many answered before the query timed
	// out, and NumErr how many of those reported a failure.
	NumNodes, NumResp, NumErr int
	// Messages maps member names to the message they answered with: the
	// error of a member that failed, or a warning of one that succeeded.
	Messages map[string]string
}

// keyringState is a Membership's gossip keyring and the watcher that
// reports its changes.
type keyringState struct {
	ring  *memberlist.Keyring // nil without encryption; set before serf starts
	nudge chan struct{}       // asks the watcher to look now; capacity 1

	mu        sync.Mutex
	callbacks []func(primary []byte, all [][]byte)
}

// setupKeyring builds the keyring serf will use (see loadKeys) and points
// serf at the keyring file.
func (m *Membership) setupKeyring(sc *serf.Config) error {
	mc := sc.MemberlistConfig
	mc.SecretKey = nil // memberlist would make it primary over the file's
	keys, err := m.loadKeys()
	if err != nil {
		return err
	}
	sc.KeyringFile = m.cfg.KeyringFile
	if len(keys) == 0 {
		return nil
	}
	ring, err := memberlist.NewKeyring(keys, keys[0])
	if err != nil { // keys were validated; kept for safety
		return fmt.Errorf("gossip: keyring: %w", err)
	}
	mc.Keyring = ring
	m.keys.ring = ring
	return nil
}

// loadKeys returns the keys to start with, the primary first: those of
// Config.KeyringFile when that file exists (Config.EncryptKey, if set, must
// be one of them), else EncryptKey, with which it creates the keyring file
// when one is configured. No keys means no encryption.
func (m *Membership) loadKeys() ([][]byte, error) {
	var keys [][]byte
	if len(m.cfg.EncryptKey) > 0 {
		keys = [][]byte{m.cfg.EncryptKey}
	}
	file := m.cfg.KeyringFile
	if file == "" {
		return keys, nil
	}
	fileKeys, err := readKeyringFile(file)
	switch {
	case err == nil:
		return fileKeys, m.checkKeyringFile(file, fileKeys)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	case len(keys) > 0:
		if err := writeKeyringFile(file, keys); err != nil {
			return nil, err
		}
		m.logger.Info("gossip: created the keyring file with the encrypt key", "file", file)
	default:
		m.logger.Warn("gossip: no keyring file and no encrypt key: gossip is not encrypted", "file", file)
	}
	return keys, nil
}

// CheckKeyringFile tells, without starting anything, whether Start would
// accept the keyring file at path with key as Config.EncryptKey: nil when
// the file does not exist or holds key (or key is empty), an error
// wrapping ErrKeyNotInKeyring when it lacks key, and the reading error
// when it cannot be read or is corrupt.
func CheckKeyringFile(path string, key []byte) error {
	fileKeys, err := readKeyringFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return checkHoldsKey(path, fileKeys, key)
}

// checkHoldsKey refuses a keyring file that lacks key: a key the caller
// gives is never ignored.
func checkHoldsKey(file string, fileKeys [][]byte, key []byte) error {
	if len(key) > 0 && !slices.ContainsFunc(fileKeys, func(k []byte) bool { return bytes.Equal(k, key) }) {
		return fmt.Errorf("%w %s (it holds %s)", ErrKeyNotInKeyring, file, countKeys(len(fileKeys), "other "))
	}
	return nil
}

// checkKeyringFile checks an existing keyring file before its keys are
// used: it must hold Config.EncryptKey when that is set, and be writable.
// It says which keys gossip uses.
func (m *Membership) checkKeyringFile(file string, fileKeys [][]byte) error {
	key := m.cfg.EncryptKey
	if err := checkHoldsKey(file, fileKeys, key); err != nil {
		return err
	}
	if err := checkWritable(file); err != nil {
		return err
	}
	m.warnIfReadable(file)
	switch {
	case len(key) == 0:
		m.logger.Info("gossip: encrypted with the keys of the keyring file (no encrypt key was given)",
			"file", file, "keys", len(fileKeys))
	case !bytes.Equal(key, fileKeys[0]):
		m.logger.Info("gossip: using the keys of the keyring file; its primary key is not the encrypt key, which it also holds (the cluster rotated keys)",
			"file", file, "keys", len(fileKeys))
	default:
		m.logger.Info("gossip: using the keys of the keyring file", "file", file, "keys", len(fileKeys))
	}
	return nil
}

// countKeys says "1 key" or "n keys", with an adjective before "key".
func countKeys(n int, adj string) string {
	if n == 1 {
		return "1 " + adj + "key"
	}
	return fmt.Sprintf("%d %skeys", n, adj)
}

// readKeyringFile reads a keyring file as serf writes it: a JSON array of
// base64 keys, the primary first. Errors wrap fs.ErrNotExist when the file
// does not exist.
func readKeyringFile(path string) ([][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("gossip: keyring file: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxKeyringFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("gossip: keyring file %s: %w", path, err)
	}
	if len(data) > maxKeyringFileSize {
		return nil, fmt.Errorf("gossip: keyring file %s is larger than %d KiB; it is not a keyring", path, maxKeyringFileSize>>10)
	}
	var encoded []string
	if err := json.Unmarshal(data, &encoded); err != nil {
		return nil, fmt.Errorf("gossip: keyring file %s is corrupt (want a JSON array of base64 keys): %w", path, err)
	}
	if len(encoded) == 0 {
		return nil, fmt.Errorf("gossip: keyring file %s holds no keys", path)
	}
	keys := make([][]byte, 0, len(encoded))
	for i, s := range encoded {
		k, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, fmt.Errorf("gossip: keyring file %s is corrupt: key %d is not base64: %w", path, i, err)
		}
		if err := memberlist.ValidateKey(k); err != nil {
			return nil, fmt.Errorf("gossip: keyring file %s: key %d has %d bytes, want 16, 24 or 32", path, i, len(k))
		}
		if !slices.ContainsFunc(keys, func(o []byte) bool { return bytes.Equal(o, k) }) {
			keys = append(keys, k)
		}
	}
	return keys, nil
}

// writeKeyringFile creates the keyring file, in serf's format, atomically
// and with mode 0600.
func writeKeyringFile(path string, keys [][]byte) error {
	encoded := make([]string, len(keys))
	for i, k := range keys {
		encoded[i] = base64.StdEncoding.EncodeToString(k)
	}
	data, err := json.MarshalIndent(encoded, "", "  ")
	if err != nil {
		return fmt.Errorf("gossip: keyring file %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*") // mode 0600
	if err != nil {
		return fmt.Errorf("gossip: create keyring file %s: %w", path, err)
	}
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("gossip: create keyring file %s: %w", path, err)
	}
	return nil
}

// checkWritable makes sure serf will be able to rewrite the keyring file
// after a key change; otherwise every change would fail on this node.
func checkWritable(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("gossip: keyring file %s is not writable: %w", path, err)
	}
	return f.Close()
}

// warnIfReadable logs a warning if others than the owner may access the
// keyring file.
func (m *Membership) warnIfReadable(path string) {
	if runtime.GOOS == "windows" {
		return
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		m.logger.Warn("gossip: keyring file is accessible to other users; it should have mode 0600",
			"file", path, "mode", fi.Mode().Perm().String())
	}
}

// ListKeys asks every member for its keys. Keys and PrimaryKeys of the
// status count the members holding each key; a healthy cluster between
// rotations has one key, installed and primary on NumNodes members.
//
// Like InstallKey, it returns an error, with the status, when a member
// failed or did not answer.
func (m *Membership) ListKeys(ctx context.Context) (KeyringStatus, error) {
	list := func(km *serf.KeyManager, _ string) (*serf.KeyResponse, error) { return km.ListKeys() }
	return m.keyQuery(ctx, "list keys", nil, false, list)
}

// InstallKey installs key (16, 24 or 32 bytes) on every member, next to the
// keys they have, so that they accept messages encrypted with it; they keep
// sending with their primary key. With Config.KeyringFile each member
// rewrites its file.
//
// With encryption on (Config.EncryptKey or Config.KeyringFile), memberlist
// encrypts every gossip message with the primary key of the sender's
// keyring and accepts messages encrypted with any key of the receiver's.
// To rotate the cluster key without downtime:
//
//  1. InstallKey(new): every member accepts old and new, still sends old.
//  2. UseKey(new): every member sends new; members that have not switched
//     yet still send old, which everyone still accepts.
//  3. RemoveKey(old): old is no longer accepted anywhere.
//
// Check each step's result (or ListKeys) before the next one: a member that
// was down or did not answer missed the step. One that misses step 3 only
// keeps accepting old; one that missed step 1 and comes back after step 3
// can no longer talk to the others: put the new key in its keyring file
// (or EncryptKey, without a file) and restart it. Leave a few seconds
// between steps, so that OnKeyringChange listeners on every member (the
// peer transport's keys) have caught up.
//
// The key query goes to the members this node knows as alive and waits for
// their answers up to serf's query timeout (GossipInterval × 16 × ⌈log10(n+1)⌉;
// 3.2 s with LANTiming for up to 9 members). If a member reports a failure,
// or not every member answered in time, InstallKey returns the status and an
// error naming the members' messages; the members that succeeded keep the
// change. If ctx ends first, InstallKey returns ctx's error at once, but the
// query is not withdrawn: members that receive it still apply it. Call
// ListKeys to see where the cluster stands. Shutdown waits for a query in
// flight to time out.
func (m *Membership) InstallKey(ctx context.Context, key []byte) (KeyringStatus, error) {
	return m.keyQuery(ctx, "install key", key, true, (*serf.KeyManager).InstallKey)
}

// UseKey makes key, which must be installed everywhere (InstallKey), the
// primary key on every member: the one they send with. Errors and ctx are
// as for InstallKey; a member without the key reports a failure and keeps
// its primary.
func (m *Membership) UseKey(ctx context.Context, key []byte) (KeyringStatus, error) {
	return m.keyQuery(ctx, "use key", key, true, (*serf.KeyManager).UseKey)
}

// RemoveKey removes key from every member's keyring, after which they no
// longer accept messages encrypted with it. A member whose primary key it
// is refuses (and reports a failure): UseKey another key first. Removing a
// key a member does not have succeeds on that member. Errors and ctx are as
// for InstallKey.
func (m *Membership) RemoveKey(ctx context.Context, key []byte) (KeyringStatus, error) {
	return m.keyQuery(ctx, "remove key", key, true, (*serf.KeyManager).RemoveKey)
}

// keyQuery runs one of serf's key queries: op names it in errors, change
// tells whether it changes keyrings (then key is checked and sent), and run
// calls the KeyManager method with the base64 key.
func (m *Membership) keyQuery(ctx context.Context, op string, key []byte, change bool,
	run func(km *serf.KeyManager, key string) (*serf.KeyResponse, error)) (KeyringStatus, error) {
	if m.isClosed() {
		return KeyringStatus{}, ErrShutdown
	}
	if m.keys.ring == nil {
		return KeyringStatus{}, ErrNoKeyring
	}
	var encoded string
	if change {
		if err := memberlist.ValidateKey(key); err != nil {
			return KeyringStatus{}, fmt.Errorf("gossip: %s: key must be 16, 24 or 32 bytes, not %d", op, len(key))
		}
		encoded = base64.StdEncoding.EncodeToString(key)
	}
	if err := ctx.Err(); err != nil {
		return KeyringStatus{}, fmt.Errorf("gossip: %s: %w", op, err)
	}
	if !m.track() {
		return KeyringStatus{}, ErrShutdown
	}
	type result struct {
		resp *serf.KeyResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		defer m.wg.Done()
		resp, err := run(m.serf.KeyManager(), encoded)
		if change {
			m.nudgeKeyringWatch() // report this node's change without waiting for a poll
		}
		done <- result{resp, err}
	}()
	select {
	case r := <-done:
		st := convertKeyResponse(r.resp)
		return st, keyQueryError(op, st, r.err)
	case <-ctx.Done():
		return KeyringStatus{}, fmt.Errorf("gossip: %s: %w (the query may still be applied)", op, ctx.Err())
	}
}

func convertKeyResponse(r *serf.KeyResponse) KeyringStatus {
	if r == nil {
		r = &serf.KeyResponse{}
	}
	st := KeyringStatus{
		Keys:        maps.Clone(r.Keys),
		PrimaryKeys: maps.Clone(r.PrimaryKeys),
		NumNodes:    r.NumNodes,
		NumResp:     r.NumResp,
		NumErr:      r.NumErr,
		Messages:    maps.Clone(r.Messages),
	}
	if st.Keys == nil {
		st.Keys = make(map[string]int)
	}
	if st.PrimaryKeys == nil {
		st.PrimaryKeys = make(map[string]int)
	}
	if st.Messages == nil {
		st.Messages = make(map[string]string)
	}
	// serf counts an empty primary key for members that failed to list.
	delete(st.PrimaryKeys, "")
	return st
}

// keyQueryError turns a key query's outcome into an error: nil when every
// member answered and none failed.
func keyQueryError(op string, st KeyringStatus, serfErr error) error {
	var problems []string
	if st.NumErr > 0 {
		problems = append(problems, fmt.Sprintf("%d of %d members failed", st.NumErr, st.NumNodes))
	}
	if st.NumResp < st.NumNodes {
		problems = append(problems, fmt.Sprintf("only %d of %d members answered before the query timed out", st.NumResp, st.NumNodes))
	}
	if len(problems) == 0 {
		if serfErr != nil {
			return fmt.Errorf("gossip: %s: %w", op, serfErr)
		}
		return nil
	}
	msg := strings.Join(problems, ", ")
	if len(st.Messages) > 0 {
		var lines []string
		for _, name := range slices.Sorted(maps.Keys(st.Messages)) {
			lines = append(lines, name+": "+st.Messages[name])
		}
		msg += " (" + strings.Join(lines, "; ") + ")"
	}
	return fmt.Errorf("gossip: %s: %s", op, msg)
}

// LocalKeys returns a copy of this node's keyring: its primary key, and all
// its keys with the primary first, ready for KeyedTLS.SetKeys. Both are nil
// without encryption.
func (m *Membership) LocalKeys() (primary []byte, all [][]byte) {
	if m.keys.ring == nil {
		return nil, nil
	}
	all = cloneKeys(m.keys.ring.GetKeys())
	if len(all) == 0 {
		return nil, nil
	}
	return all[0], all
}

// OnKeyringChange registers f to be called with this node's keyring (as
// LocalKeys returns it) after it changed: by this node's InstallKey, UseKey
// or RemoveKey, or by another member's, which serf applies here without
// telling anyone. Changes are found by looking at the keyring every second
// and right after this node's own key queries, so f runs up to a second
// after a change made elsewhere, and several changes within that second are
// reported once, with the final keyring. Every f runs on one goroutine, in
// order of registration, never concurrently; it must return quickly
// (Shutdown waits for it) and must not modify its arguments.
//
// To follow the keyring without missing a change, register first, then
// read LocalKeys. Without encryption f is never called. f is not called
// after Shutdown returns.
func (m *Membership) OnKeyringChange(f func(primary []byte, all [][]byte)) {
	m.keys.mu.Lock()
	defer m.keys.mu.Unlock()
	m.keys.callbacks = append(m.keys.callbacks, f)
}

// startKeyringWatch starts the goroutine behind OnKeyringChange, if gossip
// is encrypted. It stops on Shutdown.
func (m *Membership) startKeyringWatch() {
	if m.keys.ring == nil {
		return
	}
	m.keys.nudge = make(chan struct{}, 1)
	m.wg.Add(1)
	go m.watchKeyring()
}

func (m *Membership) nudgeKeyringWatch() {
	if m.keys.nudge == nil {
		return
	}
	select {
	case m.keys.nudge <- struct{}{}:
	default:
	}
}

// watchKeyring reports keyring changes to the OnKeyringChange callbacks.
//
// memberlist's Keyring hands out its internal slice, and its RemoveKey
// shifts that slice's elements in place (under a lock this package cannot
// take). So the watcher compares only what GetKeys and GetPrimaryKey return
// under that lock (the slice's length and first element's address, and the
// primary key; every change gives memberlist's slice a new backing array or
// length) and reads the keys themselves only after one of those changed.
func (m *Membership) watchKeyring() {
	defer m.wg.Done()
	ring := m.keys.ring
	ticker := time.NewTicker(keyringPollInterval)
	defer ticker.Stop()

	type mark struct {
		n       int
		first   *[]byte
		primary []byte
	}
	markOf := func(keys [][]byte) mark {
		mk := mark{n: len(keys), primary: ring.GetPrimaryKey()}
		if len(keys) > 0 {
			mk.first = &keys[0]
		}
		return mk
	}
	raw := ring.GetKeys()
	last, seen := markOf(raw), cloneKeys(raw)
	for {
		select {
		case <-m.ctx.Done():
			return
		case <-ticker.C:
		case <-m.keys.nudge:
		}
		raw := ring.GetKeys()
		mk := markOf(raw)
		if mk.n == last.n && mk.first == last.first && bytes.Equal(mk.primary, last.primary) {
			continue
		}
		last = mk
		cur := cloneKeys(raw)
		if slices.EqualFunc(cur, seen, bytes.Equal) {
			continue
		}
		seen = cur
		m.logger.Info("gossip: keyring changed", "keys", len(cur))
		m.keys.mu.Lock()
		callbacks := slices.Clone(m.keys.callbacks)
		m.keys.mu.Unlock()
		for _, f := range callbacks {
			if m.ctx.Err() != nil {
				return
			}
			all := cloneKeys(cur)
			var primary []byte
			if len(all) > 0 {
				primary = all[0]
			}
			f(primary, all)
		}
	}
}

func cloneKeys(keys [][]byte) [][]byte {
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = slices.Clone(k)
	}
	return out
}
