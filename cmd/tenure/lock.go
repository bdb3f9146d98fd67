package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/tenurehq/tenure/agent/supervise"
	"github.com/tenurehq/tenure/leasing/redislock"
	"github.com/tenurehq/tenure/rpc"
)

func lockCommand() *cli.Command {
	return &cli.Command{
		Name:  "lock",
		Usage: "run a command while holding a named lock of the cluster; stop it before the lock can end",
		Description: "Waits for the lock NAME (held by one process in the whole cluster at a time), runs CMD with\n" +
			"TENURE_LOCK and TENURE_TOKEN (a fencing token that grows with every grant of NAME) in its\n" +
			"environment, renews the lock while CMD runs, and releases it when CMD exits. If a renewal\n" +
			"fails, CMD's process group is stopped (SIGTERM, SIGKILL after --grace) before the lock can end.\n" +
			"With --backend redis://HOST:PORT the lock is taken in one Redis instance instead (SET NX PX,\n" +
			"with a fencing token from a counter of the name); with --backend redlock://H1:P1,H2:P2,H3:P3\n" +
			"by Redlock over independent instances, which has NO fencing token: TENURE_TOKEN is not set,\n" +
			"and --require-token refuses it (docs/GUARANTEES.md, \"Choosing a lock\").\n" +
			"Exit codes: CMD's own when it ran; 3 not acquired within --timeout (or, with --timeout 0,\n" +
			"held); 4 no quorum or no leader (for Redis: too few instances answer); 5 the lock was lost\n" +
			"and CMD stopped; 2 usage or refused.",
		ArgsUsage: "NAME -- CMD [ARGS...]",
		Flags: []cli.Flag{
			socketFlag(),
			&cli.DurationFlag{Name: "timeout", Value: -1, Usage: "how long to wait for the lock; 0 tries once", DefaultText: "as long as it takes"},
			&cli.DurationFlag{Name: "ttl", Usage: "the lock's TTL: how long it outlives a holder that stops renewing", DefaultText: "twice the agent's --lease-ttl"},
			&cli.DurationFlag{Name: "grace", Value: supervise.DefaultGrace, Usage: "time between SIGTERM and SIGKILL, and the margin kept before the lock's end", EnvVars: env("grace")},
			&cli.BoolFlag{Name: "shell", Usage: "run CMD (one argument) with /bin/sh -c"},
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error", EnvVars: env("log-level")},
			&cli.StringFlag{Name: "backend", Usage: "take the lock in Redis: redis://HOST:PORT (one instance, fenced) or redlock://H1:P1,H2:P2,H3:P3 (Redlock, no fencing token)", DefaultText: "the local tenure agent"},
			&cli.BoolFlag{Name: "require-token", Usage: "refuse a backend that gives no fencing token (Redlock)"},
		},
		Action: func(c *cli.Context) error {
			args := c.Args().Slice()
			if len(args) > 1 && args[1] == "--" { // NAME -- CMD: the flags ended at NAME
				args = append(args[:1], args[2:]...)
			}
			if len(args) < 2 || strings.HasPrefix(args[0], "-") {
				return fail(2, "tenure lock: give the lock's name and a command (usage: tenure lock [options] NAME -- CMD ARGS...)")
			}
			cfg := supervise.LockConfig{Name: args[0], TTL: c.Duration("ttl"), Wait: c.Duration("timeout"), RequireToken: c.Bool("require-token")}
			if backend := c.String("backend"); backend != "" {
				lk, err := redislock.Open(backend, redislock.Config{})
				if err != nil {
					return fail(2, "tenure lock --backend: %v", err)
				}
				defer lk.Close()
				if cfg.RequireToken && !lk.Fenced() {
					return fail(2, "tenure lock: --require-token: %s is Redlock, which gives no fencing token; use --backend redis://HOST:PORT or the tenure agent", backend)
				}
				cfg.Locker = redisLocker{lk}
			}
			return runLocked(c, cfg, args[1:], "tenure lock")
		},
	}
}

// redisLocker grants tenure lock's leases from Redis (leasing/redislock),
// with the errors supervise.RunLocked turns into exit codes.
type redisLocker struct{ lk *redislock.Locker }

// Lock takes the lock in Redis.
func (r redisLocker) Lock(ctx context.Context, name string, o supervise.LeaseOptions) (supervise.Lease, error) {
	l, err := r.lk.Lock(ctx, name, redislock.LockOptions{TTL: o.TTL, Wait: o.Wait})
	switch {
	case err == nil:
		return l, nil
	case errors.Is(err, redislock.ErrUnavailable):
		return nil, fmt.Errorf("%w: %s: %w", supervise.ErrLeaseUnavailable, r.lk, err)
	case errors.Is(err, redislock.ErrNotAcquired):
		return nil, fmt.Errorf("%w: %s: %w", supervise.ErrLeaseNotGranted, r.lk, err)
	}
	return nil, fmt.Errorf("%s: %w", r.lk, err)
}

// runLocked runs supervise.RunLocked for the lock and task commands.
func runLocked(c *cli.Context, cfg supervise.LockConfig, command []string, what string) error {
	return superviseUnder(c, command, what, func(ctx context.Context, base supervise.Config) (int, error) {
		cfg.Config = base
		return supervise.RunLocked(ctx, cfg)
	})
}

// runGroup runs supervise.RunGroup for tenure run --group.
func runGroup(c *cli.Context, group string, command []string) error {
	return superviseUnder(c, command, "tenure run --group", func(ctx context.Context, base supervise.Config) (int, error) {
		return supervise.RunGroup(ctx, supervise.GroupConfig{Config: base, Group: group, Partitions: c.Int("partitions"), TTL: c.Duration("ttl")})
	})
}

// superviseUnder runs a supervisor of command under a named lease with
// the command line's --socket, --shell, --grace and --log-level, until it
// returns or SIGINT or SIGTERM ends it, and turns its result into the
// exit code.
func superviseUnder(c *cli.Context, command []string, what string, run func(context.Context, supervise.Config) (int, error)) error {
	if c.Bool("shell") && len(command) != 1 {
		return fail(2, "%s --shell: give the script as one quoted argument", what)
	}
	logger, err := newLogger(c.String("log-level"), false)
	if err != nil {
		return fail(2, "%s: %v", what, err)
	}
	redislock.SetRedisLogger(logger)
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	code, err := run(ctx, supervise.Config{
		Socket:  c.String("socket"),
		Command: command,
		Shell:   c.Bool("shell"),
		Grace:   c.Duration("grace"),
		Logger:  logger,
		Env:     append(os.Environ(), "TENURE_SOCKET="+c.String("socket")),
	})
	if err != nil {
		return fail(max(code, 1), "%s: %v", what, err)
	}
	if code != 0 {
		return fail(code, "")
	}
	return nil
}

// holderText is how a listing shows a lease's holder and time left: "-"
// for both while nobody holds it.
func holderText(l rpc.LockInfo) (holder, remaining string) {
	if l.Holder == "" {
		return "-", "-"
	}
	return l.Holder, (time.Duration(l.RemainingMS) * time.Millisecond).String()
}

func partitionsCommand() *cli.Command {
	return &cli.Command{
		Name:      "partitions",
		Usage:     "show which member holds each partition of a group, with its token",
		ArgsUsage: "GROUP",
		Flags:     []cli.Flag{socketFlag(), jsonFlag()},
		Action: func(c *cli.Context) error {
			group, err := oneName(c, "tenure partitions", "GROUP")
			if err != nil {
				return err
			}
			return withClient(c, func(ctx context.Context, cl *rpc.Client) error {
				all, err := cl.Locks(ctx)
				if err != nil {
					return err
				}
				var ls []rpc.LockInfo
				for _, l := range all {
					if l.Kind == "partition" && l.Group == group {
						ls = append(ls, l)
					}
				}
				part := func(l rpc.LockInfo) int {
					n, _ := strconv.Atoi(strings.TrimPrefix(l.Name, group+"/"))
					return n
				}
				sort.Slice(ls, func(i, j int) bool { return part(ls[i]) < part(ls[j]) })
				if c.Bool("json") {
					enc := json.NewEncoder(c.App.Writer)
					enc.SetIndent("", "  ")
					return enc.Encode(append([]rpc.LockInfo{}, ls...))
				}
				if len(ls) == 0 {
					fmt.Fprintf(c.App.Writer, "no member holds or asks for a partition of %s\n", group)
					return nil
				}
				w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "PARTITION\tHOLDER\tTOKEN\tREMAINING\tMOVING")
				for _, l := range ls {
					holder, remaining := holderText(l)
					moving := ""
					if l.Revoking {
						moving = "yes"
					}
					fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", strings.TrimPrefix(l.Name, group+"/"), holder, l.Token, remaining, moving)
				}
				return w.Flush()
			})
		},
	}
}

func locksCommand() *cli.Command {
	return leasesCommand("locks", "lock", "list the named locks the leader holds: holders, tokens and waiters in queue order", "WAITERS")
}

func tasksCommand() *cli.Command {
	return leasesCommand("tasks", "task", "list the singleton tasks (tenure run --task): the host each is placed on, and its token", "CANDIDATES")
}

// leasesCommand lists the leader's named leases of one kind (the kind
// field of rpc.LockInfo); others names the column of the waiting nodes.
func leasesCommand(name, kind, usage, others string) *cli.Command {
	return &cli.Command{
		Name:  name,
		Usage: usage,
		Flags: []cli.Flag{socketFlag(), jsonFlag()},
		Action: func(c *cli.Context) error {
			return withClient(c, func(ctx context.Context, cl *rpc.Client) error {
				all, err := cl.Locks(ctx)
				if err != nil {
					return err
				}
				ls := []rpc.LockInfo{}
				for _, l := range all {
					if l.Kind == kind {
						ls = append(ls, l)
					}
				}
				if c.Bool("json") {
					enc := json.NewEncoder(c.App.Writer)
					enc.SetIndent("", "  ")
					return enc.Encode(ls)
				}
				if len(ls) == 0 {
					fmt.Fprintf(c.App.Writer, "no %s held or waited for\n", name)
					return nil
				}
				w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
				fmt.Fprintf(w, "NAME\tHOLDER\tTOKEN\tREMAINING\t%s\n", others)
				for _, l := range ls {
					holder, remaining := holderText(l)
					fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\n", l.Name, holder, l.Token, remaining, strings.Join(l.Waiters, ","))
				}
				return w.Flush()
			})
		},
	}
}
