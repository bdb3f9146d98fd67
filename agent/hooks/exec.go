package hooks

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tenurehq/tenure/internal/procgroup"
)

const (
	// maxLine bounds one logged line of a run's output; the rest of a longer
	// line is dropped.
	maxLine = 4 << 10
	// outputSettle is how long a finished run's output may take to reach
	// end of file before the run's end is logged anyway (a process left in
	// the background may hold it open; it is still read).
	outputSettle = 100 * time.Millisecond
	// shell runs every hook command.
	shell = "/bin/sh"
)

// proc is one running hook command.
type proc struct {
	cmd     *exec.Cmd
	exited  chan struct{} // closed when cmd.Wait has returned
	waitErr error         // cmd.Wait's error, set before exited is closed
	readers atomic.Int32  // output streams not yet at end of file
	output  chan struct{} // closed when both output streams are
}

// run runs ev through w's hook and logs the outcome.
func (w *worker) run(ev Event) {
	log := w.log.With("event", ev.Event, "epoch", ev.Epoch)
	start := time.Now()
	p, err := w.start(ev, log)
	if err != nil {
		log.Error("hooks: cannot start the hook", "err", err)
		w.observe(ev, OutcomeCannotStart, time.Since(start))
		return
	}
	log.Debug("hooks: run started", "pid", p.cmd.Process.Pid)
	stopped := p.wait(w.r.cfg.Timeout, w.r.cfg.KillGrace, w.r.abort)
	p.settle(log)
	took := time.Since(start)
	logEnd(log, p, stopped, took)
	w.observe(ev, p.outcome(stopped), took)
}

// The outcomes of a hook run, as RunOutcome.Outcome names them.
const (
	OutcomeOK          = "ok"           // exited 0
	OutcomeFailed      = "failed"       // exited non-zero or by a signal of its own
	OutcomeTimeout     = "timeout"      // stopped at the timeout
	OutcomeAborted     = "aborted"      // killed because the runner closed
	OutcomeCannotStart = "cannot-start" // the shell could not be started
)

// RunOutcome is one finished hook run, as Config.Observe is told it.
type RunOutcome struct {
	Hook     string // the hook's name
	Event    string // the event that ran it
	Outcome  string // one of the Outcome constants
	Duration time.Duration
}

func (w *worker) observe(ev Event, outcome string, took time.Duration) {
	if w.r.cfg.Observe != nil {
		w.r.cfg.Observe(RunOutcome{Hook: w.hook.Name, Event: ev.Event, Outcome: outcome, Duration: took})
	}
}

// outcome classifies a finished run; stopped is wait's answer.
func (p *proc) outcome(stopped string) string {
	switch {
	case strings.HasPrefix(stopped, "timeout"):
		return OutcomeTimeout
	case stopped != "":
		return OutcomeAborted
	case p.cmd.ProcessState != nil && p.cmd.ProcessState.ExitCode() == 0:
		return OutcomeOK
	}
	return OutcomeFailed
}

// start starts the hook's command for ev, with its output read into log.
func (w *worker) start(ev Event, log *slog.Logger) (*proc, error) {
	cmd := exec.Command(shell, "-c", w.hook.Command)
	cmd.Env = ev.environ(w.r.cfg.Env)
	cmd.Stdin = bytes.NewReader(ev.stdin())
	cmd.SysProcAttr = procgroup.Attr()
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("hooks: stdout pipe: %w", err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("hooks: stderr pipe: %w", err)
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	err = cmd.Start()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, fmt.Errorf("hooks: start %s: %w", shell, err)
	}
	p := &proc{cmd: cmd, exited: make(chan struct{}), output: make(chan struct{})}
	p.readers.Store(2)
	w.r.outputs.Add(2)
	go w.r.capture(p, outR, log, "stdout", slog.LevelInfo)
	go w.r.capture(p, errR, log, "stderr", slog.LevelWarn)
	go p.reap()
	return p, nil
}

func (p *proc) reap() {
	p.waitErr = p.cmd.Wait()
	close(p.exited)
}

// wait waits for the command to exit. At timeout it stops the process
// group, and when abort is closed it kills the group. It returns why the
// command was stopped, or "" when it exited by itself.
func (p *proc) wait(timeout, grace time.Duration, abort <-chan struct{}) (stopped string) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	pgid := p.cmd.Process.Pid
	select {
	case <-p.exited:
		return ""
	case <-t.C:
		stopped = "timeout"
		if procgroup.Stop(pgid, grace, abort) {
			stopped = "timeout; killed after the grace"
		}
	case <-abort:
		stopped = "runner closed"
		procgroup.Kill(pgid, grace)
	}
	<-p.exited
	return stopped
}

// settle gives the output streams a moment to reach end of file, so that
// the run's last lines are logged before its end.
func (p *proc) settle(log *slog.Logger) {
	t := time.NewTimer(outputSettle)
	defer t.Stop()
	select {
	case <-p.output:
	case <-t.C:
		log.Debug("hooks: output still open after the run; a background process holds it")
	}
}

// capture logs f line by line until end of file, or until the Runner stops
// reading output.
func (r *Runner) capture(p *proc, f *os.File, log *slog.Logger, stream string, level slog.Level) {
	defer r.outputs.Done()
	defer func() {
		if p.readers.Add(-1) == 0 {
			close(p.output)
		}
	}()
	defer f.Close()
	stop := context.AfterFunc(r.outputCtx, func() { f.Close() })
	defer stop()
	log = log.With("stream", stream)
	br := bufio.NewReaderSize(f, maxLine)
	for {
		line, err := br.ReadSlice('\n')
		full := errors.Is(err, bufio.ErrBufferFull)
		logLine(log, level, line, full)
		if full {
			err = skipLine(br)
		}
		if err != nil {
			return
		}
	}
}

// logLine logs one line of output, without its line ending.
func logLine(log *slog.Logger, level slog.Level, line []byte, truncated bool) {
	line = bytes.TrimRight(line, "\r\n")
	if len(line) == 0 && !truncated {
		return
	}
	if truncated {
		log.Log(context.Background(), level, "hooks: output", "line", string(line), "truncated", true)
		return
	}
	log.Log(context.Background(), level, "hooks: output", "line", string(line))
}

// skipLine discards input up to and including the next newline.
func skipLine(br *bufio.Reader) error {
	for {
		_, err := br.ReadSlice('\n')
		if !errors.Is(err, bufio.ErrBufferFull) {
			return err
		}
	}
}

// logEnd logs how a run ended: Info for exit status 0, else Warn.
func logEnd(log *slog.Logger, p *proc, stopped string, took time.Duration) {
	attrs := []any{"duration", took.Round(time.Millisecond)}
	if p.cmd.ProcessState == nil { // Wait failed without an exit status
		log.Warn("hooks: run finished", append(attrs, "err", p.waitErr)...)
		return
	}
	level := slog.LevelInfo
	ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	switch {
	case ok && ws.Signaled():
		attrs = append(attrs, "signal", ws.Signal().String())
		level = slog.LevelWarn
	case p.cmd.ProcessState.ExitCode() != 0:
		attrs = append(attrs, "exit_code", p.cmd.ProcessState.ExitCode())
		level = slog.LevelWarn
	default:
		attrs = append(attrs, "exit_code", 0)
	}
	if stopped != "" {
		attrs = append(attrs, "stopped", stopped)
		level = slog.LevelWarn
	}
	var exitErr *exec.ExitError
	if p.waitErr != nil && !errors.As(p.waitErr, &exitErr) {
		attrs = append(attrs, "err", p.waitErr)
		level = slog.LevelWarn
	}
	log.Log(context.Background(), level, "hooks: run finished", attrs...)
}
