package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/tenurehq/tenure/internal/testlog"
	"github.com/tenurehq/tenure/rpc"
)

const exampleConfig = "../../examples/config/agent.toml"

// TestConfigExampleDocumentsEveryFlag: the example config file shows every
// setting of tenure agent, set or commented out.
func TestConfigExampleDocumentsEveryFlag(t *testing.T) {
	b, err := os.ReadFile(exampleConfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range agentCommand().Flags {
		name := f.Names()[0]
		if vf, ok := f.(cli.VisibleFlag); (ok && !vf.IsVisible()) || name == "config" {
			continue
		}
		if !regexp.MustCompile(`(?m)^(# )?` + regexp.QuoteMeta(name) + ` = `).Match(b) {
			t.Errorf("%s does not show %q", exampleConfig, name)
		}
	}
}

// configAgent runs `tenure agent` with args and env on loopback in dir and
// returns the process and its output buffer; it is killed at the end.
func configAgent(t *testing.T, dir string, env []string, args ...string) (*exec.Cmd, *testlog.Buffer) {
	t.Helper()
	base := []string{"agent", "--bind", "127.0.0.1:0", "--peer-bind", "127.0.0.1:0", "--timing", "local", "--lease-ttl", "2s",
		"--data-dir", filepath.Join(dir, "data"), "--socket", filepath.Join(dir, "s.sock")}
	cmd := exec.Command(binary, append(base, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out := &testlog.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, out
}

func waitStatus(t *testing.T, socket string, cond func(rpc.Status) bool) rpc.Status {
	t.Helper()
	var st rpc.Status
	var err error
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		var cl *rpc.Client
		if cl, err = rpc.Dial(ctx, socket); err == nil {
			st, err = cl.Status(ctx)
			cl.Close()
		}
		cancel()
		if err == nil && cond(st) {
			return st
		}
	}
	t.Fatalf("status %+v, err %v", st, err)
	return st
}

// TestConfigExampleStartsAnAgent: the example file starts an agent (its
// host addresses and paths overridden on the command line, which wins),
// its name and id come from the file, and TENURE_NAME wins over the file.
func TestConfigExampleStartsAnAgent(t *testing.T) {
	key, _, _ := tenure(t, "keygen")
	dir := t.TempDir()
	_, out := configAgent(t, dir, []string{"TENURE_NAME=from-env"}, "--config", exampleConfig, "--encrypt", strings.TrimSpace(key))
	st := waitStatus(t, filepath.Join(dir, "s.sock"), func(rpc.Status) bool { return true })
	if st.Node != "from-env" || st.ID != 10 {
		t.Fatalf("node %q id %d, want from-env (environment) and 10 (file); log:\n%s", st.Node, st.ID, out)
	}
}

// TestConfigFileMistakesAreOneLine: a key that names no flag, a value of
// the wrong type, and a file that is no TOML each stop the agent with
// exit 2 and a line naming the file and the key.
func TestConfigFileMistakesAreOneLine(t *testing.T) {
	dir := t.TempDir()
	for content, want := range map[string]string{
		`lease_ttl = "2s"`:    `"lease_ttl" is not a setting`,
		`lease-ttl = "2 sec"`: "lease-ttl",
		`name = [`:            "agent.toml",
		`[table]`:             `"table" is not a setting`,
	} {
		path := filepath.Join(dir, "agent.toml")
		if err := os.WriteFile(path, []byte(content+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, errOut, code := tenure(t, "agent", "--config", path, "--data-dir", filepath.Join(dir, "d"), "--socket", filepath.Join(dir, "s"))
		if code != 2 || !strings.Contains(errOut, want) || strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
			t.Errorf("config %q: exit %d, %q; want exit 2 and one line with %q", content, code, errOut, want)
		}
	}
}

// TestConfigReloadOnSIGHUP: a SIGHUP applies a new log level and new
// hooks from the file: a member-join hook added by the reload runs when
// a second agent joins, and debug lines appear only after it.
func TestConfigReloadOnSIGHUP(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.toml")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	marker := filepath.Join(dir, "joined")
	write("name = \"c1\"\nid = 1\nexpect = 1\nlog-level = \"info\"\n")
	cmd, out := configAgent(t, dir, nil, "--config", path)
	waitStatus(t, filepath.Join(dir, "s.sock"), func(st rpc.Status) bool { return st.IsLeader })
	write(fmt.Sprintf("name = \"c1\"\nid = 1\nexpect = 1\nlog-level = \"debug\"\nlease-ttl = \"9s\"\nhook = [\"member-join=touch %s\"]\n", marker))
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(out.String(), "config reloaded"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no reload logged:\n%s", out)
		}
	}
	log := out.String()
	if !strings.Contains(log, "need a restart") || !strings.Contains(log, "lease-ttl") {
		t.Fatalf("the changed lease-ttl is not reported as needing a restart:\n%s", log)
	}
	dir2 := filepath.Join(dir, "second")
	gossip := regexp.MustCompile(`gossip=(127\.0\.0\.1:\d+)`).FindStringSubmatch(log)
	if gossip == nil {
		t.Fatalf("no gossip address in the log:\n%s", log)
	}
	configAgent(t, dir2, nil, "--name", "c2", "--id", "2", "--join", gossip[1])
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := os.Stat(marker); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the reloaded member-join hook did not run:\n%s", out)
		}
	}
	if !strings.Contains(out.String()[len(log):], "level=DEBUG") {
		t.Fatalf("no debug lines after the reload to log-level debug")
	}
}
