// Command tenure is the tenure agent and its command-line client.
//
// `tenure agent` runs the agent; the other commands talk to the local agent
// over its Unix socket (see docs/PROTOCOL.md). Every agent flag, and
// --socket everywhere, can also be set by an environment variable
// TENURE_<FLAG>, e.g. TENURE_SOCKET; flags that shape one invocation
// (--json, --once, ...) cannot.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/urfave/cli/v2"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "0.1.0-dev"

// exitError carries an exit code with a message for stderr.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func fail(code int, format string, args ...any) error {
	return &exitError{code: code, msg: fmt.Sprintf(format, args...)}
}

func newApp() *cli.App {
	app := &cli.App{
		Name:    "tenure",
		Usage:   "leader election for a fleet: gossip, bully election, epochs for fencing",
		Version: version,
		Commands: []*cli.Command{
			agentCommand(),
			statusCommand(),
			leaderCommand(),
			membersCommand(),
			watchCommand(),
			resignCommand(),
			runCommand(),
			lockCommand(),
			locksCommand(),
			tasksCommand(),
			partitionsCommand(),
			forceLeaveCommand(),
			drainCommand(),
			transferCommand(),
			demoCommand(),
			demoHolderCommand(),
			keygenCommand(),
			keysCommand(),
			versionCommand(),
		},
		HideVersion:          false,
		EnableBashCompletion: true,
		ExitErrHandler:       func(*cli.Context, error) {}, // main reports errors
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return fail(2, "tenure: %v (see tenure --help)", err)
		},
	}
	strictUsage("tenure", app.Commands)
	return app
}

func main() {
	os.Exit(run(os.Args))
}

func run(args []string) int {
	err := newApp().Run(args)
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintln(os.Stderr, ee.msg)
		}
		return ee.code
	}
	fmt.Fprintf(os.Stderr, "tenure: %v\n", err)
	return 2
}
