package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/tenurehq/tenure/agent"
)

// TestFencedStoreReadme runs examples/fenced-store/README.md: the store
// with --listen (on a free port), every curl line, whose output must hold
// the lines the README shows under it, in order, and the `tenure run` line
// against a real agent, once on a fresh store (the write lands, with the
// term's epoch) and once on the store that has seen token 34 (fenced off:
// curl -f fails), and the store with --fence per-key with its curl lines.
// `go run ./examples/fenced-store` is rewritten to a binary built from the
// same package.
func TestFencedStoreReadme(t *testing.T) {
	d := newDocRun(t, "examples/fenced-store/README.md")
	work := docTempDir(t)
	d.env = append(d.env, pathWithTenure(t, work, nil))
	store := filepath.Join(work, "fenced-store")
	if out, errOut, code := d.sh("go build -o "+store+" ./examples/fenced-store", nil); code != 0 {
		t.Fatalf("build fenced-store: %s%s", out, errOut)
	}
	port := docPorts(t, 3)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	const listenLine = "go run ./examples/fenced-store --data-dir /tmp/store --listen 127.0.0.1:9090"
	startStore := func(dataDir, addr string) *bgProc {
		p := d.start(listenLine, nil, "go run ./examples/fenced-store", store,
			"/tmp/store", dataDir, "127.0.0.1:9090", addr)
		eventually(t, 10*time.Second, "fenced-store serving", func() string {
			if p.exited() {
				t.Fatalf("fenced-store exited: %v\n%s", p.err, p.stderr.String())
			}
			if !strings.Contains(p.stderr.String(), "msg=serving") {
				return "not yet"
			}
			return ""
		})
		return p
	}
	// The first line differs only by listening on the default address,
	// which the store's usage states.
	d.skip("go run ./examples/fenced-store --data-dir /tmp/store", "listens on the fixed port 8080; the --listen line runs instead, and the default is checked from -h")
	if _, errOut, _ := d.sh(store+" -h", nil); !strings.Contains(errOut, `(default "127.0.0.1:8080")`) {
		t.Errorf("fenced-store -h does not give 127.0.0.1:8080 as the default --listen:\n%s", errOut)
	}

	srv := startStore(filepath.Join(work, "store"), addr)
	curls := []string{
		"curl -X PUT -H 'Fencing-Token: 34' --data 'written in term 34' http://127.0.0.1:8080/kv/primary",
		"curl -i -X PUT -H 'Fencing-Token: 33' --data 'written in term 33' http://127.0.0.1:8080/kv/primary",
		"curl -i http://127.0.0.1:8080/kv/primary",
		"curl http://127.0.0.1:8080/fence",
		"curl -i -X PUT --data x http://127.0.0.1:8080/kv/primary",
	}
	for _, c := range curls {
		out := d.mustShell(c, nil, "127.0.0.1:8080", addr)
		checkShownOutput(t, d.command(c), out)
	}
	// "Stop the store (Ctrl-C) and start it again on the same --data-dir:
	// token 33 is still refused."
	srv.stop(syscall.SIGINT, 15*time.Second)
	srv = startStore(filepath.Join(work, "store"), addr)
	checkShownOutput(t, d.command(curls[1]), d.mustShell(curls[1], nil, "127.0.0.1:8080", addr))

	// One fence per key: its own store, on its own port, and its curl lines.
	keyedAddr := fmt.Sprintf("127.0.0.1:%d", port+2)
	const keyedLine = "go run ./examples/fenced-store --data-dir /tmp/keyed --listen 127.0.0.1:8081 --fence per-key"
	keyed := d.start(keyedLine, nil, "go run ./examples/fenced-store", store, "/tmp/keyed", filepath.Join(work, "keyed"), "127.0.0.1:8081", keyedAddr)
	eventually(t, 10*time.Second, "the per-key fenced-store serving", func() string {
		if keyed.exited() {
			t.Fatalf("fenced-store --fence per-key exited: %v\n%s", keyed.err, keyed.stderr.String())
		}
		if !strings.Contains(keyed.stderr.String(), "msg=serving") {
			return "not yet"
		}
		return ""
	})
	for _, c := range []string{
		"curl -X PUT -H 'Fencing-Token: 12' --data 'partition 3, owner A' http://127.0.0.1:8081/kv/part-3",
		"curl -X PUT -H 'Fencing-Token: 5' --data 'partition 7, owner B' http://127.0.0.1:8081/kv/part-7",
		"curl -X PUT -H 'Fencing-Token: 13' --data 'partition 3, owner B' http://127.0.0.1:8081/kv/part-3",
		"curl -i -X PUT -H 'Fencing-Token: 12' --data 'partition 3, owner A' http://127.0.0.1:8081/kv/part-3",
		"curl http://127.0.0.1:8081/fence",
		"curl http://127.0.0.1:8081/fence/part-3",
	} {
		checkShownOutput(t, d.command(c), d.mustShell(c, nil, "127.0.0.1:8081", keyedAddr))
	}
	keyed.stop(syscall.SIGTERM, 15*time.Second)

	// With tenure: one agent (the default 10s lease, for the default 5s
	// grace), and tenure run's command writing with its epoch.
	socks := startAgents(t, 1, func(c *agent.Config) { c.LeaseTTL = 10 * time.Second })
	eventually(t, 20*time.Second, "a leader", func() string {
		if _, errOut, code := tenure(t, "leader", "--socket", socks[0]); code != 0 {
			return errOut
		}
		return ""
	})
	out, _, _ := tenure(t, "status", "--json", "--socket", socks[0])
	var st struct{ Epoch uint64 }
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.Epoch == 0 {
		t.Fatalf("status --json %q: %v", out, err)
	}
	const runLine = `tenure run -- sh -c 'curl -fsS -X PUT -H "Fencing-Token: $TENURE_EPOCH" --data "$(hostname)" http://127.0.0.1:8080/kv/primary'`
	host, _ := os.Hostname()
	freshAddr := fmt.Sprintf("127.0.0.1:%d", port+1)
	fresh := startStore(filepath.Join(work, "fresh"), freshAddr)
	at := []string{"TENURE_SOCKET=" + socks[0]}
	runner := d.start(runLine, at, "127.0.0.1:8080", freshAddr)
	eventually(t, 15*time.Second, "tenure run's write", func() string {
		out, errOut, _ := d.sh("curl -sS -i http://"+freshAddr+"/kv/primary", nil)
		want := fmt.Sprintf("Fencing-Token: %d", st.Epoch)
		if !strings.Contains(out, want) || !strings.HasSuffix(out, "\r\n\r\n"+host) {
			return fmt.Sprintf("want %q and the value %q: %q %s", want, host, out, errOut)
		}
		return ""
	})
	runner.stop(syscall.SIGTERM, 15*time.Second)
	fresh.stop(syscall.SIGTERM, 15*time.Second)

	// The store that has accepted token 34 refuses the term's epoch, and
	// curl -f makes the child fail visibly.
	runner = d.start(runLine, at, "127.0.0.1:8080", addr)
	eventually(t, 15*time.Second, "a fenced-off write that fails the child", func() string {
		if !strings.Contains(runner.stderr.String(), "409") {
			return "tenure run's log: " + runner.stderr.String()
		}
		return ""
	})
	runner.stop(syscall.SIGTERM, 15*time.Second)
	srv.stop(syscall.SIGTERM, 15*time.Second)
}

// checkShownOutput: the lines the doc shows under a command are lines of
// its output, in that order.
func checkShownOutput(t *testing.T, c docCommand, out string) {
	t.Helper()
	lines := strings.Split(strings.ReplaceAll(out, "\r\n", "\n"), "\n")
	i := 0
	for _, want := range c.Output {
		for i < len(lines) && lines[i] != want {
			i++
		}
		if i == len(lines) {
			t.Errorf("`%s` shows the output line %q, which is not in its output (in order):\n%s", c.Text, want, out)
			return
		}
	}
	if len(c.Output) == 0 {
		t.Errorf("`%s` shows no output in the doc: update this test", c.Text)
	}
}

// TestSingletonCronReadme runs examples/singleton-cron/README.md: the demo
// script (in its default mode, on free ports), and the commands of its
// "three ways" against one agent run with the hook line (its `...` being
// this test's name, ports and paths; the default 10s lease TTL, under the
// local timing): `tenure run --grace 5s -- tick.sh`, the became-leader
// hook `tick.sh --once` (which finds its agent through TENURE_SOCKET), and
// the cron line, with `/path/to/` rewritten to the example's directory.
func TestSingletonCronReadme(t *testing.T) {
	d := newDocRun(t, "examples/singleton-cron/README.md")
	work := docTempDir(t)
	d.env = append(d.env, pathWithTenure(t, work, nil))
	tick := filepath.Join(d.root, "examples/singleton-cron/tick.sh")

	base := docPorts(t, 8)
	d.timeout = 2 * time.Minute // the demo takes about 20s, more on a loaded machine
	out, errOut, code := d.shell("BASE_PORT=28946 ./examples/singleton-cron/run-demo.sh", nil, "28946", strconv.Itoa(base))
	if code != 0 {
		t.Fatalf("run-demo.sh: exit %d\n%s\n%s", code, out, errOut)
	}
	d.timeout = 0
	for _, want := range []string{"== starting 3 agents, and on each: tenure run --grace 500ms -- tick.sh",
		"== kill -9 the leader's agent", "lines with an older epoch after the new term's first line: 0", "== done; stopping the agents"} {
		if !strings.Contains(out, want) {
			t.Errorf("run-demo.sh did not print %q:\n%s", want, out)
		}
	}
	d.skip("./examples/singleton-cron/run-demo.sh", "the BASE_PORT line runs the same mode on free ports")
	d.skip("MODE=hook ./examples/singleton-cron/run-demo.sh", "takes 20s; the hook line below checks what it relies on (hooks reach their agent through TENURE_SOCKET)")

	port := docPorts(t, 2)
	sock := filepath.Join(work, "a.sock")
	terms, ticks := filepath.Join(work, "terms.log"), filepath.Join(work, "ticks.log")
	ag := d.start("tenure agent ... --hook 'became-leader=/path/to/tick.sh --once'",
		[]string{"TICK_FILE=" + terms},
		"tenure agent ...", fmt.Sprintf("tenure agent --name host-1 --expect 1 --timing local --bind 127.0.0.1:%d --peer-bind 127.0.0.1:%d --socket %s --data-dir %s",
			port, port+1, sock, filepath.Join(work, "data")),
		"/path/to/tick.sh", tick)
	at := []string{"TENURE_SOCKET=" + sock}
	eventually(t, 20*time.Second, "the became-leader hook's line in terms.log", func() string {
		if ag.exited() {
			t.Fatalf("agent exited: %v\n%s", ag.err, ag.stderr.String())
		}
		b, _ := os.ReadFile(terms)
		if !regexp.MustCompile(`^1 host-1 \S+Z\n$`).Match(b) {
			return fmt.Sprintf("terms.log: %q", b)
		}
		return ""
	})
	runner := d.start("tenure run --grace 5s -- /path/to/tick.sh", append(at, "TICK_FILE="+ticks), "/path/to/tick.sh", tick)
	eventually(t, 15*time.Second, "a tick from tenure run's tick.sh", func() string {
		b, _ := os.ReadFile(ticks)
		if !regexp.MustCompile(`^1 host-1 \S+Z\n`).Match(b) {
			return fmt.Sprintf("ticks.log: %q", b)
		}
		return ""
	})
	runner.stop(syscall.SIGTERM, 15*time.Second)

	job := filepath.Join(work, "job")
	writeScript(t, job, `echo "$TENURE_EPOCH" >`+work+"/job.out\n")
	d.mustShell(`e=$(tenure leader --json | sed -n 's/.*"epoch":\([0-9]*\).*/\1/p') && tenure leader --check "$e" >/dev/null && TENURE_EPOCH=$e /path/to/job`,
		at, "/path/to/job", job)
	if b, err := os.ReadFile(filepath.Join(work, "job.out")); err != nil || string(b) != "1\n" {
		t.Errorf("the cron line's job got TENURE_EPOCH %q (%v), want 1", b, err)
	}
	ag.stop(syscall.SIGTERM, 20*time.Second)
}

// TestPartitionsExampleReadme runs examples/partitions/README.md: the demo
// script on free ports, whose printed output must show all ten partitions
// held by at least four workers before the kill, the killed worker's
// partitions held by surviving workers afterwards (with higher tokens, the
// others unchanged), the late write with the old token refused with 409,
// the new owner's writes landing, and the store's per-key tokens equal to
// the holders'. The per-host line is what run.sh runs on each node.
func TestPartitionsExampleReadme(t *testing.T) {
	d := newDocRun(t, "examples/partitions/README.md")
	base := docPorts(t, 12)
	d.timeout = 3 * time.Minute // the demo takes about 20s, more on a loaded machine
	out, errOut, code := d.shell("BASE_PORT=28946 ./examples/partitions/run.sh", nil, "28946", strconv.Itoa(base))
	if code != 0 {
		t.Fatalf("run.sh: exit %d\n%s\n%s", code, out, errOut)
	}
	d.timeout = 0
	d.skip("./examples/partitions/run.sh", "the BASE_PORT line runs the same on free ports")
	d.skip("STORE_URL=http://store.example:8081 tenure run --grace 5s --group queue --partitions 10 -- /path/to/worker.sh",
		"needs hosts and a store; run.sh runs this line on each of its nodes (with a grace for its 2s lease), as its output says")
	lines := strings.Split(out, "\n")
	// after returns the lines after the first one starting with prefix.
	after := func(prefix string) []string {
		t.Helper()
		for i, l := range lines {
			if strings.HasPrefix(l, prefix) {
				return lines[i+1:]
			}
		}
		t.Fatalf("run.sh did not print a line starting with %q:\n%s", prefix, out)
		return nil
	}
	type holding struct {
		holder string
		token  uint64
	}
	// table parses the `tenure partitions queue` table at the start of ls.
	table := func(ls []string) map[string]holding {
		t.Helper()
		if len(ls) < 11 || !strings.HasPrefix(ls[0], "PARTITION  HOLDER  TOKEN") {
			t.Fatalf("no `tenure partitions` table where expected:\n%s", out)
		}
		held := map[string]holding{}
		for _, l := range ls[1:11] {
			f := strings.Fields(l)
			if len(f) < 4 || f[1] == "-" {
				t.Fatalf("partition not held in %q:\n%s", l, out)
			}
			token, err := strconv.ParseUint(f[2], 10, 64)
			if err != nil {
				t.Fatalf("bad token in %q: %v", l, err)
			}
			held[f[0]] = holding{f[1], token}
		}
		for p := range 10 {
			if _, ok := held[strconv.Itoa(p)]; !ok {
				t.Fatalf("partition %d missing from the table:\n%s", p, out)
			}
		}
		return held
	}
	if !strings.Contains(out, "== on each node: tenure run --grace 500ms --group queue --partitions 10 -- worker.sh") {
		t.Errorf("run.sh no longer says it runs the README's line on each node:\n%s", out)
	}
	before := table(after("== the assignment (tenure partitions queue)"))
	workers := map[string]bool{}
	for _, h := range before {
		workers[h.holder] = true
	}
	if len(workers) < 4 {
		t.Errorf("before the kill, %d workers hold partitions (%v); want at least 4", len(workers), before)
	}

	m := regexp.MustCompile(`(?m)^== kill -9 (node\d)'s agent \(it holds partitions ([\d, ]+); node\d leads\)$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("run.sh did not say which agent it killed:\n%s", out)
	}
	victim, moved := m[1], strings.Split(m[2], ", ")
	for p, h := range before {
		if (h.holder == victim) != slices.Contains(moved, p) {
			t.Fatalf("%s held %v before the kill, but run.sh says it holds %v", victim, before, moved)
		}
	}
	if !strings.Contains(out, "worker "+victim+" (queue): stopped") {
		t.Errorf("%s's worker did not log that it stopped:\n%s", victim, out)
	}
	now := table(after("== waiting for partitions " + m[2] + " to move"))
	for p, h := range now {
		switch {
		case h.holder == victim || !workers[h.holder]:
			t.Errorf("after the kill partition %s is held by %s; want a surviving worker, not %s", p, h.holder, victim)
		case slices.Contains(moved, p) && h.token <= before[p].token:
			t.Errorf("moved partition %s: token %d, not above the old owner's %d", p, h.token, before[p].token)
		case !slices.Contains(moved, p) && h != before[p]:
			t.Errorf("partition %s was not %s's, yet changed from %v to %v", p, victim, before[p], h)
		}
	}

	p := moved[0]
	late := after(fmt.Sprintf("== %s's worker, late, writes to part-%s with its old token %d", victim, p, before[p].token))
	wantStale := fmt.Sprintf(`stale fencing token %d for key "part-%s": this store has already accepted token %d for that key`, before[p].token, p, now[p].token)
	if late[0] != "HTTP/1.1 409 Conflict" || !strings.HasPrefix(late[1], wantStale) {
		t.Errorf("the late write got %q; want 409 and %q", late[:2], wantStale)
	}
	landing := regexp.MustCompile(fmt.Sprintf(`(?m)^part-%s: "%s write (\d+)", 1.5s later "%s write (\d+)"$`, p, now[p].holder, now[p].holder)).FindStringSubmatch(out)
	if landing == nil {
		t.Errorf("run.sh did not show %s's writes to part-%s landing:\n%s", now[p].holder, p, out)
	} else {
		n1, _ := strconv.Atoi(landing[1])
		n2, _ := strconv.Atoi(landing[2])
		if n2 <= n1 {
			t.Errorf("%s's write count did not grow: %q", now[p].holder, landing[0])
		}
	}

	fences := after("== the store's per-key tokens")
	for i := range 10 {
		want := fmt.Sprintf("part-%d %d", i, now[strconv.Itoa(i)].token)
		if i >= len(fences) || fences[i] != want {
			t.Errorf("the store's per-key tokens: want %q at line %d:\n%s", want, i+1, strings.Join(fences, "\n"))
			break
		}
	}
	if !strings.Contains(out, "== done; stopping the workers, the agents and the store") {
		t.Errorf("run.sh did not finish:\n%s", out)
	}
}

// TestSystemdExampleReadme checks examples/systemd: every TENURE_*
// variable of agent.env.example and of the units' Environment= lines
// names a flag; every ExecStart= line (the units' and the README's) uses
// flags its command has; and three agents run from the unit's ExecStart
// with the unit's and agent.env.example's settings (with the commented
// socket group, socket mode and hook lines turned on; the addresses, names,
// IDs, paths and key rewritten for loopback, and TENURE_TIMING=local
// added) elect a leader, answer the README's `tenure status` and `tenure
// members`, run myjob.service's ExecStart on the leader only, open the
// socket to the group, and give the hook TENURE_SOCKET but not the key.
func TestSystemdExampleReadme(t *testing.T) {
	d := newDocRun(t, "examples/systemd/README.md")
	work := docTempDir(t)
	root := d.root
	unit := readUnit(t, filepath.Join(root, "examples/systemd/tenure-agent.service"))
	myjob := readUnit(t, filepath.Join(root, "examples/systemd/myjob.service"))
	envFileVars, commented := readEnvExample(t, filepath.Join(root, "examples/systemd/agent.env.example"))

	agentEnvs := map[string]bool{}
	for _, f := range agentCommand().Flags {
		if df, ok := f.(cli.DocGenerationFlag); ok {
			for _, e := range df.GetEnvVars() {
				agentEnvs[e] = true
			}
		}
	}
	for _, kv := range append(append(unit["Environment"], keysOf(envFileVars)...), keysOf(commented)...) {
		name, _, _ := strings.Cut(kv, "=")
		if !agentEnvs[name] {
			t.Errorf("%s is not the variable of any `tenure agent` flag", name)
		}
	}

	// ExecStart lines: the units' and the one in the README's prose.
	readme, err := os.ReadFile(filepath.Join(root, "examples/systemd/README.md"))
	if err != nil {
		t.Fatal(err)
	}
	execStarts := append(append([]string{}, unit["ExecStart"]...), myjob["ExecStart"]...)
	for _, m := range regexp.MustCompile("`ExecStart=([^`]+)`").FindAllStringSubmatch(string(readme), -1) {
		execStarts = append(execStarts, m[1])
	}
	if len(execStarts) != 3 {
		t.Errorf("ExecStart lines %q: expected the agent's, myjob's and the README's setpriv one", execStarts)
	}
	for _, line := range execStarts {
		checkFlagsExist(t, line)
	}

	// The files the install steps copy exist, and make build writes bin/tenure.
	for _, text := range []string{
		"install -m 0755 bin/tenure /usr/local/bin/tenure",
		"install -m 0600 examples/systemd/agent.env.example /etc/tenure/agent.env",
		"install -m 0644 examples/systemd/tenure-agent.service /etc/systemd/system/",
		"install -m 0644 examples/systemd/myjob.service /etc/systemd/system/",
	} {
		src := strings.Fields(text)[3]
		if src == "bin/tenure" {
			if out, _, _ := d.sh("make -n build", nil); !strings.Contains(out, "-o bin/tenure ./cmd/tenure") {
				t.Errorf("make build does not write bin/tenure: %q", out)
			}
		} else if _, err := os.Stat(filepath.Join(root, src)); err != nil {
			t.Errorf("`%s`: %v", text, err)
		}
		d.skip(text, "installs into the system; the test checks the file it copies exists")
	}
	for _, text := range []string{"install -d -m 0700 /etc/tenure", "$EDITOR /etc/tenure/agent.env", "systemctl daemon-reload",
		"systemctl enable --now tenure-agent", "install -m 0755 myjob /usr/local/bin/myjob", "systemctl enable --now myjob",
		"systemctl status myjob"} {
		d.skip(text, "needs a host's systemd; the units run below as plain processes")
	}

	// Three "hosts" on loopback, each with agent.env.example's settings.
	key := newKey(t)
	base := docPorts(t, 6)
	group, gid := socketTestGroup(t)
	notify := filepath.Join(work, "notify")
	// Written aside, then renamed: the test sees the file only when whole.
	writeScript(t, notify, `f=`+work+`/notify.$TENURE_EVENT.$TENURE_NODE; env | sort >`+work+`/.tmp.$$ && mv `+work+`/.tmp.$$ "$f"`+"\n")
	hostEnv := func(i int) []string {
		vars := map[string]string{}
		for _, kv := range unit["Environment"] {
			k, v, _ := strings.Cut(kv, "=")
			vars[k] = v
		}
		for k, v := range envFileVars { // EnvironmentFile= wins over Environment=
			vars[k] = v
		}
		for _, k := range []string{"TENURE_HOOK", "TENURE_SOCKET_GROUP", "TENURE_SOCKET_MODE"} {
			v, ok := commented[k]
			if !ok {
				t.Fatalf("agent.env.example no longer shows #%s=: update this test", k)
			}
			vars[k] = v
		}
		set := func(k, old, new string) {
			if !strings.Contains(vars[k], old) {
				t.Fatalf("%s=%q no longer holds %q: update this test", k, vars[k], old)
			}
			vars[k] = strings.ReplaceAll(vars[k], old, new)
		}
		set("TENURE_NAME", "web-1", fmt.Sprintf("web-%d", i))
		set("TENURE_ID", "10", strconv.Itoa(10*i))
		set("TENURE_BIND", "0.0.0.0:7946", fmt.Sprintf("127.0.0.1:%d", base+2*(i-1)))
		set("TENURE_PEER_BIND", "0.0.0.0:7947", fmt.Sprintf("127.0.0.1:%d", base+2*(i-1)+1))
		set("TENURE_ADVERTISE", "10.0.0.11", "127.0.0.1")
		for j, h := range []string{"10.0.0.11:7946", "10.0.0.12:7946", "10.0.0.13:7946"} {
			set("TENURE_JOIN", h, fmt.Sprintf("127.0.0.1:%d", base+2*j))
		}
		set("TENURE_DATA_DIR", "/var/lib/tenure", filepath.Join(work, fmt.Sprintf("data-%d", i)))
		set("TENURE_SOCKET", "/run/tenure/tenure.sock", filepath.Join(work, fmt.Sprintf("run-%d/tenure.sock", i)))
		set("TENURE_ENCRYPT", "REPLACE-WITH-OUTPUT-OF-tenure-keygen", key)
		set("TENURE_HOOK", "/usr/local/bin/tenure-notify", notify)
		set("TENURE_SOCKET_GROUP", "tenure", group)
		vars["TENURE_TIMING"] = "local"
		env := []string{}
		for k, v := range vars {
			env = append(env, k+"="+v)
		}
		return env
	}
	sock := func(i int) string { return filepath.Join(work, fmt.Sprintf("run-%d/tenure.sock", i)) }
	var agents []*bgProc
	for i := 1; i <= 3; i++ {
		p := &bgProc{t: t, what: "ExecStart of tenure-agent.service, host " + strconv.Itoa(i), done: make(chan struct{})}
		p.cmd = newCommand(t, rewriteBinary(t, unit["ExecStart"][0]), hostEnv(i))
		p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
		startBg(t, p)
		agents = append(agents, p)
	}
	eventually(t, 30*time.Second, "leader web-3 on every host", func() string {
		for i, a := range agents {
			if a.exited() {
				t.Fatalf("host %d's agent exited: %v\n%s", i+1, a.err, a.stderr.String())
			}
			if out, errOut, _ := tenure(t, "leader", "--socket", sock(i+1)); !strings.HasPrefix(out, "web-3 (id 30)") {
				return fmt.Sprintf("host %d: %q %q", i+1, out, errOut)
			}
		}
		return ""
	})
	journal := d.command("journalctl -u tenure-agent -f")
	const journalSays = `"bootstrapped the voter roster" (or "learned the voter roster"), "leader changed ..."`
	if journal.Comment != journalSays {
		t.Fatalf("the README's comment on journalctl is now %q: update this test", journal.Comment)
	}
	for i, a := range agents {
		logs := a.stderr.String()
		if !strings.Contains(logs, `msg="bootstrapped the voter roster`) && !strings.Contains(logs, `msg="learned the voter roster"`) ||
			!strings.Contains(logs, `msg="leader changed"`) {
			t.Errorf("host %d's log lacks the lines the README says journalctl shows: %s", i+1, journalSays)
		}
	}
	d.skip("journalctl -u tenure-agent -f", "needs systemd's journal; the agents' own logs were checked for the lines it names")

	// systemctl reload: the unit's ExecReload, without a config file, logs
	// and changes nothing.
	if len(unit["ExecReload"]) != 1 || unit["ExecReload"][0] != "/bin/kill -HUP $MAINPID" {
		t.Fatalf("ExecReload=%v: update this test", unit["ExecReload"])
	}
	if out, err := exec.Command("/bin/kill", "-HUP", strconv.Itoa(agents[0].cmd.Process.Pid)).CombinedOutput(); err != nil {
		t.Fatalf("ExecReload: %v %s", err, out)
	}
	eventually(t, 5*time.Second, "the reload logged", func() string {
		if agents[0].exited() {
			t.Fatalf("SIGHUP stopped the agent: %v", agents[0].err)
		}
		if !strings.Contains(agents[0].stderr.String(), "SIGHUP ignored") {
			return "not yet"
		}
		return ""
	})

	at := func(i int) []string { return []string{"TENURE_SOCKET=" + sock(i)} }
	d.env = append(d.env, pathWithTenure(t, work, nil))
	if out := d.mustShell("tenure status", at(1)); !strings.Contains(out, "leader:       web-3 (id 30)") {
		t.Errorf("tenure status:\n%s", out)
	}
	if out := d.mustShell("tenure members", at(1)); strings.Count(out, " alive ") != 3 {
		t.Errorf("tenure members:\n%s", out)
	}

	// The socket is open to the group, and so is its directory.
	for i := 1; i <= 3; i++ {
		fi, err := os.Stat(sock(i))
		if err != nil {
			t.Fatal(err)
		}
		di, err := os.Stat(filepath.Dir(sock(i)))
		if err != nil {
			t.Fatal(err)
		}
		sgid, dgid := fi.Sys().(*syscall.Stat_t).Gid, di.Sys().(*syscall.Stat_t).Gid
		if fi.Mode().Perm() != 0o660 || di.Mode().Perm() != 0o750 || int(sgid) != gid || int(dgid) != gid {
			t.Errorf("host %d: socket %v gid %d, directory %v gid %d; want 0660 and 0750, group %s (%d)",
				i, fi.Mode().Perm(), sgid, di.Mode().Perm(), dgid, group, gid)
		}
	}

	// The hook: became-leader on web-3, with TENURE_SOCKET and without the key.
	hook := envFile(t, filepath.Join(work, "notify.became-leader.web-3"))
	if hook["TENURE_SOCKET"] != sock(3) || hook["TENURE_ENCRYPT"] != "" || hook["TENURE_EPOCH"] == "" {
		t.Errorf("the hook of TENURE_HOOK got %v", hook)
	}

	// myjob.service on every host: only the leader's starts myjob.
	myjobBin := filepath.Join(work, "myjob")
	// Written aside, then renamed: the test waits for the file, and reads
	// it whole (it once read it between the shell's creating it and sort's
	// writing it: an empty environment).
	writeScript(t, myjobBin, `env | sort >`+work+`/.tmp.$$ && mv `+work+`/.tmp.$$ `+work+`/myjob.$TENURE_LEADER; exec sleep 600`+"\n")
	var runs []*bgProc
	for i := 1; i <= 3; i++ {
		env := append([]string{}, myjob["Environment"]...)
		for j, kv := range env {
			env[j] = strings.ReplaceAll(kv, "/run/tenure/tenure.sock", sock(i))
		}
		line := strings.ReplaceAll(rewriteBinary(t, myjob["ExecStart"][0]), "/usr/local/bin/myjob", myjobBin)
		p := &bgProc{t: t, what: "ExecStart of myjob.service, host " + strconv.Itoa(i), done: make(chan struct{})}
		p.cmd = newCommand(t, line, env)
		p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
		startBg(t, p)
		runs = append(runs, p)
	}
	eventually(t, 15*time.Second, "myjob started on web-3", func() string {
		if _, err := os.Stat(filepath.Join(work, "myjob.web-3")); err != nil {
			return err.Error()
		}
		return ""
	})
	if m, _ := filepath.Glob(filepath.Join(work, "myjob.*")); len(m) != 1 {
		t.Errorf("myjob started on %v, want web-3 only", m)
	}
	if env := envFile(t, filepath.Join(work, "myjob.web-3")); env["TENURE_SOCKET"] != sock(3) || env["TENURE_EPOCH"] == "" {
		t.Errorf("myjob's environment: %v", env)
	}
	// systemctl stop myjob: SIGTERM to tenure run, which exits 0
	// (Restart=on-failure does not restart it).
	for _, p := range runs {
		p.stop(syscall.SIGTERM, 15*time.Second)
	}
	// systemctl stop tenure-agent, within TimeoutStopSec.
	limit := unitDuration(t, unit, "TimeoutStopSec")
	for i, a := range agents {
		took := a.stop(syscall.SIGTERM, limit)
		t.Logf("host %d's agent stopped %v after SIGTERM (TimeoutStopSec=%v)", i+1, took, limit)
	}

	// systemd-analyze verify, where systemd is at hand.
	const verify = "systemd-analyze verify /etc/systemd/system/tenure-agent.service /etc/systemd/system/myjob.service"
	if _, err := os.Stat("/usr/local/bin/tenure"); err == nil {
		d.skip(verify, "/usr/local/bin/tenure is installed here, so its output differs from the README's")
	} else if out, errOut, code := d.sh("command -v systemd-analyze", nil); code != 0 {
		d.skip(verify, "no systemd-analyze here: "+out+errOut)
	} else {
		out, errOut, _ := d.shell(verify, nil, "/etc/systemd/system/", "examples/systemd/")
		for _, line := range strings.Split(strings.TrimSpace(out+errOut), "\n") {
			if !strings.HasSuffix(line, ": Command /usr/local/bin/tenure is not executable: No such file or directory") {
				t.Errorf("systemd-analyze verify says %q; the README says it only complains that /usr/local/bin/tenure is missing", line)
			}
		}
	}
}

// readUnit returns a unit file's settings: key → values, in order.
func readUnit(t *testing.T, path string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	kv := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == '[' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: %q", path, line)
		}
		kv[k] = append(kv[k], v)
	}
	return kv
}

// readEnvExample returns the NAME=VALUE lines of an EnvironmentFile, and
// those commented out as #NAME=VALUE.
func readEnvExample(t *testing.T, path string) (set, commented map[string]string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	set, commented = map[string]string{}, map[string]string{}
	re := regexp.MustCompile(`^(#?)(TENURE_[A-Z_]+)=(.*)$`)
	for _, line := range strings.Split(string(b), "\n") {
		if m := re.FindStringSubmatch(line); m != nil {
			if m[1] == "" {
				set[m[2]] = m[3]
			} else {
				commented[m[2]] = m[3]
			}
		}
	}
	if len(set) == 0 {
		t.Fatalf("%s sets no TENURE_ variables", path)
	}
	return set, commented
}

func keysOf(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// checkFlagsExist checks that an ExecStart= line runs `tenure` with a
// command it has and flags that command has (up to `--`).
func checkFlagsExist(t *testing.T, line string) {
	t.Helper()
	args := strings.Fields(line)
	if len(args) < 2 || filepath.Base(args[0]) != "tenure" {
		t.Errorf("ExecStart=%s does not run tenure", line)
		return
	}
	var cmd *cli.Command
	for _, c := range newApp().Commands {
		if c.Name == args[1] {
			cmd = c
		}
	}
	if cmd == nil {
		t.Errorf("ExecStart=%s: tenure has no command %q", line, args[1])
		return
	}
	for _, a := range args[2:] {
		if a == "--" {
			break
		}
		name, ok := strings.CutPrefix(a, "--")
		if !ok {
			continue
		}
		name, _, _ = strings.Cut(name, "=")
		found := false
		for _, f := range cmd.Flags {
			found = found || slices.Contains(f.Names(), name)
		}
		if !found {
			t.Errorf("ExecStart=%s: `tenure %s` has no flag --%s", line, cmd.Name, name)
		}
	}
}

// rewriteBinary replaces the installed binary's path in an ExecStart line
// with the binary under test.
func rewriteBinary(t *testing.T, line string) string {
	t.Helper()
	if !strings.HasPrefix(line, "/usr/local/bin/tenure ") {
		t.Fatalf("ExecStart=%s no longer runs /usr/local/bin/tenure: update this test", line)
	}
	return binary + strings.TrimPrefix(line, "/usr/local/bin/tenure")
}

// newCommand makes the command of an ExecStart line (systemd splits it at
// blanks; these lines have no quotes) with env as its whole environment,
// plus PATH, as systemd gives a service.
func newCommand(t *testing.T, line string, env []string) *exec.Cmd {
	t.Helper()
	args := strings.Fields(line)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	return cmd
}

// startBg starts p's command and kills it when the test ends.
func startBg(t *testing.T, p *bgProc) {
	t.Helper()
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("%s: %v", p.what, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s:\n%s", p.what, p.stderr.String())
		}
	})
}

// socketTestGroup picks a group to give the socket: one this process may
// give files to, other than its own, when there is one.
func socketTestGroup(t *testing.T) (string, int) {
	t.Helper()
	candidates := []string{}
	if os.Geteuid() == 0 {
		candidates = append(candidates, "daemon", "nogroup", "bin")
	}
	gids, _ := os.Getgroups()
	for _, g := range gids {
		candidates = append(candidates, strconv.Itoa(g))
	}
	for _, c := range candidates {
		g, err := user.LookupGroup(c)
		if err != nil {
			g, err = user.LookupGroupId(c)
		}
		if err == nil {
			id, _ := strconv.Atoi(g.Gid)
			return g.Name, id
		}
	}
	g, err := user.LookupGroupId(strconv.Itoa(os.Getegid()))
	if err != nil {
		t.Fatal(err)
	}
	id, _ := strconv.Atoi(g.Gid)
	return g.Name, id
}

// unitDuration reads a unit's time setting such as 45s.
func unitDuration(t *testing.T, unit map[string][]string, key string) time.Duration {
	t.Helper()
	v := unit[key]
	if len(v) != 1 {
		t.Fatalf("unit has %s=%v", key, v)
	}
	d, err := time.ParseDuration(v[0])
	if err != nil {
		t.Fatalf("%s=%s: %v", key, v[0], err)
	}
	return d
}
