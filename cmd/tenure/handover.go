package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/tenurehq/tenure/rpc"
)

func drainCommand() *cli.Command {
	return &cli.Command{
		Name:  "drain",
		Usage: "stop this node from leading, now and after restarts (a leader resigns); --off lifts it",
		Description: "A drained node still votes and follows, but does not lead, across restarts (the file\n" +
			"`drained` in its data dir records the drain), until `tenure drain --off`. A drained leader\n" +
			"hands over as `tenure resign` does: its `tenure run` commands stop before the next leader's start.",
		Flags: []cli.Flag{socketFlag(),
			&cli.BoolFlag{Name: "off", Usage: "lift the drain: the node may lead again"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 0 {
				return fail(2, "tenure drain: takes no arguments (it drains the local node)")
			}
			off := c.Bool("off")
			return withClient(c, func(ctx context.Context, cl *rpc.Client) error {
				if err := cl.Drain(ctx, !off); err != nil {
					return err
				}
				if off {
					fmt.Fprintln(c.App.Writer, "drain lifted: this node may lead again")
				} else {
					fmt.Fprintln(c.App.Writer, "drained: this node does not lead until `tenure drain --off`")
				}
				return nil
			})
		},
	}
}

func transferCommand() *cli.Command {
	return &cli.Command{
		Name:      "transfer",
		Usage:     "make the leader hand its term to NODE (through the leader); waits until NODE leads",
		ArgsUsage: "NODE",
		Flags: []cli.Flag{socketFlag(),
			&cli.DurationFlag{Name: "wait", Value: 10 * time.Second, Usage: "how long to wait for NODE to lead (0: do not wait)"},
		},
		Action: func(c *cli.Context) error {
			name, err := oneName(c, "tenure transfer", "NODE")
			if err != nil {
				return err
			}
			var before *rpc.LeaderInfo // the leader this node saw before the request
			if err := withClient(c, func(ctx context.Context, cl *rpc.Client) error {
				if l, err := cl.Leader(ctx); err == nil {
					before = &l
				}
				return cl.Transfer(ctx, name)
			}); err != nil {
				return err
			}
			if c.Duration("wait") <= 0 {
				fmt.Fprintf(c.App.Writer, "transfer to %s requested\n", name)
				return nil
			}
			return waitLeads(c, name, before, c.Duration("wait"))
		},
	}
}

// waitLeads polls the local agent until it names name leader, for at most
// d. Once it names a third node in a later term than before's (the leader
// it saw when it asked), name did not take the term: the others left the
// election to name for the transfer window only, and the error says who
// leads instead. The local agent's view is all it has: cut off from name,
// it may not see name lead although it does, and the error says so.
func waitLeads(c *cli.Context, name string, before *rpc.LeaderInfo, d time.Duration) error {
	ctx, cancel := context.WithTimeout(c.Context, d)
	defer cancel()
	cl, err := rpc.Dial(ctx, c.String("socket"))
	if err != nil {
		return clientError(err)
	}
	defer cl.Close()
	for {
		l, err := cl.Leader(ctx)
		switch {
		case err == nil && l.Node == name:
			fmt.Fprintf(c.App.Writer, "%s leads, epoch %d\n", l.Node, l.Epoch)
			return nil
		case err == nil && before != nil && l.Epoch > before.Epoch && l.Node != before.Node:
			return fail(1, "tenure transfer: %s did not take the term: this node sees %s lead, epoch %d; %s resigned naming %s, which did not lead within the transfer window (stopped, frozen or cut off from the voters: `tenure status` on %s tells), so the election picked the leader", name, l.Node, l.Epoch, before.Node, name, name)
		case err != nil && !errors.Is(err, rpc.ErrNoLeader) && ctx.Err() == nil:
			return clientError(err)
		}
		select {
		case <-ctx.Done():
			return fail(1, "tenure transfer: this node does not see %s lead after %v: %s may have failed to take the lease (the election then picks the leader), or this node cannot hear it (`tenure leader` on %s tells)", name, d, name, name)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
