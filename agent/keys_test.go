package agent

import (
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/tenurehq/tenure/internal/testlog"
)

// TestOtherPrimaryIsWarned: a keyring file that holds the --encrypt key
// but another primary (this node missed a tenure keys use) makes gossip
// send with that other key. The agent starts, since the cluster may still
// accept it, but warns, naming the file and the ways out: if the cluster
// removed that key, the others can never read this node.
func TestOtherPrimaryIsWarned(t *testing.T) {
	c := newTestCluster(t)
	key, old := newKey(t), newKey(t)
	cfg := c.config("n1", 1)
	cfg.EncryptKey = key
	var logs testlog.Buffer
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	file := filepath.Join(cfg.DataDir, keyringFile)
	ring, err := json.Marshal([]string{base64.StdEncoding.EncodeToString(old), base64.StdEncoding.EncodeToString(key)})
	must(t, err)
	must(t, writeFile(cfg.DataDir, keyringFile, string(ring)))
	c.start(cfg).Halt()
	if !containsAll(logs.String(), "level=WARN", "the keyring file's primary key is not the --encrypt key",
		"tenure keys use", "file="+file) {
		t.Fatalf("no warning about the keyring file's other primary:\n%s", logs.String())
	}

	logs = testlog.Buffer{}
	ring, err = json.Marshal([]string{base64.StdEncoding.EncodeToString(key), base64.StdEncoding.EncodeToString(old)})
	must(t, err)
	must(t, writeFile(cfg.DataDir, keyringFile, string(ring)))
	c.start(cfg).Halt()
	if containsAll(logs.String(), "primary key is not the --encrypt key") {
		t.Fatalf("warned although the --encrypt key is the primary:\n%s", logs.String())
	}
}
