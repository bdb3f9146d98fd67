package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/tenurehq/tenure/agent/supervise"
	"github.com/tenurehq/tenure/rpc"
)

func runCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "run a command only while the local agent leads; stop it (and its children) before the lease can end",
		ArgsUsage: "-- CMD [ARGS...]",
		Flags: []cli.Flag{
			socketFlag(),
			&cli.DurationFlag{Name: "grace", Value: supervise.DefaultGrace, Usage: "time between SIGTERM and SIGKILL, and the lease margin kept before the deadline; keep it well under two thirds of the agent's --lease-ttl", EnvVars: env("grace")},
			&cli.BoolFlag{Name: "shell", Usage: "run CMD (one argument) with /bin/sh -c"},
			&cli.BoolFlag{Name: "once", Usage: "exit when CMD exits while leading, with its exit code"},
			&cli.StringFlag{Name: "task", Usage: "run CMD as the singleton task `NAME` instead of where the cluster leader is: the leader places each task on one of the hosts running `tenure run --task NAME`, spreading tasks over hosts; CMD gets TENURE_TASK and TENURE_TOKEN"},
			&cli.StringFlag{Name: "group", Usage: "run CMD as a member of the partition group `NAME`: the leader divides the group's partitions among its members; CMD gets TENURE_GROUP and TENURE_PARTITIONS=P:TOKEN,... and is restarted when its partitions change"},
			&cli.IntFlag{Name: "partitions", Usage: "with --group: the group's number of partitions (the same on every member; at most 32)"},
			&cli.DurationFlag{Name: "ttl", Usage: "with --task or --group: the lease TTL", DefaultText: "twice the agent's --lease-ttl"},
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error", EnvVars: env("log-level")},
		},
		Action: runSupervised,
	}
}

func runSupervised(c *cli.Context) error {
	args := c.Args().Slice()
	if len(args) == 0 {
		return fail(2, "tenure run: no command given (usage: tenure run [--grace 5s] -- CMD ARGS...)")
	}
	if c.Bool("shell") && len(args) != 1 {
		return fail(2, "tenure run --shell: give the script as one quoted argument")
	}
	if group := c.String("group"); group != "" {
		if c.String("task") != "" || c.Bool("once") {
			return fail(2, "tenure run --group: --task and --once do not go with --group")
		}
		if n := c.Int("partitions"); n < 1 || n > supervise.MaxPartitions {
			return fail(2, "tenure run --group: give --partitions between 1 and %d", supervise.MaxPartitions)
		}
		return runGroup(c, group, args)
	}
	if task := c.String("task"); task != "" {
		if c.Bool("once") {
			return fail(2, "tenure run --task: --once is for leader-bound commands; a task runs until stopped")
		}
		return runLocked(c, supervise.LockConfig{Name: task, Task: true, TTL: c.Duration("ttl")}, args, "tenure run --task")
	}
	logger, err := newLogger(c.String("log-level"), false)
	if err != nil {
		return fail(2, "tenure run: %v", err)
	}
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	code, err := supervise.Run(ctx, supervise.Config{
		Socket:  c.String("socket"),
		Command: args,
		Shell:   c.Bool("shell"),
		Grace:   c.Duration("grace"),
		Once:    c.Bool("once"),
		Logger:  logger,
		// The child's `tenure leader --check` must reach the same agent.
		Env: append(os.Environ(), "TENURE_SOCKET="+c.String("socket")),
	})
	if err != nil {
		if code == 0 {
			code = 1
		}
		return fail(code, "tenure run: %v", err)
	}
	if code != 0 {
		return fail(code, "")
	}
	return nil
}

func forceLeaveCommand() *cli.Command {
	return &cli.Command{
		Name:      "force-leave",
		Usage:     "remove a voter that will not come back from the roster (through the leader)",
		ArgsUsage: "NAME",
		Flags:     []cli.Flag{socketFlag()},
		Action: func(c *cli.Context) error {
			name, err := oneName(c, "tenure force-leave", "NAME")
			if err != nil {
				return err
			}
			return withClient(c, func(ctx context.Context, cl *rpc.Client) error {
				if err := cl.ForceLeave(ctx, name); err != nil {
					return err
				}
				fmt.Fprintf(c.App.Writer, "removal of %s requested; the leader removes it from the roster\n", name)
				return nil
			})
		},
	}
}
