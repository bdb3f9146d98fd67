package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
)

// The README's quick start, as it shows it (continuation lines joined).
const (
	readmeKeygen = `KEY=$(tenure keygen)`
	readmeAgent  = `tenure agent --name web-1 --id 10 --join 10.0.0.11:7946 --join 10.0.0.12:7946 --join 10.0.0.13:7946 --expect 3 --encrypt "$KEY" --data-dir /var/lib/tenure`
	readmeHooks  = `tenure agent ... --hook 'became-leader=/usr/local/bin/promote.sh' --hook 'member-join,member-leave=logger -t tenure "$TENURE_EVENT $TENURE_MEMBER"'`
	readmeRun    = `tenure run --grace 5s -- /usr/local/bin/drain-queue --workers 4`
)

// TestReadmeCommands runs the shell commands README.md shows, in its
// order where it can, on a cluster of three real agents on 127.0.0.1
// started with the quick start's own command line: web-1 and web-2 with
// the quick start's line, web-3 with the hooks example's (its `...` being
// the quick start's flags). Rewritten: the hosts' addresses (to 127.0.0.1
// and free ports), /var/lib/tenure (to a temporary directory), the scripts
// the examples name (to stand-ins that record what they get), `--check 7`
// (to the live epoch). Each agent's own gossip, peer and socket addresses
// come from TENURE_BIND, TENURE_PEER_BIND and TENURE_SOCKET, and
// TENURE_TIMING=local makes it quick (the lease TTL stays the default 10s);
// client commands find their agent through TENURE_SOCKET. The outputs are
// checked against what the README says about them.
func TestReadmeCommands(t *testing.T) {
	d := newDocRun(t, "README.md")
	work := docTempDir(t)
	path := pathWithTenure(t, work, map[string]string{
		// logger, as the member hook calls it: what it was asked to log,
		// and the hook's environment.
		"logger": `printf '%s\n' "$*" >>` + work + `/logger.out; env | sort >` + work + `/logger.env` + "\n",
	})
	d.env = append(d.env, path)
	writeScript(t, filepath.Join(work, "promote.sh"),
		`env | sort >`+work+`/promote.env.tmp && mv `+work+`/promote.env.tmp `+work+`/promote.env; cat >`+work+`/promote.json`+"\n")
	// The command tenure run runs: its arguments and environment, per
	// host, and one line per start.
	writeScript(t, filepath.Join(work, "drain-queue"),
		`{ echo "ARGS=$*"; env | sort; } >`+work+`/run.env.tmp.$$ && mv `+work+`/run.env.tmp.$$ `+work+`/run.env.$TENURE_LEADER
echo "$TENURE_LEADER $TENURE_EPOCH" >>`+work+`/runs.log
exec sleep 600
`)

	// Try it, and Development: make targets, the CI script.
	d.skip("go run ./cmd/tenure demo", "TestDemoTellsTheFencingStory runs the demo")
	for _, target := range []string{"test", "check", "fuzz-short", "nemesis", "bench-compare"} {
		// make -n: the target exists; running it here would run the suite
		// inside the suite.
		d.command("make " + target)
		if out, errOut, code := d.sh("make -n "+target, nil); code != 0 || out == "" {
			t.Errorf("make -n %s: exit %d %s%s", target, code, out, errOut)
		}
	}
	d.command("make soak SCHEDULES=200")
	if out, errOut, code := d.sh("make -n soak SCHEDULES=200", nil); code != 0 || !strings.Contains(out, "-nemesis.schedules=200") {
		t.Errorf("make -n soak SCHEDULES=200: exit %d, want -nemesis.schedules=200 in %s%s", code, out, errOut)
	}
	d.command(".ci/run")
	if fi, err := os.Stat(filepath.Join(d.root, ".ci/run")); err != nil || fi.Mode()&0o111 == 0 {
		t.Errorf(".ci/run is not an executable file: %v", err)
	}

	// Quick start: a key, then three agents.
	key := d.assign(readmeKeygen)
	if k, err := decodeKey(key); err != nil || len(k) != keyBytes {
		t.Fatalf("KEY=$(tenure keygen) gave %q: %v", key, err)
	}
	base := docPorts(t, 9) // gossip and peer ports, then the HTTP ones
	hostAddrs := []string{
		"10.0.0.11:7946", fmt.Sprintf("127.0.0.1:%d", base),
		"10.0.0.12:7946", fmt.Sprintf("127.0.0.1:%d", base+2),
		"10.0.0.13:7946", fmt.Sprintf("127.0.0.1:%d", base+4),
	}
	sock := func(i int) string { return filepath.Join(work, fmt.Sprintf("web-%d.sock", i)) }
	at := func(i int) []string { return []string{"TENURE_SOCKET=" + sock(i)} }
	agentEnv := func(i int) []string {
		return []string{
			fmt.Sprintf("TENURE_BIND=127.0.0.1:%d", base+2*(i-1)),
			fmt.Sprintf("TENURE_PEER_BIND=127.0.0.1:%d", base+2*(i-1)+1),
			"TENURE_SOCKET=" + sock(i),
			"TENURE_TIMING=local",
			"TENURE_JOURNAL=" + filepath.Join(work, fmt.Sprintf("web-%d.journal", i)),
			fmt.Sprintf("TENURE_HTTP_ADDR=127.0.0.1:%d", base+5+i),
		}
	}
	dataDir := func(i int) []string {
		return []string{"/var/lib/tenure", filepath.Join(work, fmt.Sprintf("data-%d", i))}
	}
	agents := map[int]*bgProc{
		1: d.start(readmeAgent, agentEnv(1), append(hostAddrs, dataDir(1)...)...),
		2: d.start(readmeAgent, agentEnv(2), append(append(hostAddrs, dataDir(2)...), "--name web-1 --id 10", "--name web-2 --id 20")...),
	}
	quickFlags := strings.TrimPrefix(readmeAgent, "tenure agent ")
	quickFlags = strings.Replace(quickFlags, "--name web-1 --id 10", "--name web-3 --id 30", 1)
	agents[3] = d.start(readmeHooks, agentEnv(3), append(append([]string{
		"tenure agent ...", "tenure agent " + quickFlags,
		"/usr/local/bin/promote.sh", filepath.Join(work, "promote.sh")},
		hostAddrs...), dataDir(3)...)...)
	leaderIs := func(name string) func() string {
		return func() string {
			for i := 1; i <= 3; i++ {
				if agents[i] == nil {
					continue
				}
				if agents[i].exited() {
					t.Fatalf("web-%d exited: %v\n%s", i, agents[i].err, agents[i].stderr.String())
				}
				out, errOut, _ := tenure(t, "leader", "--socket", sock(i))
				if !strings.HasPrefix(out, name+" ") {
					return fmt.Sprintf("web-%d says %q %q", i, out, errOut)
				}
			}
			return ""
		}
	}
	eventually(t, 30*time.Second, "leader web-3 on every agent", leaderIs("web-3"))

	// Then, on any host.
	leaderCmd := d.command("tenure leader")
	out := d.mustShell("tenure leader", at(1))
	m := regexp.MustCompile(`^web-3 \(id 30\) epoch (\d+)\n$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("tenure leader printed %q", out)
	}
	epoch := m[1]
	if ex := regexp.MustCompile(`^"([^"]+)"`).FindStringSubmatch(leaderCmd.Comment); ex == nil ||
		regexp.MustCompile(`epoch \d+$`).ReplaceAllString(ex[1], "epoch "+epoch) != strings.TrimSpace(out) {
		t.Errorf("README shows tenure leader printing %q; it printed %q", leaderCmd.Comment, out)
	}
	out = d.mustShell("tenure leader --check 7", at(3), "--check 7", "--check "+epoch)
	if !strings.HasPrefix(out, "epoch "+epoch+" is current: this node leads") {
		t.Errorf("leader --check on the leader printed %q", out)
	}
	if _, _, code := d.shell("tenure leader --check 7", at(1), "--check 7", "--check "+epoch); code != 1 {
		t.Errorf("leader --check on a follower: exit %d, want 1", code)
	}
	checkStatusJSON(t, d, d.mustShell("tenure status --json", at(3)))
	checkMembersTable(t, d.mustShell("tenure members", at(1)))

	watch := d.start("tenure watch --json", at(1))
	eventually(t, 10*time.Second, "first line of tenure watch --json", func() string {
		if len(watch.lines()) == 0 {
			return "none yet"
		}
		return ""
	})
	var ev struct {
		Event  string `json:"event"`
		Time   string `json:"time"`
		Node   string `json:"node"`
		Leader *struct {
			Node  string `json:"node"`
			Epoch uint64 `json:"epoch"`
		} `json:"leader"`
	}
	if err := json.Unmarshal([]byte(watch.lines()[0]), &ev); err != nil || ev.Event == "" || ev.Leader == nil || ev.Leader.Node != "web-3" {
		t.Fatalf("tenure watch --json first line %q: %v", watch.lines()[0], err)
	}

	// Singleton work: tenure run on every host; web-3's starts the command.
	var runners []*bgProc
	for i := 1; i <= 3; i++ {
		runners = append(runners, d.start(readmeRun, at(i), "/usr/local/bin/drain-queue", filepath.Join(work, "drain-queue")))
	}
	var runEnv map[string]string
	eventually(t, 15*time.Second, "tenure run's command started on web-3", func() string {
		if _, err := os.Stat(filepath.Join(work, "run.env.web-3")); err != nil {
			return err.Error()
		}
		runEnv = envFile(t, filepath.Join(work, "run.env.web-3"))
		return ""
	})
	if runEnv["ARGS"] != "--workers 4" || runEnv["TENURE_SOCKET"] != sock(3) || runEnv["TENURE_EPOCH"] != epoch {
		t.Errorf("tenure run's command on web-3 got %v; the leader is web-3, epoch %s", runEnv, epoch)
	}
	runVars := varsNamed(docSection(t, "README.md", "It starts the command only while the local agent leads", "added to its environment"))
	for _, v := range tenureVars(runEnv) {
		if !slices.Contains(runVars, v) && !slices.Contains(at(3), v+"="+runEnv[v]) {
			t.Errorf("tenure run's command gets %s=%s, which the README does not list (%v)", v, runEnv[v], runVars)
		}
	}
	for _, v := range runVars {
		if _, ok := runEnv[v]; !ok {
			t.Errorf("the README says tenure run's command gets %s; it does not: %v", v, runEnv)
		}
	}

	// Moving leadership, in the README's order.
	notLeading := func(names ...string) func() string {
		return func() string {
			out, _, _ := tenure(t, "leader", "--socket", sock(1))
			for _, n := range names {
				if out == "" || strings.HasPrefix(out, n+" ") {
					return fmt.Sprintf("web-1 says %q", out)
				}
			}
			return ""
		}
	}
	if out := d.mustShell("tenure resign", at(3)); out != "resigned\n" {
		t.Errorf("tenure resign printed %q", out)
	}
	eventually(t, 15*time.Second, "leader web-2 after web-3 resigned", leaderIs("web-2"))
	if out := d.mustShell("tenure resign --hold 10m", at(2)); out != "resigned\n" {
		t.Errorf("tenure resign --hold 10m printed %q", out)
	}
	// web-3's own hold (3s with the local timing) may be over or not.
	eventually(t, 15*time.Second, "a leader other than web-2", notLeading("web-2"))
	if out := d.mustShell("tenure drain", at(1)); !strings.HasPrefix(out, "drained: ") {
		t.Errorf("tenure drain printed %q", out)
	}
	if out, _, _ := tenure(t, "status", "--socket", sock(1)); !strings.Contains(out, "drained:") {
		t.Errorf("status of a drained node:\n%s", out)
	}
	if out, _, _ := tenure(t, "members", "--socket", sock(1)); !regexp.MustCompile(`(?m)^web-1 .*drained`).MatchString(out) {
		t.Errorf("members does not show web-1 drained:\n%s", out)
	}
	eventually(t, 15*time.Second, "leader web-3 (web-1 drained, web-2 held)", leaderIs("web-3"))
	if out := d.mustShell("tenure drain --off", at(1)); !strings.HasPrefix(out, "drain lifted") {
		t.Errorf("tenure drain --off printed %q", out)
	}
	if out, _, _ := tenure(t, "status", "--socket", sock(1)); strings.Contains(out, "drained:") {
		t.Errorf("status after drain --off still says drained:\n%s", out)
	}
	// Asked of a follower, to a node in a 10-minute resign hold: the hold
	// keeps web-2 out of elections, not from a transfer.
	out = d.mustShell("tenure transfer web-2", at(1))
	if !regexp.MustCompile(`^web-2 leads, epoch \d+\n$`).MatchString(out) {
		t.Errorf("tenure transfer web-2 printed %q", out)
	}
	eventually(t, 15*time.Second, "leader web-2 after the transfer", leaderIs("web-2"))
	eventually(t, 15*time.Second, "tenure run's command started on web-2", func() string {
		b, _ := os.ReadFile(filepath.Join(work, "runs.log"))
		out, _, _ := tenure(t, "leader", "--socket", sock(2))
		if f := strings.Fields(out); len(f) != 5 || !strings.HasSuffix(string(b), "web-2 "+f[4]+"\n") {
			return fmt.Sprintf("runs.log: %q; leader %q", b, out)
		}
		return ""
	})
	for _, r := range runners {
		r.stop(syscall.SIGTERM, 15*time.Second)
	}
	if n := len(watch.lines()); n < 4 {
		t.Errorf("tenure watch --json printed %d lines through four changes of leader: %q", n, watch.lines())
	}
	watch.stop(syscall.SIGINT, 5*time.Second)

	promote := envFile(t, filepath.Join(work, "promote.env"))
	if promote["TENURE_EVENT"] != "became-leader" || promote["TENURE_NODE"] != "web-3" || promote["TENURE_SOCKET"] != sock(3) {
		t.Errorf("the became-leader hook got %v", promote)
	}
	if b, err := os.ReadFile(filepath.Join(work, "promote.json")); err != nil || !json.Valid(b) {
		t.Errorf("the became-leader hook's stdin %q is not JSON: %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(work, "logger.out")); err != nil || !regexp.MustCompile(`(?m)^-t tenure member-join web-[12]$`).Match(b) {
		t.Errorf("the member-join hook logged %q (%v)", b, err)
	}
	hookVars := varsNamed(docSection(t, "README.md", "Each run is `/bin/sh -c COMMAND`", "event as JSON on stdin"))
	got := map[string]bool{}
	for _, v := range append(tenureVars(promote), tenureVars(envFile(t, filepath.Join(work, "logger.env")))...) {
		got[v] = true
		if !slices.Contains(hookVars, v) {
			t.Errorf("hooks get %s, which the README does not list (%v)", v, hookVars)
		}
	}
	for _, v := range hookVars {
		if !got[v] && v != "TENURE_TASK" && v != "TENURE_TOKEN" { // task events: agent/named_test.go
			t.Errorf("the README says hooks get %s; neither hook run got it", v)
		}
	}

	checkReadmeLocks(t, d, work, at)

	// Key rotation, from web-1.
	d.assign(`OLD="$KEY"`)
	newKey := d.assign(`NEW=$(tenure keygen)`)
	for _, step := range []string{`tenure keys install "$NEW"`, `tenure keys use "$NEW"`, `tenure keys remove "$OLD"`} {
		verb := strings.Fields(step)[2]
		if out := d.mustShell(step, at(1)); out != verb+": done on 3 of 3 members\n" {
			t.Errorf("%s printed %q", step, out)
		}
	}
	if out, _, code := tenure(t, "keys", "list", "--socket", sock(1)); code != 0 || out != newKey+"  installed on 3 of 3, primary on 3\n" {
		t.Errorf("keys list after the rotation: exit %d %q", code, out)
	}

	httpAddrs := []string{}
	for i := 1; i <= 3; i++ {
		httpAddrs = append(httpAddrs, fmt.Sprintf("127.0.0.1:%d", base+5+i))
	}
	checkMonitoring(t, httpAddrs, 2, []string{sock(1), sock(2), sock(3)})

	// Stop: a follower first (web-3's member-leave hook runs), then the rest.
	took := agents[1].stop(syscall.SIGTERM, 20*time.Second)
	t.Logf("web-1 (a follower) stopped %v after SIGTERM", took)
	eventually(t, 10*time.Second, "member-leave hook run", func() string {
		b, _ := os.ReadFile(filepath.Join(work, "logger.out"))
		if !strings.Contains(string(b), "-t tenure member-leave web-1") {
			return fmt.Sprintf("logger got %q", b)
		}
		return ""
	})
	for _, i := range []int{2, 3} {
		took := agents[i].stop(syscall.SIGTERM, 20*time.Second)
		t.Logf("web-%d stopped %v after SIGTERM", i, took)
	}
	checkJournals(t, work)
}

// checkMonitoring compares what the agents serve on --http-addr with the
// README's Monitoring table: every metric it names is served by one of
// the agents (a counter appears once it has counted: by now all have),
// /health answers 200 everywhere, /health/leader 200 on the leader (agent
// number leader, from 1) and 503 elsewhere, and /v1/status has the keys of
// `tenure status --json`. Every metric examples/grafana's dashboard queries
// is served too.
func checkMonitoring(t *testing.T, addrs []string, leader int, socks []string) {
	t.Helper()
	get := func(url string) (int, string) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	served := map[string]bool{}
	for i, addr := range addrs {
		code, body := get("http://" + addr + "/metrics")
		if code != 200 {
			t.Fatalf("/metrics of agent %d: %d", i+1, code)
		}
		for _, line := range strings.Split(body, "\n") {
			if line != "" && line[0] != '#' {
				served[strings.FieldsFunc(line, func(r rune) bool { return r == '{' || r == ' ' })[0]] = true
			}
		}
		if code, body := get("http://" + addr + "/health"); code != 200 {
			t.Errorf("/health of agent %d: %d %s", i+1, code, body)
		}
		want := map[bool]int{true: 200, false: 503}[i+1 == leader]
		if code, body := get("http://" + addr + "/health/leader"); code != want {
			t.Errorf("/health/leader of agent %d: %d %s, want %d", i+1, code, body, want)
		}
		_, body = get("http://" + addr + "/v1/status")
		out, _, _ := tenure(t, "status", "--json", "--socket", socks[i])
		var a, b map[string]any
		if json.Unmarshal([]byte(body), &a) != nil || json.Unmarshal([]byte(out), &b) != nil || strings.Join(slices.Sorted(maps.Keys(a)), ",") != strings.Join(slices.Sorted(maps.Keys(b)), ",") {
			t.Errorf("/v1/status of agent %d is not the JSON of status --json:\n%s\n%s", i+1, body, out)
		}
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `/metrics` \\|.*$").FindString(string(readme))
	if row == "" {
		t.Fatal("README.md has no /metrics row in its Monitoring table: update this test")
	}
	var named []string
	for _, m := range regexp.MustCompile("`(_?[a-z_]+)(?:\\{[^}]*\\})?`").FindAllStringSubmatch(row, -1) {
		name := m[1]
		switch {
		case strings.HasPrefix(name, "tenure_"):
		case strings.HasPrefix(name, "_") && len(named) > 0: // tenure_quorum_have`/`_need
			prev := named[len(named)-1]
			name = prev[:strings.LastIndex(prev, "_")] + name
		default:
			continue
		}
		named = append(named, name)
	}
	if len(named) < 10 {
		t.Fatalf("found only %v in the README's /metrics row: update this test", named)
	}
	for _, name := range named {
		if !served[name] {
			t.Errorf("the README names the metric %s; no agent serves it", name)
		}
	}
	dash, err := os.ReadFile("../../examples/grafana/tenure-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range regexp.MustCompile(`tenure_[a-z_]+`).FindAllString(string(dash), -1) {
		if !served[name] {
			t.Errorf("examples/grafana's dashboard queries %s; no agent serves it", name)
		}
		if !slices.Contains(named, name) {
			t.Errorf("examples/grafana's dashboard queries %s, which the README's metrics list lacks", name)
		}
	}
}

// checkStatusJSON compares the keys of `tenure status --json` with the
// README's comment on that command.
func checkStatusJSON(t *testing.T, d *docRun, out string) {
	t.Helper()
	var st map[string]any
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("status --json: %v: %q", err, out)
	}
	listed := map[string]bool{}
	for _, k := range strings.Split(d.command("tenure status --json").Comment, ",") {
		k, note, _ := strings.Cut(strings.TrimSpace(k), " ")
		listed[k] = true
		if _, ok := st[k]; !ok && note == "" {
			t.Errorf("the README lists %q among the keys of status --json; it is missing: %s", k, out)
		}
	}
	for k := range st {
		if !listed[k] {
			t.Errorf("status --json has the key %q, which the README does not list", k)
		}
	}
}

// checkMembersTable checks `tenure members` against the README's comment:
// name, id, address, peer address, status, role.
func checkMembersTable(t *testing.T, out string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 4 || strings.Join(strings.Fields(lines[0]), " ") != "NAME ID ADDRESS PEER STATUS ROLE" {
		t.Fatalf("tenure members:\n%s", out)
	}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		if len(f) != 6 || f[4] != "alive" || !strings.Contains(f[5], "voter") {
			t.Errorf("tenure members row %q", l)
		}
	}
}

// checkJournals checks the --journal lines against the README's example,
// {"t":…,"node":"web-1","event":"lead","epoch":7,"until":…}, and its
// events start, lead, extend and end.
func checkJournals(t *testing.T, work string) {
	t.Helper()
	events := map[string]bool{}
	for i := 1; i <= 3; i++ {
		b, err := os.ReadFile(filepath.Join(work, fmt.Sprintf("web-%d.journal", i)))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var e map[string]any
			if err := json.Unmarshal([]byte(line), &e); err != nil {
				t.Fatalf("journal line %q: %v", line, err)
			}
			var keys []string
			for k := range e {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			if strings.Join(keys, ",") != "epoch,event,node,t,until" || e["node"] != fmt.Sprintf("web-%d", i) {
				t.Errorf("web-%d journal line %s: want the keys t, node, event, epoch, until", i, line)
			}
			events[e["event"].(string)] = true
		}
	}
	for _, ev := range []string{"start", "lead", "extend", "end"} {
		if !events[ev] {
			t.Errorf("no journal line with event %q (saw %v)", ev, events)
		}
	}
	if len(events) != 4 {
		t.Errorf("journal events %v: the README names start, lead, extend and end", events)
	}
}

// TestReadmeEnvironmentFlags checks the README's paragraph on the
// environment: every flag of `tenure agent`, `--socket` of every command,
// and the `--grace` and `--log-level` of `tenure run` and `tenure lock` are read from
// TENURE_<FLAG>; every other flag is not, and the README names it among
// those that cannot be set that way.
func TestReadmeEnvironmentFlags(t *testing.T) {
	para := docSection(t, "README.md", "Every flag of `tenure agent`, `--socket` of every command", "cannot")
	cannot := docSection(t, "README.md", "Flags that shape one invocation", ").")
	for _, want := range []string{"`--grace`", "`--log-level`"} {
		if !strings.Contains(para, want) {
			t.Fatalf("the README's environment paragraph no longer names %s: update this test", want)
		}
	}
	var walk func(prefix string, cmds []*cli.Command)
	walk = func(prefix string, cmds []*cli.Command) {
		for _, c := range cmds {
			if c.Hidden {
				continue // not for users (tenure demo --compare's holder)
			}
			name := prefix + " " + c.Name
			for _, f := range c.Flags {
				flag := f.Names()[0]
				var env []string
				if df, ok := f.(cli.DocGenerationFlag); ok {
					env = df.GetEnvVars()
				}
				want := "TENURE_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
				settable := c.Name == "agent" || flag == "socket" || ((c.Name == "run" || c.Name == "lock") && (flag == "grace" || flag == "log-level"))
				switch {
				case settable && (len(env) != 1 || env[0] != want):
					t.Errorf("%s --%s: the README says %s sets it; it reads %v", name, flag, want, env)
				case !settable && len(env) != 0:
					t.Errorf("%s --%s is read from %v, which the README does not say", name, flag, env)
				case !settable && !strings.Contains(cannot, "`--"+flag+"`"):
					t.Errorf("%s --%s is not read from the environment; the README's list of such flags lacks it: %q", name, flag, cannot)
				}
			}
			walk(name, c.Subcommands)
		}
	}
	walk("tenure", newApp().Commands)
}

// TestReadmeGoSnippetCompiles compiles README.md's Go example as the body
// of a function (with ctx and myEpoch declared, and every name its
// comments mention, such as rpc.ErrNoLeader and res.Current, used), against
// this checkout, through a build overlay: nothing is written into the tree.
func TestReadmeGoSnippetCompiles(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```go\n(.*?)```").FindSubmatch(b)
	if m == nil {
		t.Fatal("README.md has no ```go block: update this test")
	}
	snippet := string(m[1])
	var uses []string
	for _, line := range strings.Split(snippet, "\n") {
		if _, comment, ok := strings.Cut(line, "//"); ok {
			uses = append(uses, regexp.MustCompile(`\b(?:rpc|res|leader|cl)\.[A-Z]\w*`).FindAllString(comment, -1)...)
		}
	}
	var src strings.Builder
	src.WriteString("package readmesnippet\n\nimport (\n\t\"context\"\n\t\"errors\"\n\n\t\"github.com/tenurehq/tenure/rpc\"\n)\n\n")
	src.WriteString("var _ = errors.Is\n\nfunc snippet(ctx context.Context, myEpoch uint64) {\n")
	src.WriteString(snippet)
	src.WriteString("\t_, _, _, _ = cl, leader, res, err\n")
	for _, u := range uses {
		src.WriteString("\t_ = " + u + "\n")
	}
	src.WriteString("}\n")
	dir := t.TempDir()
	file := filepath.Join(dir, "snippet.go")
	if err := os.WriteFile(file, []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	pkg, err := filepath.Abs("readmesnippet_overlay")
	if err != nil {
		t.Fatal(err)
	}
	overlay, _ := json.Marshal(map[string]any{"Replace": map[string]string{filepath.Join(pkg, "snippet.go"): file}})
	if err := os.WriteFile(filepath.Join(dir, "overlay.json"), overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-overlay", filepath.Join(dir, "overlay.json"), "-o", os.DevNull, "./readmesnippet_overlay")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("README.md's Go example does not compile: %v\n%s\n%s", err, out, src.String())
	}
	if len(uses) < 2 {
		t.Errorf("found only %v in the example's comments: update this test", uses)
	}
}

// TestDocsNameFlagsThatExist: every --flag README.md and the examples'
// READMEs mention, in commands or in prose, is a flag of some tenure
// command, unless it belongs to another program the doc shows (listed
// here with that program).
func TestDocsNameFlagsThatExist(t *testing.T) {
	others := map[string]string{
		"--workers":     "drain-queue, the README's example command",
		"--data":        "curl",
		"--listen":      "fenced-store",
		"--fence":       "fenced-store",
		"--reuid":       "setpriv",
		"--regid":       "setpriv",
		"--init-groups": "setpriv",
		"--now":         "systemctl",
		"--offline":     "systemd-analyze",
	}
	flags := map[string]bool{"--help": true, "--version": true}
	var walk func(cmds []*cli.Command)
	walk = func(cmds []*cli.Command) {
		for _, c := range cmds {
			for _, f := range c.Flags {
				for _, n := range f.Names() {
					flags["--"+n] = true
				}
			}
			walk(c.Subcommands)
		}
	}
	walk(newApp().Commands)
	docs, err := filepath.Glob("../../examples/*/README.md")
	if err != nil {
		t.Fatal(err)
	}
	used := map[string]bool{}
	for _, doc := range append(docs, "../../README.md") {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range regexp.MustCompile(`--[a-z][a-z0-9-]*`).FindAllString(string(b), -1) {
			switch {
			case flags[f]:
			case others[f] != "":
				used[f] = true
			default:
				t.Errorf("%s names %s, which no tenure command has", strings.TrimPrefix(doc, "../../"), f)
			}
		}
	}
	for f, prog := range others {
		if !used[f] {
			t.Errorf("no doc names %s (of %s) any more: drop it from this test", f, prog)
		}
	}
}

// TestReadmeLayout: every directory the README's layout table names
// exists, and the table names every example and every package under
// agent/.
func TestReadmeLayout(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z/]+/)` \\| (.*) \\|$").FindAllStringSubmatch(string(b), -1) {
		rows[m[1]] = m[2]
		if fi, err := os.Stat(filepath.Join("../..", m[1])); err != nil || !fi.IsDir() {
			t.Errorf("the layout table names %s, which is not a directory", m[1])
		}
	}
	if len(rows) < 5 {
		t.Fatalf("found only %v in the README's layout table: update this test", rows)
	}
	for dir, want := range map[string]string{"examples": "`%s/`", "agent": "`agent/%s`"} {
		entries, err := os.ReadDir(filepath.Join("../..", dir))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if e.IsDir() && !strings.Contains(rows[dir+"/"], fmt.Sprintf(want, e.Name())) {
				t.Errorf("the layout table's %s/ row does not name %s", dir, e.Name())
			}
		}
	}
}

// checkReadmeLocks runs the README's "Locks, tasks and partitions"
// commands on the README's cluster: the lock's command gets TENURE_LOCK
// and TENURE_TOKEN and its exit code is passed through; a task run on two
// hosts starts once, with TENURE_TASK and TENURE_TOKEN; a group of twelve
// partitions run on the three hosts is divided among them, as `tenure
// partitions` shows.
func checkReadmeLocks(t *testing.T, d *docRun, work string, at func(int) []string) {
	t.Helper()
	writeScript(t, filepath.Join(work, "migrate.sh"), `env | sort >`+work+`/migrate.env; exit 7`+"\n")
	_, errOut, code := d.shell("tenure lock --timeout 30s migrations -- ./migrate.sh", at(1), "./migrate.sh", filepath.Join(work, "migrate.sh"))
	if code != 7 {
		t.Errorf("tenure lock exited %d, want the command's 7: %s", code, errOut)
	}
	if env := envFile(t, filepath.Join(work, "migrate.env")); env["TENURE_LOCK"] != "migrations" || env["TENURE_TOKEN"] == "" {
		t.Errorf("the lock's command got TENURE_LOCK=%q TENURE_TOKEN=%q", env["TENURE_LOCK"], env["TENURE_TOKEN"])
	}
	writeScript(t, filepath.Join(work, "report.sh"), `echo "$TENURE_TASK $TENURE_TOKEN" >>`+work+`/report.log; exec sleep 600`+"\n")
	for i := 1; i <= 2; i++ {
		d.start("tenure run --task nightly-report -- ./report.sh", at(i), "./report.sh", filepath.Join(work, "report.sh"))
	}
	writeScript(t, filepath.Join(work, "consume.sh"), `echo "$TENURE_PARTITIONS" >`+work+`/consume.$$; exec sleep 600`+"\n")
	for i := 1; i <= 3; i++ {
		d.start("tenure run --group orders --partitions 12 -- ./consume.sh", at(i), "./consume.sh", filepath.Join(work, "consume.sh"))
	}
	eventually(t, 30*time.Second, "the task started once", func() string {
		b, _ := os.ReadFile(filepath.Join(work, "report.log"))
		if lines := strings.Fields(string(b)); len(lines) != 2 || lines[0] != "nightly-report" {
			return fmt.Sprintf("report.log %q", b)
		}
		return ""
	})
	eventually(t, 40*time.Second, "twelve partitions over three hosts", func() string {
		out, _, code := tenure(t, append(append([]string{"partitions"}, socketArgs(at(1))...), "orders")...)
		count := map[string]int{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
			if f := strings.Fields(line); len(f) >= 2 && f[1] != "-" {
				count[f[1]]++
			}
		}
		if code != 0 || len(count) != 3 || count["web-1"] != 4 || count["web-2"] != 4 {
			return fmt.Sprintf("exit %d: %s", code, out)
		}
		return ""
	})
	d.command("tenure partitions orders")
}

// socketArgs turns a host's environment (TENURE_SOCKET=...) into --socket
// arguments.
func socketArgs(env []string) []string {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "TENURE_SOCKET="); ok {
			return []string{"--socket", v}
		}
	}
	return nil
}
