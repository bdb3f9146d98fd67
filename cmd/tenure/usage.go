package main

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// agentFlagCategories groups `tenure agent --help` by what a flag is about.
var agentFlagCategories = map[string][]string{
	"Config file":            {"config"},
	"Identity":               {"name", "id", "zone", "eligible", "voter"},
	"Network":                {"bind", "peer-bind", "advertise", "join", "max-members", "timing"},
	"Security":               {"encrypt", "keyring-file", "insecure-no-encryption"},
	"Election and lease":     {"consistency", "lease-ttl", "max-drift", "preempt", "expect", "voters", "dead-voter-timeout"},
	"Local socket":           {"socket", "socket-mode", "socket-group", "socket-max-conns", "socket-max-conns-per-peer", "socket-max-ungreeted", "socket-idle-timeout", "socket-hello-timeout", "socket-max-frame"},
	"Hooks and records":      {"hook", "hook-timeout", "journal", "data-dir"},
	"Logging and monitoring": {"log-level", "log-json", "http-addr", "debug-addr"},
}

// categorize sets each flag's help category from categories (category →
// flag names) and returns flags. A flag missing from categories keeps none;
// a test checks that every agent flag has one.
func categorize(categories map[string][]string, flags []cli.Flag) []cli.Flag {
	of := map[string]string{}
	for cat, names := range categories {
		for _, n := range names {
			of[n] = cat
		}
	}
	for _, f := range flags {
		cat := of[f.Names()[0]]
		switch f := f.(type) {
		case *cli.StringFlag:
			f.Category = cat
		case *cli.StringSliceFlag:
			f.Category = cat
		case *cli.BoolFlag:
			f.Category = cat
		case *cli.IntFlag:
			f.Category = cat
		case *cli.Uint64Flag:
			f.Category = cat
		case *cli.Float64Flag:
			f.Category = cat
		case *cli.DurationFlag:
			f.Category = cat
		case *cli.GenericFlag:
			f.Category = cat
		}
	}
	return flags
}

// oneName returns the one positional argument of cmd (shown as arg in
// its usage), or a usage error; one that looks like a flag after the name
// is told to come first, since flags after an argument are not read.
func oneName(c *cli.Context, cmd, arg string) (string, error) {
	args := c.Args().Slice()
	if len(args) == 1 && !strings.HasPrefix(args[0], "-") {
		return args[0], nil
	}
	for _, a := range args[min(1, len(args)):] {
		if strings.HasPrefix(a, "-") {
			return "", fail(2, "%s: flags go before %s (%s [options] %s); %q came after it", cmd, arg, cmd, arg, a)
		}
	}
	return "", fail(2, "%s: give exactly one %s (%s [options] %s)", cmd, arg, cmd, arg)
}

// strictUsage makes every command of cmds (and their subcommands) answer
// a usage mistake with one line naming the command and its --help,
// instead of the whole help: a flag it does not know, or positional
// arguments where its ArgsUsage names none (`tenure agent web-1` used to
// start an agent with every default).
func strictUsage(prefix string, cmds []*cli.Command) {
	for _, cmd := range cmds {
		name := prefix + " " + cmd.Name
		cmd.OnUsageError = func(_ *cli.Context, err error, _ bool) error {
			return fail(2, "%s: %v (see %s --help)", name, err, name)
		}
		if cmd.Action != nil && cmd.ArgsUsage == "" {
			before := cmd.Before
			cmd.Before = func(c *cli.Context) error {
				if c.NArg() > 0 {
					return fail(2, "%s: unexpected argument %q: it takes none (flags start with --; see %s --help)",
						name, c.Args().First(), name)
				}
				if before != nil {
					return before(c)
				}
				return nil
			}
		}
		strictUsage(name, cmd.Subcommands)
	}
}
