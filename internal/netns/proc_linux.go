package netns

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Proc is a started process whose output goes to a log file and whose end
// is waited for by one goroutine. Its methods are safe for concurrent use.
type Proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // cmd.Wait's, readable once done is closed
}

// Start starts cmd with its stdout and stderr appended to logPath
// (created if missing, so a restarted process's lines follow the earlier
// run's).
func Start(cmd *exec.Cmd, logPath string) (*Proc, error) {
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("netns: log of %s: %w", cmd.Path, err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("netns: start %s: %w", cmd.Args, err)
	}
	p := &Proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		log.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process's ID.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited and been reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether the process has exited, and its wait error
// (nil for exit status 0).
func (p *Proc) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Signal sends sig to the process; a process that has exited is not an
// error.
func (p *Proc) Signal(sig syscall.Signal) error {
	if done, _ := p.Exited(); done {
		return nil
	}
	if err := p.cmd.Process.Signal(sig); err != nil && err != os.ErrProcessDone {
		return fmt.Errorf("netns: signal %v to %d: %w", sig, p.Pid(), err)
	}
	return nil
}

// Stop sends sig and waits up to wait for the process to exit; one still
// running then is killed, and Stop reports that it had to.
func (p *Proc) Stop(sig syscall.Signal, wait time.Duration) error {
	if err := p.Signal(sig); err != nil {
		return err
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(wait):
	}
	p.Kill()
	return fmt.Errorf("netns: %d did not exit within %v of %v: killed", p.Pid(), wait, sig)
}

// Kill sends SIGKILL (which ends a stopped process too) and waits for the
// process to exit.
func (p *Proc) Kill() {
	_ = p.Signal(syscall.SIGKILL)
	<-p.done
}
