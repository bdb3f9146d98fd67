// Package redisproc starts and stops real redis-server processes on
// loopback ports, for the Redis and Redlock lock tests and for
// `tenure demo --compare`. Each server keeps nothing on disk
// (`--save ” --appendonly no`), so a restart brings it back empty, as an
// instance that lost its data would be.
package redisproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tenurehq/tenure/internal/procgroup"
)

// ErrMissing is wrapped by Start's error when redis-server is not on PATH.
var ErrMissing = errors.New("redisproc: redis-server is not installed (scripts/install-redis.sh installs Debian's package)")

// Server is one redis-server process on 127.0.0.1, in a directory of its
// own. Its methods are not safe for concurrent use.
type Server struct {
	// Port is the server's TCP port on 127.0.0.1; it keeps it across
	// Restart.
	Port int
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// Available reports whether redis-server is on PATH.
func Available() bool {
	_, err := exec.LookPath("redis-server")
	return err == nil
}

// Start starts a redis-server on a free loopback port with dir as its
// working directory (created if missing) and waits until it answers PING.
func Start(ctx context.Context, dir string) (*Server, error) {
	if !Available() {
		return nil, ErrMissing
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("redisproc: %w", err)
	}
	for attempt := 0; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s := &Server{Port: port, dir: dir}
		err = s.start(ctx)
		if err == nil {
			return s, nil
		}
		if attempt >= 3 || ctx.Err() != nil {
			return nil, err
		}
	}
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("redisproc: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Addr is the server's address, 127.0.0.1:PORT.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)) }

// Running reports whether the process is running (it may be stopped by
// Pause).
func (s *Server) Running() bool {
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// start launches the process on s.Port and waits for it to answer.
func (s *Server) start(ctx context.Context) error {
	cmd := exec.Command("redis-server",
		"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no",
		"--dir", s.dir, "--logfile", filepath.Join(s.dir, "redis.log"),
		"--daemonize", "no", "--protected-mode", "no")
	cmd.Dir = s.dir
	cmd.SysProcAttr = procgroup.AttrDying()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redisproc: start redis-server on port %d: %w", s.Port, err)
	}
	s.cmd = cmd
	s.done = make(chan struct{})
	go func(done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(s.done)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if ping(s.Addr()) == nil {
			return nil
		}
		select {
		case <-s.done:
			return fmt.Errorf("redisproc: redis-server on port %d exited at start: %s", s.Port, s.logTail())
		case <-ctx.Done():
			s.Kill()
			return fmt.Errorf("redisproc: wait for redis-server on port %d: %w", s.Port, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Kill()
			return fmt.Errorf("redisproc: redis-server on port %d did not answer within 10s: %s", s.Port, s.logTail())
		}
	}
}

// ping sends PING in the inline protocol and expects +PONG.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("redisproc: PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

// logTail returns the end of the server's log, for errors.
func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	if len(b) > 600 {
		b = b[len(b)-600:]
	}
	return strings.TrimSpace(string(b))
}

// Kill ends the process with SIGKILL (resuming it first if paused) and
// waits for it; it does nothing when the process is not running.
func (s *Server) Kill() {
	if !s.Running() {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
}

// Restart kills the process and starts a new, empty one on the same port:
// every key, lock and counter the old one held is gone.
func (s *Server) Restart(ctx context.Context) error {
	s.Kill()
	return s.start(ctx)
}

// StartAgain starts a killed server again on its port, empty.
func (s *Server) StartAgain(ctx context.Context) error {
	if s.Running() {
		return fmt.Errorf("redisproc: redis-server on port %d is still running", s.Port)
	}
	return s.start(ctx)
}
