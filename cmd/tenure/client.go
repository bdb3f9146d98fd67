package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/tenurehq/tenure/rpc"
)

// callTimeout bounds every request of the client commands.
const callTimeout = 5 * time.Second

func socketFlag() cli.Flag {
	return &cli.StringFlag{Name: "socket", Value: rpc.DefaultSocketPath(), Usage: "the local agent's Unix socket", EnvVars: env("socket")}
}

func jsonFlag() cli.Flag {
	return &cli.BoolFlag{Name: "json", Usage: "print JSON"}
}

// withClient dials the local agent and runs f with a bounded context.
func withClient(c *cli.Context, f func(ctx context.Context, cl *rpc.Client) error) error {
	ctx, cancel := context.WithTimeout(c.Context, callTimeout)
	defer cancel()
	cl, err := rpc.Dial(ctx, c.String("socket"))
	if err != nil {
		return clientError(err)
	}
	defer cl.Close()
	return clientError(f(ctx, cl))
}

// clientError turns client errors into one clear line and an exit code.
func clientError(err error) error {
	var ee *exitError
	switch {
	case err == nil, errors.As(err, &ee):
		return err
	case errors.Is(err, rpc.ErrAgentUnreachable):
		return fail(2, "tenure: %v\n(is `tenure agent` running? set --socket or TENURE_SOCKET to its socket)", err)
	default:
		return fail(1, "tenure: %v", err)
	}
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	return enc.Encode(v)
}

func statusCommand() *cli.Command {
	return &cli.Command{
		Name:  "status",
		Usage: "show this node's view of the cluster",
		Flags: []cli.Flag{socketFlag(), jsonFlag()},
		Action: func(c *cli.Context) error {
			return withClient(c, func(ctx context.Context, cl *rpc.Client) error {
				st, err := cl.Status(ctx)
				if err != nil {
					return err
				}
				if c.Bool("json") {
					return printJSON(c.App.Writer, st)
				}
				printStatus(c.App.Writer, st)
				return nil
			})
		},
	}
}

func printStatus(w io.Writer, st rpc.Status) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "node:\t%s (id %d)\n", st.Node, st.ID)
	fmt.Fprintf(tw, "state:\t%s\n", st.State)
	if st.Leader != nil {
		fmt.Fprintf(tw, "leader:\t%s (id %d), epoch %d\n", st.Leader.Node, st.Leader.ID, st.Leader.Epoch)
	} else {
		fmt.Fprintf(tw, "leader:\tnone (%s)\n", st.Reason)
	}
	fmt.Fprintf(tw, "epoch:\t%d (highest known)\n", st.Epoch)
	if st.Drained {
		fmt.Fprintf(tw, "drained:\tyes: this node does not lead until `tenure drain --off`\n")
	}
	if st.Storage != "" {
		fmt.Fprintf(tw, "storage:\tfailing: %s (this node does not lead until a write to its data dir succeeds; it retries)\n", st.Storage)
	}
	if st.IsLeader && st.Consistency == "available" {
		fmt.Fprintf(tw, "lease:\tnone (available mode: no lease bounds leadership)\n")
	} else if st.IsLeader {
		fmt.Fprintf(tw, "lease:\t%v remaining\n", time.Duration(st.LeaseRemainingMS)*time.Millisecond)
	}
	fmt.Fprintf(tw, "members:\t%d alive\n", st.Members)
	fmt.Fprintf(tw, "consistency:\t%s\n", st.Consistency)
	printQuorum(tw, st)
	if r := st.Roster; r != nil {
		fmt.Fprintf(tw, "roster:\tv%d of cluster %s: %s\n", r.Version, r.ClusterID, strings.Join(r.Voters, " "))
	} else if st.Consistency == "quorum" {
		fmt.Fprintf(tw, "roster:\tnone yet (bootstrap with --expect N, or join a cluster that has one)\n")
	}
	tw.Flush()
}

// printQuorum prints the count of this node's last lease round; a node
// that runs none (a follower) shows only what a lease needs.
func printQuorum(w io.Writer, st rpc.Status) {
	q := st.Quorum
	switch {
	case q == nil || q.Need == 0:
	case q.Have > 0 || st.State == "leader" || st.State == "candidate" || st.State == "no-quorum":
		fmt.Fprintf(w, "quorum:\t%d grants, %d needed (last lease round)\n", q.Have, q.Need)
	default:
		fmt.Fprintf(w, "quorum:\t%d grants needed (this node runs no lease round)\n", q.Need)
	}
}

func leaderCommand() *cli.Command {
	return &cli.Command{
		Name:  "leader",
		Usage: "print the current leader; exit 1 when none is known",
		Flags: []cli.Flag{socketFlag(), jsonFlag(),
			&cli.Uint64Flag{Name: "check", Usage: "exit 0 only if `EPOCH` is the live term and this node leads it"},
		},
		Action: func(c *cli.Context) error {
			if c.IsSet("check") {
				return checkEpoch(c, c.Uint64("check"))
			}
			return withClient(c, func(ctx context.Context, cl *rpc.Client) error {
				l, err := cl.Leader(ctx)
				if errors.Is(err, rpc.ErrNoLeader) {
					return fail(1, "no leader")
				}
				if err != nil {
					return err
				}
				if c.Bool("json") {
					return printJSON(c.App.Writer, l)
				}
				fmt.Fprintf(c.App.Writer, "%s (id %d) epoch %d\n", l.Node, l.ID, l.Epoch)
				return nil
			})
		},
	}
}

// checkEpoch is `tenure leader --check EPOCH`: exit 0 only if this node
// leads term EPOCH with a valid lease.
func checkEpoch(c *cli.Context, epoch uint64) error {
	return withClient(c, func(ctx context.Context, cl *rpc.Client) error {
		res, err := cl.Check(ctx, epoch)
		if err != nil {
			return err
		}
		if c.Bool("json") {
			if err := printJSON(c.App.Writer, res); err != nil {
				return err
			}
		}
		switch {
		case res.Current:
			if !c.Bool("json") {
				fmt.Fprintf(c.App.Writer, "epoch %d is current: this node leads, lease %v remaining\n", epoch, time.Duration(res.LeaseRemainingMS)*time.Millisecond)
			}
			return nil
		case res.IsLeader:
			return fail(1, "epoch %d is not current: this node leads epoch %d", epoch, res.Epoch)
		default:
			return fail(1, "epoch %d is not current: this node does not lead", epoch)
		}
	})
}

func membersCommand() *cli.Command {
	return &cli.Command{
		Name:  "members",
		Usage: "list the cluster's members as gossip sees them",
		Flags: []cli.Flag{socketFlag(), jsonFlag()},
		Action: func(c *cli.Context) error {
			return withClient(c, func(ctx context.Context, cl *rpc.Client) error {
				ms, err := cl.Members(ctx)
				if err != nil {
					return err
				}
				if c.Bool("json") {
					if ms == nil {
						ms = []rpc.Member{}
					}
					return printJSON(c.App.Writer, ms)
				}
				printMembers(c.App.Writer, ms)
				return nil
			})
		},
	}
}

func printMembers(w io.Writer, ms []rpc.Member) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tID\tADDRESS\tPEER\tSTATUS\tROLE")
	for _, m := range ms {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", m.Name, m.ID, m.Addr, m.PeerAddr, m.Status, role(m))
	}
	tw.Flush()
}

// role describes a member in words: leader, its roster role (voter,
// staging, leaving, observer, left), "ineligible" for a node that may not
// lead, and its zone.
func role(m rpc.Member) string {
	var parts []string
	if m.IsLeader {
		parts = append(parts, "leader")
	}
	switch {
	case m.Role != "":
		parts = append(parts, m.Role)
	case m.Voter:
		parts = append(parts, "voter")
	default:
		parts = append(parts, "observer")
	}
	if m.Drained {
		parts = append(parts, "drained")
	} else if m.StorageFailed {
		parts = append(parts, "storage-failed")
	} else if !m.Eligible {
		parts = append(parts, "ineligible")
	}
	if m.Zone != "" {
		parts = append(parts, "zone="+m.Zone)
	}
	return strings.Join(parts, ",")
}

func watchCommand() *cli.Command {
	return &cli.Command{
		Name:  "watch",
		Usage: "print one line per leadership or membership change until interrupted",
		Flags: []cli.Flag{socketFlag(), jsonFlag(),
			&cli.BoolFlag{Name: "reconnect", Usage: "when the agent goes away (a restart), say so on stderr and keep trying to follow it again, every second, instead of exiting"},
		},
		Action: func(c *cli.Context) error {
			ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			for {
				err := watchOnce(ctx, c)
				if ctx.Err() != nil {
					return nil // interrupted
				}
				if err == nil || !c.Bool("reconnect") {
					return clientError(err)
				}
				fmt.Fprintf(c.App.ErrWriter, "tenure watch: %v; reconnecting\n", err)
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(time.Second):
				}
			}
		},
	}
}

// watchOnce follows the agent's events until ctx ends (nil) or the watch
// fails. Each new watch starts with an event stating the current leader,
// so a reconnected watch says where things stand.
func watchOnce(ctx context.Context, c *cli.Context) error {
	dialCtx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	cl, err := rpc.Dial(dialCtx, c.String("socket"))
	if err != nil {
		return err
	}
	defer cl.Close()
	w, err := cl.Watch(dialCtx)
	if err != nil {
		return err
	}
	defer w.Close()
	return printEvents(ctx, c, w)
}

func printEvents(ctx context.Context, c *cli.Context, w *rpc.Watcher) error {
	for {
		ev, err := w.Next(ctx)
		if ctx.Err() != nil {
			return nil // interrupted
		}
		if err != nil {
			return fmt.Errorf("watch ended: %w", err)
		}
		if c.Bool("json") {
			if err := printJSON(c.App.Writer, ev); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintln(c.App.Writer, eventLine(ev))
	}
}

func eventLine(ev rpc.Event) string {
	s := fmt.Sprintf("%s %-16s node=%s", ev.Time, ev.Event, ev.Node)
	if ev.Leader != nil {
		s += fmt.Sprintf(" leader=%s epoch=%d", ev.Leader.Node, ev.Leader.Epoch)
	} else {
		s += " leader=none"
	}
	if ev.Epoch != 0 && (ev.Leader == nil || ev.Leader.Epoch != ev.Epoch) {
		s += fmt.Sprintf(" term=%d", ev.Epoch) // the term that ended
	}
	if ev.Forgot != "" {
		s += fmt.Sprintf(" forgot=%q", ev.Forgot)
	}
	return s
}

func resignCommand() *cli.Command {
	return &cli.Command{
		Name:  "resign",
		Usage: "make this node stop leading (it does not take leadership back); exit 1 if it does not lead",
		Flags: []cli.Flag{socketFlag(),
			&cli.DurationFlag{Name: "hold", Usage: "stay out of elections for `D` (default: the agent's resign hold)"},
		},
		Action: func(c *cli.Context) error {
			if c.Duration("hold") < 0 {
				return fail(2, "tenure resign: --hold must not be negative")
			}
			return withClient(c, func(ctx context.Context, cl *rpc.Client) error {
				err := cl.ResignFor(ctx, c.Duration("hold"))
				if errors.Is(err, rpc.ErrNotLeader) {
					return fail(1, "tenure: this node is not the leader")
				}
				if err == nil {
					fmt.Fprintln(c.App.Writer, "resigned")
				}
				return err
			})
		},
	}
}

func versionCommand() *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version",
		Action: func(c *cli.Context) error {
			fmt.Fprintf(c.App.Writer, "tenure %s\n", version)
			return nil
		},
	}
}
