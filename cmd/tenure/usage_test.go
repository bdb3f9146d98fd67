package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/tenurehq/tenure/agent"
)

// TestUsageMistakesGetOneLine: unexpected arguments and unknown flags are
// refused with exit 2 and one line naming the command and its --help or
// its usage, not the whole help; `tenure agent web-1` no longer starts an
// agent, and a flag after a command's argument is told to come first.
func TestUsageMistakesGetOneLine(t *testing.T) {
	for _, args := range [][]string{
		{"agent", "web-1"},
		{"status", "extra"},
		{"keys", "list", "x"},
		{"status", "--bogus"},
		{"--bogus"},
		{"transfer", "web-2", "--socket", "/nonexistent"},
		{"force-leave"},
	} {
		out, errOut, code := tenure(t, args...)
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		usage := strings.Contains(errOut, "--help") || strings.Contains(errOut, "[options]")
		if code != 2 || len(lines) != 1 || !usage || out != "" {
			t.Errorf("tenure %v: exit %d, stdout %q, stderr %q; want exit 2 and one line on stderr", args, code, out, errOut)
		}
	}
}

// TestAgentFlagsAreGroupedWithOneDefault: every visible flag of `tenure
// agent` has a help category and the environment variable the README
// promises, and none states its default in its usage text as well (help
// showed two defaults for --id).
func TestAgentFlagsAreGroupedWithOneDefault(t *testing.T) {
	for _, f := range agentCommand().Flags {
		vf, ok := f.(cli.VisibleFlag)
		if ok && !vf.IsVisible() {
			continue
		}
		cf := f.(cli.CategorizableFlag)
		df := f.(cli.DocGenerationFlag)
		if cf.GetCategory() == "" {
			t.Errorf("--%s has no help category", f.Names()[0])
		}
		if env := df.GetEnvVars(); len(env) != 1 || env[0] != "TENURE_"+strings.ToUpper(strings.ReplaceAll(f.Names()[0], "-", "_")) {
			t.Errorf("--%s is set by the environment variables %v", f.Names()[0], env)
		}
		if strings.Contains(df.GetUsage(), "(default") {
			t.Errorf("--%s states a default in its usage: %q", f.Names()[0], df.GetUsage())
		}
	}
}

// TestAgentErrorsDoNotRepeatPrefixes: an error the agent reports reaches
// the user with each prefix once.
func TestAgentErrorsDoNotRepeatPrefixes(t *testing.T) {
	socks := startAgents(t, 1, nil)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, _, code := tenure(t, "leader", "--socket", socks[0]); code == 0 {
			break
		} else if time.Now().After(deadline) {
			t.Fatal("no leader within 20s")
		}
	}
	for _, args := range [][]string{{"force-leave", "--socket", socks[0], "nosuch"}, {"transfer", "--socket", socks[0], "--wait", "0", "nosuch"}} {
		_, errOut, code := tenure(t, args...)
		if code == 0 || strings.Count(errOut, "not found") != 1 || strings.Count(errOut, "rpc:") > 1 {
			t.Errorf("tenure %v: exit %d, %q; want one mention of not found", args, code, errOut)
		}
	}
}

// TestWatchReconnectFollowsARestartedAgent: `tenure watch --reconnect`
// says on stderr that the agent went away and, once an agent serves the
// socket again, prints its events; without --reconnect watch exits.
func TestWatchReconnectFollowsARestartedAgent(t *testing.T) {
	dir, err := os.MkdirTemp("", "tenure-watch-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	start := func() *agent.Agent {
		cfg := agent.DefaultConfig()
		cfg.Name, cfg.ID = "w1", 1
		cfg.BindAddr, cfg.PeerBindAddr = "127.0.0.1:0", "127.0.0.1:0"
		cfg.SocketPath, cfg.DataDir = filepath.Join(dir, "w.sock"), filepath.Join(dir, "data")
		cfg.Profile, cfg.LeaseTTL, cfg.Expect = agent.Local, 2*time.Second, 1
		a, err := agent.Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	a := start()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "watch", "--reconnect", "--socket", filepath.Join(dir, "w.sock"))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	waitLine := func(want string) {
		t.Helper()
		for lines.Scan() {
			if strings.Contains(lines.Text(), want) {
				return
			}
		}
		t.Fatalf("watch ended before a line with %q; stderr: %s", want, stderr.String())
	}
	waitLine("leader=w1")
	a.Halt()
	a = start()
	defer a.Halt()
	waitLine("leader=w1") // the reconnected watch's first event, or a later one
	_ = cmd.Process.Signal(os.Interrupt)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("watch --reconnect: %v; stderr: %s", err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "reconnecting") {
		t.Fatalf("stderr %q does not say the watch reconnects", stderr.String())
	}
}

// TestRunRefusedGraceExitsTwo: a --grace longer than the agent's lease TTL
// is refused by the agent; tenure run says so and exits 2 at once instead
// of retrying forever as if the agent were unreachable.
func TestRunRefusedGraceExitsTwo(t *testing.T) {
	socks := startAgents(t, 1, nil) // lease TTL 2s
	start := time.Now()
	_, errOut, code := tenure(t, "run", "--socket", socks[0], "--grace", "5s", "--", "true")
	if code != 2 || !strings.Contains(errOut, "exceeds the lease TTL") || time.Since(start) > 10*time.Second {
		t.Fatalf("exit %d after %v, stderr %q; want exit 2 naming the TTL", code, time.Since(start), errOut)
	}
}
