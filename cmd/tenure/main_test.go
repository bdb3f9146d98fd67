package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tenurehq/tenure/agent"
	"github.com/tenurehq/tenure/internal/tenurebuild"
	"github.com/tenurehq/tenure/internal/testwait"
)

// binary is the tenure binary built once for these tests.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tenure-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "tenure")
	out, err := tenurebuild.Command(context.Background(), ".", binary, nil, ".").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build tenure: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		if err := testwait.Leaks(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// tenure runs the binary and returns stdout, stderr and the exit code.
func tenure(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return tenureEnv(t, nil, args...)
}

// tenureEnv runs the binary with env added to the environment.
func tenureEnv(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run tenure %v: %v", args, err)
	}
	return stdout.String(), stderr.String(), code
}

// startAgents runs n in-process agents on 127.0.0.1 and returns their
// socket paths, highest ID last.
func startAgents(t *testing.T, n int, edit func(*agent.Config)) []string {
	return startAgentsWith(t, n, edit, nil)
}

// startAgentsWith is startAgents that also appends the agents to out,
// when given, so a test can crash one (Halt).
func startAgentsWith(t *testing.T, n int, edit func(*agent.Config), out *[]*agent.Agent) []string {
	dir, err := os.MkdirTemp("", "tenure-cli-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var socks []string
	seed := ""
	for i := 1; i <= n; i++ {
		cfg := agent.DefaultConfig()
		cfg.Name, cfg.ID = fmt.Sprintf("n%d", i), uint64(i)
		cfg.BindAddr, cfg.PeerBindAddr = "127.0.0.1:0", "127.0.0.1:0"
		cfg.SocketPath = filepath.Join(dir, cfg.Name+".sock")
		cfg.DataDir = filepath.Join(dir, cfg.Name)
		cfg.Profile = agent.Local
		cfg.LeaseTTL = 2 * time.Second
		cfg.Expect = n
		if seed != "" {
			cfg.Join = []string{seed}
		}
		if edit != nil {
			edit(&cfg)
		}
		a, err := agent.Start(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(a.Halt)
		if out != nil {
			*out = append(*out, a)
		}
		if seed == "" {
			seed = a.GossipAddr()
		}
		socks = append(socks, cfg.SocketPath)
	}
	return socks
}

func TestStatusLeaderMembersThroughTheBinary(t *testing.T) {
	socks := startAgents(t, 3, nil)
	deadline := time.Now().Add(15 * time.Second)
	for {
		out, _, code := tenure(t, "leader", "--json", "--socket", socks[0])
		if code == 0 && strings.Contains(out, `"node":"n3"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no leader n3 after 15s: %q (exit %d)", out, code)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for i, sock := range socks {
		out, stderr, code := tenure(t, "status", "--json", "--socket", sock)
		if code != 0 {
			t.Fatalf("status exit %d: %s", code, stderr)
		}
		var st map[string]any
		if err := json.Unmarshal([]byte(out), &st); err != nil {
			t.Fatalf("status --json: %v: %q", err, out)
		}
		for _, key := range []string{"node", "id", "is_leader", "leader", "epoch", "lease_remaining_ms", "members", "state"} {
			if _, ok := st[key]; !ok {
				t.Errorf("status --json lacks %q: %s", key, out)
			}
		}
		if st["node"] != fmt.Sprintf("n%d", i+1) || st["is_leader"] != (i == 2) {
			t.Errorf("status of n%d = %s", i+1, out)
		}
		leader, _ := st["leader"].(map[string]any)
		if leader["node"] != "n3" || leader["epoch"] != st["epoch"] {
			t.Errorf("n%d: leader = %v, epoch = %v", i+1, st["leader"], st["epoch"])
		}
	}
	out, _, code := tenure(t, "leader", "--socket", socks[1])
	if code != 0 || !strings.HasPrefix(out, "n3 (id 3) epoch ") {
		t.Fatalf("leader = %q, exit %d", out, code)
	}
	out, _, code = tenure(t, "members", "--json", "--socket", socks[0])
	var ms []map[string]any
	if err := json.Unmarshal([]byte(out), &ms); code != 0 || err != nil || len(ms) != 3 {
		t.Fatalf("members --json = %q (exit %d, %v)", out, code, err)
	}
	out, _, _ = tenure(t, "members", "--socket", socks[0])
	if !strings.Contains(out, "leader,voter") || strings.Count(out, "alive") != 3 {
		t.Fatalf("members table:\n%s", out)
	}
	checkCommands(t, socks)
}

// checkCommands exercises leader --check and force-leave on a running
// cluster whose leader is n3 (socks[2]).
func checkCommands(t *testing.T, socks []string) {
	out, _, _ := tenure(t, "status", "--json", "--socket", socks[2])
	var st struct {
		Epoch  uint64 `json:"epoch"`
		Quorum *struct{ Have, Need int }
		Roster *struct {
			Voters []string `json:"voters"`
		}
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Quorum == nil || st.Roster == nil || len(st.Roster.Voters) != 3 {
		t.Fatalf("status --json lacks quorum/roster: %s", out)
	}
	epoch := fmt.Sprint(st.Epoch)
	if _, stderr, code := tenure(t, "leader", "--check", epoch, "--socket", socks[2]); code != 0 {
		t.Fatalf("leader --check %s on the leader: exit %d %s", epoch, code, stderr)
	}
	if _, _, code := tenure(t, "leader", "--check", epoch, "--socket", socks[0]); code != 1 {
		t.Fatalf("leader --check on a follower: exit %d, want 1", code)
	}
	if _, _, code := tenure(t, "leader", "--check", "1"+epoch, "--socket", socks[2]); code != 1 {
		t.Fatalf("leader --check of another epoch: exit %d, want 1", code)
	}
	if _, stderr, code := tenure(t, "force-leave", "--socket", socks[0], "nosuch"); code != 1 || !strings.Contains(stderr, "not found") {
		t.Fatalf("force-leave of an unknown voter: exit %d, %q", code, stderr)
	}
}

func TestLeaderExitsOneWithoutLeader(t *testing.T) {
	socks := startAgents(t, 1, func(c *agent.Config) {
		e := agent.LocalElection()
		e.StartupDelay = time.Hour // never campaigns during the test
		c.Election = &e
	})
	out, stderr, code := tenure(t, "leader", "--socket", socks[0])
	if code != 1 || strings.TrimSpace(stderr) != "no leader" || out != "" {
		t.Fatalf("leader = %q / %q, exit %d; want exit 1 and \"no leader\" on stderr", out, stderr, code)
	}
	_, stderr, code = tenure(t, "resign", "--socket", socks[0])
	if code != 1 || !strings.Contains(stderr, "not the leader") {
		t.Fatalf("resign = %q, exit %d", stderr, code)
	}
}

func TestClientCommandsWithoutAgent(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "none.sock")
	for _, cmd := range []string{"status", "leader", "members", "resign", "watch"} {
		out, stderr, code := tenure(t, cmd, "--socket", sock)
		if code != 2 || out != "" || !strings.Contains(stderr, "no tenure agent is listening on "+sock) {
			t.Errorf("%s without agent: exit %d, stdout %q, stderr %q", cmd, code, out, stderr)
		}
		if strings.Contains(stderr, "goroutine") || strings.Contains(stderr, "msgpack") {
			t.Errorf("%s: stderr is not a clear message: %q", cmd, stderr)
		}
	}
}

func TestEnvironmentSetsFlags(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "env.sock")
	cmd := exec.Command(binary, "status")
	cmd.Env = append(os.Environ(), "TENURE_SOCKET="+sock)
	out, _ := cmd.CombinedOutput()
	if !strings.Contains(string(out), sock) {
		t.Fatalf("TENURE_SOCKET not used: %s", out)
	}
}

func TestRunNeedsACommand(t *testing.T) {
	_, stderr, code := tenure(t, "run", "--socket", filepath.Join(t.TempDir(), "x.sock"))
	if code != 2 || !strings.Contains(stderr, "no command") {
		t.Fatalf("run without a command: exit %d, %q", code, stderr)
	}
}

func TestAgentRejectsBadConfig(t *testing.T) {
	_, stderr, code := tenure(t, "agent", "--consistency", "sometimes", "--data-dir", t.TempDir())
	if code != 2 || !strings.Contains(stderr, "consistency") {
		t.Fatalf("bad consistency: exit %d, %q", code, stderr)
	}
	_, stderr, code = tenure(t, "agent", "--log-level", "loud", "--data-dir", t.TempDir())
	if code != 2 || !strings.Contains(stderr, "--log-level") {
		t.Fatalf("bad log level: exit %d, %q", code, stderr)
	}
	for flag, value := range map[string]string{"--socket-mode": "0644x", "--socket-group": "no-such-group-here"} {
		_, stderr, code = tenure(t, "agent", flag, value, "--data-dir", t.TempDir())
		if code != 2 || !strings.Contains(stderr, flag) {
			t.Errorf("%s %s: exit %d, %q", flag, value, code, stderr)
		}
	}
	_, stderr, code = tenure(t, "agent", "--socket-mode", "0066", "--data-dir", t.TempDir())
	if code != 2 || !strings.Contains(stderr, "--socket-mode") {
		t.Errorf("--socket-mode 0066 (owner locked out): exit %d, %q", code, stderr)
	}
}

func TestKeygenAndEncryptFlag(t *testing.T) {
	out, _, code := tenure(t, "keygen")
	key := strings.TrimSpace(out)
	if code != 0 {
		t.Fatalf("keygen exit %d", code)
	}
	if k, err := decodeKey(key); err != nil || len(k) != 32 {
		t.Fatalf("keygen printed %q: %v", key, err)
	}
	if out2, _, _ := tenure(t, "keygen"); strings.TrimSpace(out2) == key {
		t.Fatal("two keygen runs printed the same key")
	}
	for _, bad := range []string{"abc", "c2hvcnQ="} {
		_, stderr, code := tenure(t, "agent", "--encrypt", bad, "--data-dir", t.TempDir())
		if code != 2 || !strings.Contains(stderr, "--encrypt") {
			t.Errorf("--encrypt %q: exit %d, %q; want a usage error naming --encrypt", bad, code, stderr)
		}
	}
}

// TestAgentStartErrorsAreOneClearLine: a port in use and a data dir that
// cannot be created each give one line naming the problem and exit 2.
func TestAgentStartErrorsAreOneClearLine(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cases := map[string][]string{
		"address already in use": {"--peer-bind", busy.Addr().String(), "--data-dir", filepath.Join(dir, "d1")},
		"not a directory":        {"--peer-bind", "127.0.0.1:0", "--data-dir", filepath.Join(file, "sub")},
	}
	for want, args := range cases {
		args = append([]string{"agent", "--bind", "127.0.0.1:0", "--socket", filepath.Join(dir, "s.sock")}, args...)
		_, stderr, code := tenure(t, args...)
		if code != 2 || !strings.Contains(stderr, want) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line saying %q", args, code, stderr, want)
		}
	}
}

// TestSecondAgentOnSameSocketExits: a live agent's socket is never taken
// over; the second agent exits 2 with one clear line.
func TestSecondAgentOnSameSocketExits(t *testing.T) {
	socks := startAgents(t, 1, nil)
	_, stderr, code := tenure(t, "agent", "--bind", "127.0.0.1:0", "--peer-bind", "127.0.0.1:0",
		"--socket", socks[0], "--data-dir", t.TempDir())
	if code != 2 || !strings.Contains(stderr, "another agent is already serving") {
		t.Fatalf("second agent: exit %d, %q", code, stderr)
	}
	if out, _, code := tenure(t, "status", "--socket", socks[0]); code != 0 || !strings.Contains(out, "n1") {
		t.Fatalf("the first agent stopped serving: exit %d %q", code, out)
	}
}

// TestAgentRefusesKeylessNonLoopback: without a cluster key, an agent on an
// address other hosts can reach exits 2 with one line naming the address
// and the ways out; --insecure-no-encryption, or its environment variable,
// lets it go on (here to the next error, a busy port).
func TestAgentRefusesKeylessNonLoopback(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	dir := t.TempDir()
	args := []string{"agent", "--bind", "127.0.0.1:0", "--peer-bind", busy.Addr().String(),
		"--advertise", "10.0.0.1", "--socket", filepath.Join(dir, "s.sock"), "--data-dir", filepath.Join(dir, "d")}
	runs := []struct {
		env  []string
		args []string
		want string
	}{
		{nil, args, "level=ERROR msg=\"tenure agent: cannot start\" err=\"agent: no cluster key, and the advertise address (--advertise) 10.0.0.1 is not a loopback address: anyone who can reach it could join, vote and claim leadership; give every agent the same --encrypt KEY (make one with tenure keygen), or start with --insecure-no-encryption to run in the clear"},
		{nil, append(args, "--insecure-no-encryption"), "address already in use"},
		{[]string{"TENURE_INSECURE_NO_ENCRYPTION=true"}, args, "address already in use"},
	}
	for _, r := range runs {
		_, stderr, code := tenureEnv(t, r.env, r.args...)
		if code != 2 || !strings.Contains(stderr, r.want) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("%v %v: exit %d, stderr %q; want exit 2 and one line saying %q", r.env, r.args, code, stderr, r.want)
		}
	}
}

// TestAgentRefusesKeyTheKeyringFileLacks: --encrypt with a key the keyring
// file does not hold exits 2 with one ERROR line, before anything starts,
// naming the file and the ways out.
func TestAgentRefusesKeyTheKeyringFileLacks(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "keyring")
	old, other := strings.Repeat("A", 43)+"=", strings.Repeat("B", 43)+"="
	if err := os.WriteFile(file, []byte(`["`+old+`"]`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := tenure(t, "agent", "--bind", "127.0.0.1:0", "--peer-bind", "127.0.0.1:0", "--encrypt", other,
		"--socket", filepath.Join(dir, "s.sock"), "--data-dir", filepath.Join(dir, "d"), "--keyring-file", file)
	want := []string{"level=ERROR", "the encrypt key is not in the keyring file " + file + " (it holds 1 other key)",
		"refusing to start", "remove " + file + " and start again", "tenure keys install KEY, then tenure keys use KEY"}
	if code != 2 || !containsAll(stderr, want...) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
		t.Fatalf("exit %d, stderr %q; want exit 2 and one line saying %q", code, stderr, want)
	}
}
