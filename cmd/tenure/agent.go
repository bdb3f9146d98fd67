package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/tenurehq/tenure/agent"
	"github.com/tenurehq/tenure/agent/hooks"
	"github.com/tenurehq/tenure/internal/procs"
	"github.com/tenurehq/tenure/rpc"
)

// shutdownTimeout bounds the goodbyes (resign, leave) of a stopping agent.
const shutdownTimeout = 10 * time.Second

func env(name string) []string {
	return []string{"TENURE_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))}
}

func agentCommand() *cli.Command {
	d := agent.DefaultConfig()
	return &cli.Command{
		Name:   "agent",
		Usage:  "run the tenure agent on this host",
		Before: applyConfigFile,
		Flags: categorize(agentFlagCategories, []cli.Flag{
			&cli.StringFlag{Name: "config", Usage: "read settings from the TOML `FILE` (keys are flag names; flags and TENURE_ variables win); SIGHUP re-reads its log-level and hook", EnvVars: env("config")},
			&cli.StringFlag{Name: "name", Value: d.Name, Usage: "unique node name", EnvVars: env("name")},
			&cli.Uint64Flag{Name: "id", Usage: "node ID: the highest eligible live ID leads", DefaultText: "a stable hash of the name", EnvVars: env("id")},
			&cli.StringFlag{Name: "bind", Value: d.BindAddr, Usage: "gossip address `HOST:PORT`", EnvVars: env("bind")},
			&cli.StringFlag{Name: "peer-bind", Value: d.PeerBindAddr, Usage: "peer transport address `HOST:PORT`", EnvVars: env("peer-bind")},
			&cli.StringFlag{Name: "advertise", Usage: "address other agents reach this one at, `HOST`", EnvVars: env("advertise")},
			&cli.StringSliceFlag{Name: "join", Usage: "gossip address of an agent to join, `HOST:PORT` (repeatable; retried until it works)", EnvVars: env("join")},
			socketFlag(),
			&cli.StringFlag{Name: "socket-mode", Value: "0600", Usage: "permission bits of the socket, octal", EnvVars: env("socket-mode")},
			&cli.StringFlag{Name: "socket-group", Usage: "`GROUP` (name or ID) whose members may use the socket; use with --socket-mode 0660", EnvVars: env("socket-group")},
			&cli.IntFlag{Name: "max-members", Value: agent.DefaultMaxMembers, Usage: "largest cluster this agent's gossip accepts, counting members that failed or left recently; give every agent the same value", EnvVars: env("max-members")},
			&cli.IntFlag{Name: "socket-max-conns", Value: rpc.DefaultMaxConns, Usage: "connections the socket serves at once", EnvVars: env("socket-max-conns")},
			&cli.IntFlag{Name: "socket-max-conns-per-peer", Usage: "connections one client process may hold", DefaultText: "a quarter of --socket-max-conns", EnvVars: env("socket-max-conns-per-peer")},
			&cli.IntFlag{Name: "socket-max-ungreeted", Usage: "connections that may wait to say hello at once", DefaultText: "a quarter of --socket-max-conns", EnvVars: env("socket-max-ungreeted")},
			&cli.DurationFlag{Name: "socket-idle-timeout", Value: rpc.DefaultIdleTimeout, Usage: "close a socket connection that sends no request for this long (watches exempt; 0: never)", EnvVars: env("socket-idle-timeout")},
			&cli.DurationFlag{Name: "socket-hello-timeout", Value: rpc.DefaultHandshakeTimeout, Usage: "close a socket connection that has not said hello within this time", EnvVars: env("socket-hello-timeout")},
			&cli.StringFlag{Name: "keyring-file", Usage: "file keeping the cluster keys across restarts, created with --encrypt; once it exists it is always used, and --encrypt must be one of its keys", DefaultText: "DATA-DIR/keyring", EnvVars: env("keyring-file")},
			&cli.IntFlag{Name: "socket-max-frame", Value: rpc.DefaultMaxFrame, Usage: "largest socket frame body in `BYTES`, both ways (1024 to 16777216); raise it when members of a large cluster no longer fit", EnvVars: env("socket-max-frame")},
			&cli.StringFlag{Name: "encrypt", Usage: "cluster `KEY` (base64, from tenure keygen): encrypts and authenticates gossip and peer messages", EnvVars: env("encrypt")},
			&cli.BoolFlag{Name: "insecure-no-encryption", Usage: "allow running without a cluster key on addresses other than loopback: anyone who can reach the ports can join, vote and claim leadership", EnvVars: env("insecure-no-encryption")},
			&cli.StringFlag{Name: "data-dir", Value: d.DataDir, Usage: "directory for the epoch and the gossip snapshot", EnvVars: env("data-dir")},
			&cli.StringFlag{Name: "consistency", Value: string(d.Consistency), Usage: "quorum (a majority of voters must grant the lease: at most one leader) or available (each partition side may elect its own)", EnvVars: env("consistency")},
			&cli.DurationFlag{Name: "lease-ttl", Value: d.LeaseTTL, Usage: "how long a voter's lease promise lasts; the leader renews every third of it", EnvVars: env("lease-ttl")},
			&cli.Float64Flag{Name: "max-drift", Value: d.MaxDrift, Usage: "bound on how much clock rates differ between hosts, as a fraction", EnvVars: env("max-drift")},
			&cli.IntFlag{Name: "expect", Usage: "number of fresh voters that bootstrap the first roster together (0: join an existing cluster)", EnvVars: env("expect")},
			&cli.BoolFlag{Name: "preempt", Value: d.Preempt, Usage: "yield leadership to a higher eligible node once it is stable", EnvVars: env("preempt")},
			&cli.BoolFlag{Name: "eligible", Value: d.Eligible, Usage: "this node may lead", EnvVars: env("eligible")},
			&cli.BoolFlag{Name: "voter", Value: d.Voter, Usage: "this node may be a voter (quorum mode): the leader promotes it when a seat is free", EnvVars: env("voter")},
			&cli.IntFlag{Name: "voters", Usage: "number of voters the leader keeps, odd where it can; other nodes observe; give every node the same value", DefaultText: "the bootstrap's --expect, else 5", EnvVars: env("voters")},
			&cli.StringFlag{Name: "zone", Usage: "this node's failure domain (rack, availability zone): voters are spread over zones", EnvVars: env("zone")},
			&cli.DurationFlag{Name: "dead-voter-timeout", Value: agent.DefaultDeadVoterTimeout, Usage: "replace a voter gossip has reported failed for this long (negative: never)", EnvVars: env("dead-voter-timeout")},
			&cli.StringFlag{Name: "timing", Value: string(d.Profile), Usage: "timing profile: lan, or local for agents on one machine", EnvVars: env("timing")},
			&cli.GenericFlag{Name: "hook", Value: &hookList{}, Usage: "run `EVENT=COMMAND` on events (repeatable; EVENT may be a,b or *)", EnvVars: env("hook")},
			&cli.DurationFlag{Name: "hook-timeout", Value: hooks.DefaultTimeout, Usage: "bound on each hook run; then its process group is stopped", EnvVars: env("hook-timeout")},
			&cli.StringFlag{Name: "journal", Usage: "append a JSON line to `FILE` for every change of this node's own leadership (became leader, lease extended, stopped leading), with wall-clock times: an audit trail", EnvVars: env("journal")},
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error", EnvVars: env("log-level")},
			&cli.BoolFlag{Name: "log-json", Usage: "log JSON lines instead of text", EnvVars: env("log-json")},
			&cli.StringFlag{Name: "http-addr", Usage: "serve Prometheus metrics (/metrics), health checks (/health, /health/leader) and the status JSON (/v1/status) on `HOST:PORT`; unauthenticated and off by default", EnvVars: env("http-addr")},
			&cli.StringFlag{Name: "debug-addr", Hidden: true, Usage: "serve counters and Go profiles on this loopback `HOST:PORT` (see debug.go)", EnvVars: env("debug-addr")},
		}),
		Action: runAgent,
	}
}

func runAgent(c *cli.Context) error {
	cfg, level, err := agentConfig(c)
	if err != nil {
		return fail(2, "tenure agent: %v", err)
	}
	if os.Getenv("GOMAXPROCS") == "" {
		// One P while the socket is quiet, Go's default while it is busy
		// (internal/procs); GOMAXPROCS in the environment decides instead.
		gov := procs.Start(procs.Config{Logger: cfg.Logger})
		defer gov.Stop()
		cfg.SocketOnRequest = gov.Note
	}
	a, err := agent.Start(cfg)
	if err != nil {
		// Start fails on configuration and environment: a port in use, a
		// data dir it cannot write, corrupt state, a state file that is
		// not a regular file, no cluster key on an address other hosts
		// reach, a keyring file without the --encrypt key, a socket in use.
		// It is one ERROR record in the agent's log format (text or JSON),
		// where the agent's other records go.
		cfg.Logger.Error("tenure agent: cannot start", "err", err)
		return fail(2, "")
	}
	for flag, start := range map[string]func(string, *agent.Agent, *slog.Logger) (*httpServer, error){
		"http-addr": startMetrics, "debug-addr": startDebug} {
		if addr := c.String(flag); addr != "" {
			s, err := start(addr, a, cfg.Logger)
			if err != nil {
				a.Halt()
				return fail(2, "tenure agent: %v", err)
			}
			defer s.close()
		}
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	var sig os.Signal
	for sig == nil {
		select {
		case s := <-sigs:
			if s != syscall.SIGHUP {
				sig = s
				continue
			}
			reloadConfig(c, a, level, cfg.Logger)
		case <-a.Done():
			return fail(1, "tenure agent: %v", a.Err())
		}
	}
	cfg.Logger.Info("stopping", "signal", sig.String())
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := a.Shutdown(ctx); err != nil {
		return fail(1, "tenure agent: shutdown: %v", err)
	}
	return nil
}

// socketLimits sets the local socket's connection limits from the flags.
func socketLimits(c *cli.Context, cfg *agent.Config) {
	cfg.MaxMembers = c.Int("max-members")
	cfg.SocketMaxConns = c.Int("socket-max-conns")
	cfg.SocketMaxConnsPerPeer = c.Int("socket-max-conns-per-peer")
	cfg.SocketMaxUngreeted = c.Int("socket-max-ungreeted")
	cfg.SocketHelloTimeout = c.Duration("socket-hello-timeout")
	cfg.SocketIdleTimeout = c.Duration("socket-idle-timeout")
	cfg.SocketMaxFrame = c.Int("socket-max-frame")
	if cfg.SocketIdleTimeout == 0 {
		cfg.SocketIdleTimeout = -1 // the flag's 0 is "never"
	}
}

func agentConfig(c *cli.Context) (agent.Config, *slog.LevelVar, error) {
	level, err := logLevel(c.String("log-level"))
	if err != nil {
		return agent.Config{}, nil, err
	}
	logger := leveledLogger(level, c.Bool("log-json"))
	cfg := agent.DefaultConfig()
	cfg.Name = c.String("name")
	cfg.ID = c.Uint64("id")
	cfg.BindAddr = c.String("bind")
	cfg.PeerBindAddr = c.String("peer-bind")
	cfg.AdvertiseAddr = c.String("advertise")
	cfg.Join = c.StringSlice("join")
	cfg.SocketPath = c.String("socket")
	mode, err := strconv.ParseUint(c.String("socket-mode"), 8, 32)
	if err != nil {
		return agent.Config{}, nil, fmt.Errorf("--socket-mode %q: want octal permission bits such as 0660", c.String("socket-mode"))
	}
	cfg.SocketMode = os.FileMode(mode)
	cfg.SocketGroup = c.String("socket-group")
	socketLimits(c, &cfg)
	cfg.DataDir = c.String("data-dir")
	cfg.Journal = c.String("journal")
	cfg.Consistency = agent.Consistency(c.String("consistency"))
	cfg.LeaseTTL = c.Duration("lease-ttl")
	cfg.MaxDrift = c.Float64("max-drift")
	cfg.Expect = c.Int("expect")
	cfg.Preempt = c.Bool("preempt")
	cfg.Eligible = c.Bool("eligible")
	cfg.Voter = c.Bool("voter")
	cfg.Voters = c.Int("voters")
	cfg.Zone = c.String("zone")
	cfg.DeadVoterTimeout = c.Duration("dead-voter-timeout")
	cfg.Profile = agent.Profile(c.String("timing"))
	cfg.Logger = logger
	cfg.Version = version
	cfg.Hooks = c.Generic("hook").(*hookList).hooks
	cfg.KeyringFile = c.String("keyring-file")
	if k := c.String("encrypt"); k != "" {
		if cfg.EncryptKey, err = decodeKey(k); err != nil {
			return agent.Config{}, nil, err
		}
	}
	cfg.InsecureNoEncryption = c.Bool("insecure-no-encryption")
	cfg.HookTimeout = c.Duration("hook-timeout")
	return cfg, level, cfg.Validate()
}

func newLogger(level string, asJSON bool) (*slog.Logger, error) {
	l, err := logLevel(level)
	if err != nil {
		return nil, err
	}
	return leveledLogger(l, asJSON), nil
}

// logLevel parses a --log-level value into a level that can change later
// (a SIGHUP with a config file).
func logLevel(level string) (*slog.LevelVar, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	v := new(slog.LevelVar)
	v.Set(l)
	return v, nil
}

func leveledLogger(l *slog.LevelVar, asJSON bool) *slog.Logger {
	opts := &slog.HandlerOptions{Level: l}
	if asJSON {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}

// hookList collects repeated --hook values as written: commas belong to
// the EVENT list or the command, never split a value.
type hookList struct{ hooks []hooks.Hook }

// Set parses one --hook value.
func (l *hookList) Set(v string) error {
	h, err := hooks.ParseHook(v)
	if err != nil {
		return err
	}
	l.hooks = append(l.hooks, h)
	return nil
}

// String lists the hooks for --help.
func (l *hookList) String() string {
	var parts []string
	for _, h := range l.hooks {
		parts = append(parts, strings.Join(h.Events, ",")+"="+h.Command)
	}
	return strings.Join(parts, " ")
}
