package supervise

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"github.com/tenurehq/tenure/internal/procgroup"
	"io"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/tenurehq/tenure/rpc"
)

// Defaults for the Config fields left zero, and the restart bound.
const (
	// DefaultGrace is the time between SIGTERM and SIGKILL, and the margin
	// kept before the lease deadline.
	DefaultGrace = 5 * time.Second
	// DefaultRetryInterval is how often Run tries to reach the agent again.
	DefaultRetryInterval = time.Second
	// DefaultRestartDelay is the first delay before starting again a
	// command that exited by itself.
	DefaultRestartDelay = time.Second
	// MaxRestartDelay bounds the doubling restart delay; a run that lasts
	// this long resets it.
	MaxRestartDelay = 30 * time.Second

	// maxPollInterval bounds the time between two status polls.
	maxPollInterval = 500 * time.Millisecond
	// minPollInterval keeps a tiny Grace from polling in a busy loop.
	minPollInterval = 10 * time.Millisecond
	// minCallTimeout is the least time a call to the agent is given.
	minCallTimeout = time.Second
)

// Config configures Run. Run copies it and never writes back.
type Config struct {
	// Socket is the local agent's socket; default rpc.DefaultSocketPath().
	Socket string
	// Command is the argv to run. With Shell, it holds exactly one string,
	// a script for /bin/sh -c.
	Command []string
	// Shell runs Command[0] with /bin/sh -c.
	Shell bool
	// Grace is the time between SIGTERM and SIGKILL, and the margin kept
	// before the lease deadline; default DefaultGrace.
	Grace time.Duration
	// Once makes Run return when the command exits by itself while this
	// node leads, with the command's exit code (128+N for a signal N).
	Once bool
	// Logger receives Run's logs; default: discard.
	Logger *slog.Logger
	// Env is the command's base environment; default os.Environ() when Run
	// is called.
	Env []string
	// Stdout and Stderr receive the command's output; default os.Stdout and
	// os.Stderr. The command's standard input is /dev/null.
	Stdout, Stderr io.Writer
	// Dial connects to the agent; default rpc.Dial. For tests.
	Dial func(ctx context.Context, path string) (*rpc.Client, error)
	// RetryInterval is the time between attempts to reach the agent;
	// default DefaultRetryInterval.
	RetryInterval time.Duration
	// RestartDelay is the first delay before starting again a command that
	// exited by itself; default DefaultRestartDelay. It doubles after each
	// quick exit, up to MaxRestartDelay.
	RestartDelay time.Duration
}

// withDefaults returns a copy of c with defaults filled in, or the first
// problem with c.
func (c Config) withDefaults() (Config, error) {
	if err := c.validate(); err != nil {
		return c, err
	}
	c.Command = slices.Clone(c.Command)
	c.Socket = cmp.Or(c.Socket, rpc.DefaultSocketPath())
	c.Grace = cmp.Or(c.Grace, DefaultGrace)
	c.RetryInterval = cmp.Or(c.RetryInterval, DefaultRetryInterval)
	c.RestartDelay = cmp.Or(c.RestartDelay, DefaultRestartDelay)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Env == nil {
		c.Env = os.Environ()
	}
	c.Env = slices.Clone(c.Env)
	c.Stdout = cmp.Or[io.Writer](c.Stdout, os.Stdout)
	c.Stderr = cmp.Or[io.Writer](c.Stderr, os.Stderr)
	if c.Dial == nil {
		c.Dial = rpc.Dial
	}
	return c, nil
}

// validate reports the first problem with c.
func (c Config) validate() error {
	switch {
	case !procgroup.Supported:
		return errors.New("supervise: needs a Unix system (process groups)")
	case len(c.Command) == 0 || c.Command[0] == "":
		return errors.New("supervise: no command to run")
	case c.Shell && len(c.Command) != 1:
		return fmt.Errorf("supervise: with Shell, the command is one script; got %d arguments (quote the script)", len(c.Command))
	case c.Grace < 0 || c.RetryInterval < 0 || c.RestartDelay < 0:
		return errors.New("supervise: negative Grace, RetryInterval or RestartDelay")
	case c.Grace != 0 && (c.Grace < time.Millisecond || c.Grace > rpc.MaxRunnerGrace):
		return fmt.Errorf("supervise: Grace %v is not between 1ms and %v", c.Grace, rpc.MaxRunnerGrace)
	}
	return nil
}

// pollInterval is the time between two status polls.
func (c Config) pollInterval() time.Duration {
	return max(min(c.Grace/4, maxPollInterval), minPollInterval)
}

// callTimeout bounds each call to the agent.
func (c Config) callTimeout() time.Duration { return max(c.Grace, minCallTimeout) }
