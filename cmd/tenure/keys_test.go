package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testlog"
)

// TestRestartWithAnotherKeyIsRefused: an agent started once with a key
// keeps it in DATA-DIR/keyring; restarted with another --encrypt, it does
// not start with the file's key (which a cluster on the new key could
// never read): it exits 2 with one ERROR record, in the configured log
// format, that names the file and both ways out. Removing the file, one of
// them, lets it start with the new key.
func TestRestartWithAnotherKeyIsRefused(t *testing.T) {
	dir := t.TempDir()
	data, sock := filepath.Join(dir, "d"), filepath.Join(dir, "s.sock")
	file := filepath.Join(data, "keyring")
	agentArgs := func(key string, extra ...string) []string {
		return append([]string{"agent", "--name", "n1", "--bind", "127.0.0.1:0", "--peer-bind", "127.0.0.1:0",
			"--encrypt", key, "--socket", sock, "--data-dir", data, "--timing", "local"}, extra...)
	}
	first, second := newKey(t), newKey(t)
	runAgentUntilServing(t, sock, agentArgs(first)...)

	_, stderr, code := tenure(t, agentArgs(second)...)
	want := []string{"level=ERROR", `msg="tenure agent: cannot start"`,
		"the encrypt key is not in the keyring file " + file, "refusing to start",
		"remove " + file + " and start again", "start without --encrypt",
		"tenure keys install KEY, then tenure keys use KEY"}
	if code != 2 || !containsAll(stderr, want...) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
		t.Fatalf("restart with another key: exit %d, stderr %q; want exit 2 and one ERROR line saying %q", code, stderr, want)
	}

	_, stderr, code = tenure(t, agentArgs(second, "--log-json")...)
	var rec struct{ Level, Msg, Err string }
	if err := json.Unmarshal([]byte(stderr), &rec); code != 2 || err != nil || rec.Level != "ERROR" || !strings.Contains(rec.Err, file) {
		t.Fatalf("with --log-json: exit %d, stderr %q (%v); want exit 2 and one JSON ERROR record naming %s", code, stderr, err, file)
	}

	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	runAgentUntilServing(t, sock, agentArgs(second)...)
}

// runAgentUntilServing runs the agent binary until its socket answers,
// then stops it with SIGTERM and requires a clean exit.
func runAgentUntilServing(t *testing.T, sock string, args ...string) {
	t.Helper()
	var logs testlog.Buffer
	cmd := exec.Command(binary, args...)
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, _, code := tenure(t, "status", "--socket", sock); code == 0 {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("agent %v exited before serving: %v\n%s", args, err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			<-done
			t.Fatalf("agent %v does not serve after 15s\n%s", args, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("agent stopped with %v\n%s", err, logs.String())
		}
	case <-time.After(15 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("agent did not stop within 15s of SIGINT\n%s", logs.String())
	}
}

// newKey makes a cluster key with tenure keygen.
func newKey(t *testing.T) string {
	t.Helper()
	out, stderr, code := tenure(t, "keygen")
	if code != 0 {
		t.Fatalf("keygen: exit %d %s", code, stderr)
	}
	return strings.TrimSpace(out)
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
