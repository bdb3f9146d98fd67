package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/tenurehq/tenure/examples/fenced-store/store"
	"github.com/tenurehq/tenure/internal/procgroup"
	"github.com/tenurehq/tenure/internal/redisproc"
	"github.com/tenurehq/tenure/leasing/redislock"
	"github.com/tenurehq/tenure/rpc"
)

// `tenure demo --compare`: the same story told three times, against a
// Redlock lock, a single-instance Redis lock and a tenure lock. A holder
// process takes the lock and writes to a fenced store, is paused with
// SIGSTOP past its TTL, another client takes the lock and writes, and the
// paused holder resumes and writes what it had prepared. With Redlock
// there is no token and both writes land; with the single instance's
// token and with tenure's the store refuses the stale one.

// Compare constants.
const (
	// compareRedisTTL is the Redis locks' TTL: the pause outlasts it.
	compareRedisTTL = time.Second
	// compareTenureTTL is the tenure lock's TTL (the agents' lease TTL is
	// the demo's --lease-ttl).
	compareTenureTTL = 2 * time.Second
	// compareWait bounds the second client's wait for the lock.
	compareWait = 20 * time.Second
	// compareLineTimeout bounds each wait for a line from the holder.
	compareLineTimeout = 20 * time.Second
	// compareRedlockInstances is how many Redis instances Redlock uses.
	compareRedlockInstances = 3
	// compareLesson is the moral of the comparison.
	compareLesson = "a lock cannot stop a paused holder; only a fencing token checked by the resource can, and Redlock has none"
)

// compareCase is one telling of the story.
type compareCase struct {
	backend string   // "redlock", "redis" or "tenure"
	title   string   // for people
	holder  []string // the holder's flags naming the lock service
	// take has the second client take the lock: its token (0 and false
	// without one) and how to release it.
	take func(ctx context.Context) (token uint64, fenced bool, release func(), err error)
}

// compareResult is what one telling showed.
type compareResult struct {
	lateAccepted bool
	storedValue  string
}

// runCompare tells the story against each backend on w: real
// redis-server processes, opts.Nodes in-process agents and a fenced store
// (a fence per key, one key per backend), all stopped and removed at the
// end.
func runCompare(ctx context.Context, w io.Writer, opts demoOptions) (err error) {
	if err := opts.validate(); err != nil {
		return err
	}
	if !redisproc.Available() {
		return redisproc.ErrMissing
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the tenure binary for the holder process: %w", err)
	}
	d := &demo{opts: opts, out: &narrator{w: w, json: opts.JSON, start: time.Now()}, logger: slog.New(slog.DiscardHandler)}
	if opts.Logs != nil {
		d.logger = slog.New(slog.NewTextHandler(opts.Logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	redislock.SetRedisLogger(d.logger)
	var servers []*redisproc.Server
	defer func() {
		for _, s := range servers {
			s.Kill()
		}
		err = errors.Join(err, d.cleanup(err == nil))
	}()
	dir, err := shortTempDir(opts.Nodes)
	if err != nil {
		return err
	}
	d.dir = dir
	if servers, err = startRedisServers(ctx, dir, compareRedlockInstances+1); err != nil {
		return err
	}
	if err := d.startStore(store.PerKey); err != nil {
		return err
	}
	if err := d.startAgents(); err != nil { // they elect while the Redis cases run
		return err
	}
	results := map[string]compareResult{}
	for _, c := range d.compareCases(servers) {
		if c.backend == "tenure" {
			l, err := waitLeader(ctx, "the agents' election", 10*time.Second+2*opts.LeaseTTL, d.agents, 0)
			if err != nil {
				return err
			}
			d.out.step("elected", map[string]any{"backend": c.backend, "leader": l.name, "epoch": l.epoch},
				"[tenure] the agents elected %s (epoch %d); it serves the named lock", l.name, l.epoch)
		}
		r, err := d.compareOne(ctx, self, c)
		if err != nil {
			return fmt.Errorf("%s: %w", c.title, err)
		}
		results[c.backend] = r
	}
	d.compareSummary(results)
	return d.out.err
}

// startRedisServers starts n redis-server processes under dir; on an
// error it stops those it started.
func startRedisServers(ctx context.Context, dir string, n int) ([]*redisproc.Server, error) {
	var servers []*redisproc.Server
	for i := range n {
		s, err := redisproc.Start(ctx, filepath.Join(dir, fmt.Sprintf("redis-%d", i)))
		if err != nil {
			for _, s := range servers {
				s.Kill()
			}
			return nil, err
		}
		servers = append(servers, s)
	}
	return servers, nil
}

// compareCases are the three locks compared, in the order they run:
// Redlock over servers[1:], the single-instance lock on servers[0], and
// a tenure lock served by the agents. It reports what it started.
func (d *demo) compareCases(servers []*redisproc.Server) []compareCase {
	var redlockAddrs []string
	for _, s := range servers[1:] {
		redlockAddrs = append(redlockAddrs, s.Addr())
	}
	single := "redis://" + servers[0].Addr()
	redlock := "redlock://" + strings.Join(redlockAddrs, ",")
	d.out.step("start", map[string]any{"dir": d.dir, "redis": single, "redlock": redlock, "store": d.url, "nodes": d.opts.Nodes},
		"started %d redis-server processes (one for the single-instance lock at %s, %d for Redlock), "+
			"a fenced store at %s (a fence per key) and %d tenure agents on 127.0.0.1; files in %s",
		len(servers), servers[0].Addr(), len(servers)-1, d.url, d.opts.Nodes, d.dir)
	return []compareCase{
		{backend: "redlock", title: "Redlock over " + strconv.Itoa(len(servers)-1) + " instances",
			holder: []string{"--backend", redlock, "--ttl", compareRedisTTL.String()},
			take:   redisTaker(redlock)},
		{backend: "redis", title: "the single-instance Redis lock",
			holder: []string{"--backend", single, "--ttl", compareRedisTTL.String()},
			take:   redisTaker(single)},
		{backend: "tenure", title: "a tenure lock",
			holder: []string{"--socket", d.agents[0].SocketPath(), "--ttl", compareTenureTTL.String()},
			take:   agentTaker(d.agents[len(d.agents)-1].SocketPath())},
	}
}

// redisTaker is the second client of a Redis backend.
func redisTaker(backend string) func(ctx context.Context) (uint64, bool, func(), error) {
	return func(ctx context.Context) (uint64, bool, func(), error) {
		lk, err := redislock.Open(backend, redislock.Config{})
		if err != nil {
			return 0, false, nil, err
		}
		l, err := lk.Lock(ctx, "job", redislock.LockOptions{TTL: 5 * time.Second, Wait: compareWait})
		if err != nil {
			lk.Close()
			return 0, false, nil, err
		}
		token, fenced := l.Token()
		return token, fenced, func() {
			uctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = l.Unlock(uctx)
			lk.Close()
		}, nil
	}
}

// agentTaker is the second client of the tenure lock, through another
// agent than the holder's.
func agentTaker(sock string) func(ctx context.Context) (uint64, bool, func(), error) {
	return func(ctx context.Context) (uint64, bool, func(), error) {
		cl, err := rpc.Dial(ctx, sock)
		if err != nil {
			return 0, false, nil, err
		}
		l, err := cl.LockWith(ctx, "job", rpc.LockOptions{TTL: compareTenureTTL, Wait: compareWait})
		if err != nil {
			cl.Close()
			return 0, false, nil, err
		}
		return l.Token(), true, func() {
			uctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = l.Unlock(uctx)
			cl.Close()
		}, nil
	}
}

// holderProc is the holder process and its output.
type holderProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

// startHolder starts `tenure demo-holder` with the case's flags.
func (d *demo) startHolder(self string, c compareCase) (*holderProc, error) {
	args := append([]string{"demo-holder", "--store", d.url, "--key", c.backend, "--name", "job"}, c.holder...)
	cmd := exec.Command(self, args...)
	cmd.SysProcAttr = procgroup.AttrDying()
	cmd.Stderr = io.Discard
	if d.opts.Logs != nil {
		cmd.Stderr = d.opts.Logs
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("holder: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("holder: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the holder process: %w", err)
	}
	h := &holderProc{cmd: cmd, stdin: stdin, lines: make(chan string, 8)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			h.lines <- sc.Text()
		}
		close(h.lines)
	}()
	return h, nil
}

// line waits for the holder's next line, which must start with want.
func (h *holderProc) line(ctx context.Context, want string) (string, error) {
	select {
	case l, ok := <-h.lines:
		if !ok {
			return "", fmt.Errorf("the holder exited before saying %q", want)
		}
		rest, found := strings.CutPrefix(l, want+" ")
		if !found {
			return "", fmt.Errorf("the holder said %q, want %q", l, want)
		}
		return rest, nil
	case <-time.After(compareLineTimeout):
		return "", fmt.Errorf("the holder did not say %q within %v", want, compareLineTimeout)
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// stop resumes and kills the holder if it still runs, and reaps it.
func (h *holderProc) stop() {
	_ = h.cmd.Process.Signal(syscall.SIGCONT)
	_ = h.cmd.Process.Kill()
	_ = h.cmd.Wait()
}

// compareOne tells the story once.
func (d *demo) compareOne(ctx context.Context, self string, c compareCase) (compareResult, error) {
	tag := "[" + c.backend + "]"
	h, err := d.startHolder(self, c)
	if err != nil {
		return compareResult{}, err
	}
	defer h.stop()
	got, err := h.line(ctx, "acquired")
	if err != nil {
		return compareResult{}, err
	}
	holderToken, holderFenced := parseHolderToken(got)
	d.out.step("acquired", map[string]any{"backend": c.backend, "holder_pid": h.cmd.Process.Pid, "token": holderToken, "has_token": holderFenced},
		"%s %s: process A (pid %d) takes the lock: %s", tag, c.title, h.cmd.Process.Pid, tokenPhrase(holderToken, holderFenced))
	got, err = h.line(ctx, "wrote")
	if err != nil {
		return compareResult{}, err
	}
	if got != "ok" {
		return compareResult{}, fmt.Errorf("the holder's first write: %s", got)
	}
	d.out.step("write", map[string]any{"backend": c.backend, "writer": "A", "token": holderToken, "accepted": true},
		"%s A writes key %q with token %d: accepted; A prepares its next write, and then...", tag, c.backend, holderToken)

	if err := h.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return compareResult{}, fmt.Errorf("pause the holder: %w", err)
	}
	paused := time.Now()
	d.out.step("pause", map[string]any{"backend": c.backend, "holder_pid": h.cmd.Process.Pid},
		"%s A is paused (SIGSTOP, like a long GC or a stopped VM): it neither renews its lock nor looks at the clock", tag)

	token, fenced, release, err := c.take(ctx)
	if err != nil {
		return compareResult{}, fmt.Errorf("the second client's lock: %w", err)
	}
	defer release()
	d.out.step("taken", map[string]any{"backend": c.backend, "after_pause_ms": time.Since(paused).Milliseconds(), "token": token, "has_token": fenced},
		"%s A's lock ran out %v into the pause; client B takes it: %s", tag, time.Since(paused).Round(100*time.Millisecond), tokenPhrase(token, fenced))
	value := fmt.Sprintf("written by B with token %d", token)
	if err := d.putKey(ctx, c.backend, token, value); err != nil {
		return compareResult{}, fmt.Errorf("B's write: %w", err)
	}
	d.out.step("new_write", map[string]any{"backend": c.backend, "writer": "B", "token": token, "accepted": true},
		"%s B writes key %q with token %d: accepted", tag, c.backend, token)

	if err := h.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return compareResult{}, fmt.Errorf("resume the holder: %w", err)
	}
	if _, err := io.WriteString(h.stdin, "write\n"); err != nil {
		return compareResult{}, fmt.Errorf("tell the holder to write: %w", err)
	}
	got, err = h.line(ctx, "late")
	if err != nil {
		return compareResult{}, err
	}
	r := compareResult{lateAccepted: got == "ok"}
	if !r.lateAccepted && !strings.HasPrefix(got, "refused") {
		return compareResult{}, fmt.Errorf("the holder's late write: %s", got)
	}
	verdict := "ACCEPTED: the store had nothing to tell A from B"
	if !r.lateAccepted {
		verdict = "REFUSED (409): " + strings.TrimSpace(strings.TrimPrefix(got, "refused"))
	}
	d.out.step("late_write", map[string]any{"backend": c.backend, "writer": "A", "token": holderToken, "accepted": r.lateAccepted},
		"%s A resumes after %v and sends the write it had prepared, with token %d: %s",
		tag, time.Since(paused).Round(100*time.Millisecond), holderToken, verdict)
	rctx, cancel := context.WithTimeout(ctx, demoCallTimeout)
	defer cancel()
	stored, storedToken, err := store.Get(rctx, d.url, c.backend)
	if err != nil {
		return compareResult{}, fmt.Errorf("read back: %w", err)
	}
	r.storedValue = string(stored)
	d.out.step("read_back", map[string]any{"backend": c.backend, "key": c.backend, "value": r.storedValue, "token": storedToken},
		"%s the store holds %q at %q", tag, r.storedValue, c.backend)
	return r, nil
}

// putKey writes value at key with token, bounded by demoCallTimeout.
func (d *demo) putKey(ctx context.Context, key string, token uint64, value string) error {
	ctx, cancel := context.WithTimeout(ctx, demoCallTimeout)
	defer cancel()
	return store.Put(ctx, d.url, key, token, []byte(value))
}

// parseHolderToken reads the holder's "acquired" line: a token or "none".
func parseHolderToken(s string) (uint64, bool) {
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}

// tokenPhrase says which token a lock came with.
func tokenPhrase(token uint64, fenced bool) string {
	if !fenced {
		return "no fencing token (Redlock's random value is not ordered; it writes with token 0)"
	}
	return fmt.Sprintf("fencing token %d", token)
}

// compareSummary prints what each telling showed.
func (d *demo) compareSummary(results map[string]compareResult) {
	fields := map[string]any{"lesson": compareLesson}
	var lines []string
	for _, b := range []string{"redlock", "redis", "tenure"} {
		r := results[b]
		fields[b+"_late_write_accepted"] = r.lateAccepted
		fields[b+"_stored_value"] = r.storedValue
		what := "the paused holder's late write was REFUSED; the store kept B's write"
		if r.lateAccepted {
			what = "BOTH writes landed: the paused holder overwrote the current holder's write"
		}
		lines = append(lines, fmt.Sprintf("%-8s %s (the store holds %q)", b+":", what, r.storedValue))
	}
	lines = append(lines, "lesson: "+compareLesson)
	pad := strings.Repeat(" ", len("[ 0.000s] "))
	d.out.step("summary", fields, "summary\n%s%s", pad, strings.Join(lines, "\n"+pad))
}

// demoHolderCommand is the holder process of `tenure demo --compare`
// (hidden): it takes the lock, writes once, says so, waits for a line on
// stdin and writes again with the same token, and reports each step on
// stdout: "acquired TOKEN|none", "wrote ok|...", "late ok|refused ...".
func demoHolderCommand() *cli.Command {
	return &cli.Command{
		Name:   "demo-holder",
		Usage:  "the holder process of tenure demo --compare",
		Hidden: true,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "backend", Usage: "redis:// or redlock:// (else the agent at --socket)"},
			socketFlag(),
			&cli.StringFlag{Name: "store", Usage: "the fenced store's URL", Required: true},
			&cli.StringFlag{Name: "key", Usage: "the store key to write", Required: true},
			&cli.StringFlag{Name: "name", Value: "job", Usage: "the lock's name"},
			&cli.DurationFlag{Name: "ttl", Value: time.Second, Usage: "the lock's TTL"},
		},
		Action: runDemoHolder,
	}
}

// runDemoHolder is demo-holder's action.
func runDemoHolder(c *cli.Context) error {
	ctx, cancel := context.WithTimeout(c.Context, time.Minute)
	defer cancel()
	out := c.App.Writer
	var token uint64
	fenced := true
	var unlock func()
	if backend := c.String("backend"); backend != "" {
		lk, err := redislock.Open(backend, redislock.Config{})
		if err != nil {
			return fail(2, "demo-holder: %v", err)
		}
		defer lk.Close()
		l, err := lk.Lock(ctx, c.String("name"), redislock.LockOptions{TTL: c.Duration("ttl"), Wait: compareWait})
		if err != nil {
			return fail(1, "demo-holder: %v", err)
		}
		token, fenced = l.Token()
		unlock = func() { _ = l.Unlock(context.Background()) }
	} else {
		cl, err := rpc.Dial(ctx, c.String("socket"))
		if err != nil {
			return fail(1, "demo-holder: %v", err)
		}
		defer cl.Close()
		l, err := cl.LockWith(ctx, c.String("name"), rpc.LockOptions{TTL: c.Duration("ttl"), Wait: compareWait})
		if err != nil {
			return fail(1, "demo-holder: %v", err)
		}
		token = l.Token()
		unlock = func() { _ = l.Unlock(context.Background()) }
	}
	defer unlock()
	fmt.Fprintf(out, "acquired %s\n", tokenText(token, fenced))
	put := func(value string) string {
		pctx, cancel := context.WithTimeout(ctx, demoCallTimeout)
		defer cancel()
		err := store.Put(pctx, c.String("store"), c.String("key"), token, []byte(value))
		switch {
		case err == nil:
			return "ok"
		case errors.Is(err, store.ErrStale):
			return "refused " + strings.TrimPrefix(err.Error(), store.ErrStale.Error()+": ")
		}
		return "error " + err.Error()
	}
	fmt.Fprintf(out, "wrote %s\n", put(fmt.Sprintf("written by A with token %d, before its pause", token)))
	if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
		return fail(1, "demo-holder: %v", err)
	}
	fmt.Fprintf(out, "late %s\n", put(fmt.Sprintf("written by A with token %d, after its pause", token)))
	return nil
}

// tokenText is a token as the holder reports it: "none" without one.
func tokenText(token uint64, fenced bool) string {
	if !fenced {
		return "none"
	}
	return strconv.FormatUint(token, 10)
}
