package main

// The machinery of the documentation tests (readme_test.go,
// examples_doc_test.go): it reads the shell commands a Markdown file shows
// in its fenced sh blocks and runs them, as written, through /bin/sh.
//
// A test names each command by its text exactly as the file shows it, and
// either runs it or says why it does not. It fails when it names a command
// the file no longer shows (the doc changed: so must the test) and, at the
// end, when the file shows a command the test neither ran nor skipped (a new
// command in the doc: the test must learn it). Only hosts, ports, paths and
// values the doc leaves to the reader are rewritten, each by an explicit
// old → new pair that must occur in the command.

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tenurehq/tenure/internal/testlog"
	"github.com/tenurehq/tenure/internal/testwait"
)

// docCommand is one command of a fenced sh block of a Markdown file.
type docCommand struct {
	// Text is the command: continuation lines (after \, &&, || or |)
	// joined, its trailing comment removed, runs of blanks made one space.
	Text string
	// Comment is its trailing comment, without the #.
	Comment string
	// Output holds the comment lines right below it (no blank line
	// between), without "# ": the output the doc shows for it.
	Output []string
}

// parseDocCommands returns the commands of the ```sh blocks of markdown.
func parseDocCommands(markdown string) []docCommand {
	var cmds []docCommand
	fence, sh := false, false
	pending := "" // a command that continues on the next line
	last := -1    // the command the next comment lines show the output of
	for _, line := range strings.Split(markdown, "\n") {
		trim := strings.TrimSpace(line)
		if strings.HasPrefix(trim, "```") {
			fence = !fence
			sh = fence && (trim == "```sh" || trim == "```bash")
			last, pending = -1, ""
			continue
		}
		if !sh {
			continue
		}
		switch {
		case trim == "":
			last = -1
			continue
		case strings.HasPrefix(trim, "#"):
			if pending == "" && last >= 0 {
				cmds[last].Output = append(cmds[last].Output, strings.TrimPrefix(strings.TrimPrefix(trim, "#"), " "))
			}
			continue
		}
		code, comment := splitShellComment(trim)
		if pending != "" {
			code = pending + " " + code
		}
		if c, ok := strings.CutSuffix(code, `\`); ok {
			pending = strings.TrimSpace(c)
			continue
		}
		if strings.HasSuffix(code, "&&") || strings.HasSuffix(code, "||") || strings.HasSuffix(code, "|") {
			pending = code
			continue
		}
		pending = ""
		cmds = append(cmds, docCommand{Text: strings.Join(strings.Fields(code), " "), Comment: comment})
		last = len(cmds) - 1
	}
	return cmds
}

// splitShellComment splits a line of shell at its comment: a # outside
// quotes that starts the line or follows a blank.
func splitShellComment(line string) (code, comment string) {
	var quote rune
	for i, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t'):
			return strings.TrimSpace(line[:i]), strings.TrimSpace(line[i+1:])
		}
	}
	return strings.TrimSpace(line), ""
}

// docRun runs the commands of one Markdown file.
type docRun struct {
	t    *testing.T
	file string // as given, for messages
	root string // the repository root: sh's working directory
	cmds map[string]docCommand
	seen map[string]string // command text → "ran" or why not
	env  []string          // added to every command's environment
	// timeout bounds each command run to completion; default 30s.
	timeout time.Duration
}

// newDocRun reads file (relative to the repository root) and, when the test
// ends without another failure, checks that every command it shows was
// either run or skipped with a reason.
func newDocRun(t *testing.T, file string) *docRun {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, file))
	if err != nil {
		t.Fatal(err)
	}
	d := &docRun{t: t, file: file, root: root, cmds: map[string]docCommand{}, seen: map[string]string{}}
	for _, c := range parseDocCommands(string(b)) {
		d.cmds[c.Text] = c
	}
	if len(d.cmds) == 0 {
		t.Fatalf("%s shows no commands in ```sh blocks", file)
	}
	t.Cleanup(func() {
		if t.Failed() {
			return
		}
		var missed []string
		for text := range d.cmds {
			if _, ok := d.seen[text]; !ok {
				missed = append(missed, text)
			}
		}
		sort.Strings(missed)
		for _, text := range missed {
			t.Errorf("%s shows `%s`, which this test neither runs nor skips: teach the test that command", file, text)
		}
	})
	return d
}

// command returns the doc's command text, marking it as run; the test
// stops if the doc does not show it.
func (d *docRun) command(text string) docCommand {
	d.t.Helper()
	c, ok := d.cmds[text]
	if !ok {
		d.t.Fatalf("%s no longer shows the command `%s`: the doc changed, update this test (and check the doc is right)", d.file, text)
	}
	if _, done := d.seen[text]; !done {
		d.seen[text] = "ran"
	}
	return c
}

// skip records why the doc's command text is not run.
func (d *docRun) skip(text, why string) {
	d.t.Helper()
	d.command(text)
	d.seen[text] = why
	d.t.Logf("%s: not run: `%s`: %s", d.file, text, why)
}

// rewrite applies old → new pairs to text; each old must occur in it.
func (d *docRun) rewrite(text string, oldnew []string) string {
	d.t.Helper()
	if len(oldnew)%2 != 0 {
		d.t.Fatalf("rewrite of `%s`: odd number of strings", text)
	}
	for i := 0; i < len(oldnew); i += 2 {
		if !strings.Contains(text, oldnew[i]) {
			d.t.Fatalf("`%s` (%s) no longer contains %q: update this test's rewrite", text, d.file, oldnew[i])
		}
		text = strings.ReplaceAll(text, oldnew[i], oldnew[i+1])
	}
	return text
}

// shell runs the doc's command text through sh -c, after the rewrites
// oldnew, with env added, and returns its stdout, stderr and exit code.
func (d *docRun) shell(text string, env []string, oldnew ...string) (string, string, int) {
	d.t.Helper()
	d.command(text)
	return d.sh(d.rewrite(text, oldnew), env)
}

// sh runs script through sh -c in the repository root, with the doc's
// environment and env added.
func (d *docRun) sh(script string, env []string) (string, string, int) {
	d.t.Helper()
	limit := cmp.Or(d.timeout, 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", script)
	cmd.Dir = d.root
	cmd.Env = append(append(os.Environ(), d.env...), env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		d.t.Fatalf("sh -c %q: %v", script, err)
	}
	if ctx.Err() != nil {
		d.t.Fatalf("sh -c %q did not finish within %v; stderr: %s", script, limit, stderr.String())
	}
	d.t.Logf("$ %s\n%s%s(exit %d)", script, stdout.String(), stderr.String(), code)
	return stdout.String(), stderr.String(), code
}

// mustShell is shell for a command that must exit 0.
func (d *docRun) mustShell(text string, env []string, oldnew ...string) string {
	d.t.Helper()
	out, errOut, code := d.shell(text, env, oldnew...)
	if code != 0 {
		d.t.Fatalf("%s: `%s` exited %d: %s%s", d.file, text, code, out, errOut)
	}
	return out
}

// assign runs the doc's assignment `NAME=VALUE` and keeps NAME's value in
// the environment of every later command, as a shell session would.
func (d *docRun) assign(text string, oldnew ...string) string {
	d.t.Helper()
	name, _, ok := strings.Cut(text, "=")
	if !ok || !regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`).MatchString(name) {
		d.t.Fatalf("`%s` is not an assignment", text)
	}
	d.command(text)
	out, errOut, code := d.sh(d.rewrite(text, oldnew)+`; printf '%s' "$`+name+`"`, nil)
	if code != 0 || out == "" {
		d.t.Fatalf("`%s`: exit %d, value %q, %s", text, code, out, errOut)
	}
	d.env = append(d.env, name+"="+out)
	return out
}

// bgProc is a doc command running in the background.
type bgProc struct {
	t      *testing.T
	what   string
	cmd    *exec.Cmd
	stdout testlog.Buffer
	stderr testlog.Buffer
	done   chan struct{}
	err    error
}

// start starts the doc's command text in the background, like shell; sh
// execs the last command, so signals reach it. The process is killed when
// the test ends, if it still runs.
func (d *docRun) start(text string, env []string, oldnew ...string) *bgProc {
	d.t.Helper()
	d.command(text)
	script := d.rewrite(text, oldnew)
	p := &bgProc{t: d.t, what: script, done: make(chan struct{})}
	p.cmd = exec.Command("/bin/sh", "-c", "exec "+script)
	p.cmd.Dir = d.root
	p.cmd.Env = append(append(os.Environ(), d.env...), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		d.t.Fatalf("start %q: %v", script, err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	d.t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if d.t.Failed() {
			d.t.Logf("background `%s`:\nstdout:\n%s\nstderr:\n%s", script, p.stdout.String(), p.stderr.String())
		}
	})
	return p
}

// exited reports whether the process has exited.
func (p *bgProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends sig and waits up to limit for the exit; it returns how long
// the process took and fails the test unless it exited 0.
func (p *bgProc) stop(sig syscall.Signal, limit time.Duration) time.Duration {
	p.t.Helper()
	start := time.Now()
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(limit):
		_ = p.cmd.Process.Kill()
		<-p.done
		p.t.Fatalf("`%s` did not exit within %v of %v", p.what, limit, sig)
	}
	took := time.Since(start)
	if p.err != nil {
		p.t.Fatalf("`%s` stopped by %v: %v\nstderr:\n%s", p.what, sig, p.err, p.stderr.String())
	}
	return took
}

// lines returns the complete lines written to stdout so far.
func (p *bgProc) lines() []string {
	s := p.stdout.String()
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return strings.Split(s[:i], "\n")
	}
	return nil
}

// eventually waits for cond (testwait.For).
func eventually(t *testing.T, d time.Duration, what string, cond func() string) {
	t.Helper()
	testwait.For(t, d, what, cond)
}

// docPorts finds count consecutive ports free for TCP and UDP on
// 127.0.0.1, below Linux's ephemeral range, whose ports the agents' own
// outgoing connections take.
func docPorts(t *testing.T, count int) int {
	t.Helper()
	for try := 0; try < 100; try++ {
		base := 12000 + int(time.Now().UnixNano()%int64(30000-12000-count))
		free := true
		for p := base; p < base+count && free; p++ {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				free = false
				break
			}
			l.Close()
			u, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", p))
			if err != nil {
				free = false
				break
			}
			u.Close()
		}
		if free {
			return base
		}
	}
	t.Fatal("no free port range")
	return 0
}

// docTempDir makes a temporary directory with a short path (socket paths
// are limited to 108 bytes) and removes it when the test ends.
func docTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "tdoc-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// pathWithTenure makes a directory holding `tenure` (the binary under
// test) and the given scripts, and returns a PATH starting with it.
func pathWithTenure(t *testing.T, dir string, scripts map[string]string) string {
	t.Helper()
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(binary, filepath.Join(bin, "tenure")); err != nil {
		t.Fatal(err)
	}
	for name, body := range scripts {
		writeScript(t, filepath.Join(bin, name), body)
	}
	return "PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH")
}

// writeScript writes an executable /bin/sh script.
func writeScript(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
}

// envFile reads a file of NAME=VALUE lines (such as a dump of `env`).
func envFile(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	vars := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			vars[k] = v
		}
	}
	return vars
}

// tenureVars returns the sorted TENURE_* names of vars.
func tenureVars(vars map[string]string) []string {
	var names []string
	for k := range vars {
		if strings.HasPrefix(k, "TENURE_") {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	return names
}

// varsNamed returns the sorted, distinct TENURE_* names text mentions.
func varsNamed(text string) []string {
	set := map[string]bool{}
	for _, v := range regexp.MustCompile(`TENURE_[A-Z_]+[A-Z]`).FindAllString(text, -1) {
		set[v] = true
	}
	var names []string
	for v := range set {
		names = append(names, v)
	}
	sort.Strings(names)
	return names
}

// docSection returns the text of file from the first occurrence of start
// up to the next occurrence of end after it; the test stops if either is
// missing.
func docSection(t *testing.T, file, start, end string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("../..", file))
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Join(strings.Fields(string(b)), " ")
	i := strings.Index(s, start)
	if i < 0 {
		t.Fatalf("%s no longer says %q: update this test", file, start)
	}
	j := strings.Index(s[i:], end)
	if j < 0 {
		t.Fatalf("%s: no %q after %q: update this test", file, end, start)
	}
	return s[i : i+j+len(end)]
}
