//go:build nemesis

package nemesis

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/tenurehq/tenure/test/nemesis/check"
)

// operateWait bounds an operator's command: a transfer waits up to its own
// --wait (10 s) for the new leader.
const operateWait = 20 * time.Second

// Operate records an operator's command against n's agent, then runs
// `tenure CMD --socket <n's socket> ARGS...` from the harness (a Unix
// socket is reached across network namespaces). A command the agent
// refuses (a resign of a node that no longer leads, a transfer the leader
// turns down) is recorded (check.EventRefused) and returned as refused,
// its exit status and output, not as an error: it may be refused for
// reasons of the moment, and the step's report shows it. The error is for
// a command that could not run.
func (c *Cluster) Operate(n *Node, cmd string, args ...string) (refused string, err error) {
	line := append([]string{cmd, "--socket", n.Socket()}, args...)
	shown := "tenure " + strings.Join(slices.Concat([]string{cmd}, args), " ")
	if _, err := c.events.Record(check.EventOperator, []string{n.Name}, shown); err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), operateWait)
	defer cancel()
	x := exec.CommandContext(ctx, c.cfg.Bin.Tenure, line...)
	x.Env = c.env()
	out, err := x.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return "", nil
	case errors.As(err, &exit) && ctx.Err() == nil:
		if _, err := c.events.Record(check.EventRefused, []string{n.Name}, shown); err != nil {
			return "", err
		}
		return fmt.Sprintf("%s on %s: %v: %s", shown, n.Name, err, strings.TrimSpace(string(out))), nil
	default:
		return "", fmt.Errorf("nemesis: %s on %s: %w", shown, n.Name, err)
	}
}
