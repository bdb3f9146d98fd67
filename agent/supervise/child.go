package supervise

import (
	"errors"
	"fmt"
	"github.com/tenurehq/tenure/internal/procgroup"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Exit codes Run reports for a command that did not exit normally.
const (
	// ExitCannotStart is returned (with Once) when the command cannot be
	// started at all, like a shell's "command not found".
	ExitCannotStart = 127
	// ExitRefused is Run's exit code when the agent refuses to register it
	// as a runner (its grace is longer than the lease TTL): a configuration
	// error, as a usage error is for the command line.
	ExitRefused = 2
	// exitSignalBase plus the signal number is the exit code of a command
	// killed by a signal, as shells report it.
	exitSignalBase = 128
)

// child is one run of the command, in a process group of its own whose ID
// is its PID.
type child struct {
	term    term
	cmd     *exec.Cmd
	started time.Time
	exited  chan struct{} // closed when cmd.Wait has returned
	waitErr error         // cmd.Wait's error, set before exited is closed
	copying sync.WaitGroup
	pipes   []*os.File // read ends of the output pipes being copied
}

// startChild starts the command for t.
func startChild(cfg Config, t term) (*child, error) {
	return startChildEnv(cfg, t, environ(cfg.Env, t))
}

// startChildEnv starts the command for t with the environment env.
func startChildEnv(cfg Config, t term, env []string) (*child, error) {
	c := &child{term: t, exited: make(chan struct{})}
	c.cmd = command(cfg)
	c.cmd.Env = env
	c.cmd.SysProcAttr = procgroup.AttrDying()
	var writers []*os.File
	var err error
	if c.cmd.Stdout, err = c.output(cfg.Stdout, &writers); err == nil {
		c.cmd.Stderr, err = c.output(cfg.Stderr, &writers)
	}
	if err == nil {
		err = c.launch()
	}
	for _, w := range writers {
		w.Close()
	}
	if err != nil {
		c.closePipes()
		c.copying.Wait()
		return nil, fmt.Errorf("supervise: start %s: %w", cfg.Command[0], err)
	}
	c.started = time.Now()
	return c, nil
}

// launch starts the command and reaps it on a goroutine locked to its OS
// thread from the fork until the command has been waited for: the
// command's parent-death signal fires when the thread that forked it dies
// (procgroup.AttrDying), and Go ends the thread of a goroutine that exits
// locked, so the goroutine unlocks before it returns, and the thread lives
// as long as the command.
func (c *child) launch() error {
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := c.cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		c.reap()
	}()
	return <-started
}

// command builds the exec.Cmd for cfg's command line.
func command(cfg Config) *exec.Cmd {
	if cfg.Shell {
		return exec.Command("/bin/sh", "-c", cfg.Command[0])
	}
	return exec.Command(cfg.Command[0], cfg.Command[1:]...)
}

// environ returns base with TENURE_EPOCH and TENURE_LEADER set for t.
func environ(base []string, t term) []string {
	out := slices.DeleteFunc(slices.Clone(base), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return name == "TENURE_EPOCH" || name == "TENURE_LEADER"
	})
	return append(out, "TENURE_EPOCH="+strconv.FormatUint(t.epoch, 10), "TENURE_LEADER="+t.leader)
}

// output returns what the command should write to so that its output
// reaches w. A file is handed to the command as it is; for any other writer
// a pipe is made and copied from, so that Wait never waits on a process
// that holds the pipe after the command exits. The pipe's write end is
// appended to writers, for the caller to close once the command started.
func (c *child) output(w io.Writer, writers *[]*os.File) (io.Writer, error) {
	if f, ok := w.(*os.File); ok {
		return f, nil
	}
	r, pw, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("supervise: output pipe: %w", err)
	}
	*writers = append(*writers, pw)
	c.pipes = append(c.pipes, r)
	c.copying.Add(1)
	go func() {
		defer c.copying.Done()
		_, _ = io.Copy(w, r)
	}()
	return pw, nil
}

func (c *child) reap() {
	c.waitErr = c.cmd.Wait()
	close(c.exited)
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// stop ends the command and everything in its process group: SIGTERM, then
// SIGKILL after grace if anything still runs. It also serves a command that
// has exited by itself, to stop what it left behind. It returns once the
// command is reaped and its output copied, and reports whether SIGKILL was
// needed.
func (c *child) stop(grace time.Duration) (killed bool) {
	killed = procgroup.Stop(c.pid(), grace, nil)
	<-c.exited
	c.finishOutput(grace)
	return killed
}

// finishOutput waits up to d for the output to be copied to its end, then
// closes the pipes (a process that left the group may hold them).
func (c *child) finishOutput(d time.Duration) {
	done := make(chan struct{})
	go func() {
		c.copying.Wait()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
	c.closePipes()
	<-done
}

func (c *child) closePipes() {
	for _, r := range c.pipes {
		r.Close()
	}
}

// exitCode is the command's exit code, 128+N for a signal N, or -1 when
// it is unknown.
func (c *child) exitCode() int {
	ps := c.cmd.ProcessState
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return exitSignalBase + int(ws.Signal())
	}
	return ps.ExitCode()
}

// exitAttrs describes how the command ended, for the log.
func (c *child) exitAttrs() []any {
	attrs := []any{"pid", c.pid(), "epoch", c.term.epoch, "ran", time.Since(c.started).Round(time.Millisecond)}
	ps := c.cmd.ProcessState
	var exitErr *exec.ExitError
	if ps == nil || (c.waitErr != nil && !errors.As(c.waitErr, &exitErr)) {
		return append(attrs, "err", c.waitErr)
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return append(attrs, "signal", ws.Signal().String())
	}
	return append(attrs, "exit_code", ps.ExitCode())
}
