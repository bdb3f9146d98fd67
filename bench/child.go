package main

// The suite's child processes: an etcd member and an etcd election
// candidate run as this same binary (`compare child etcd-member ...`),
// so that a candidate can be killed with SIGKILL like a tenure agent, and
// so that each member's and candidate's CPU and memory can be read from
// /proc on its own.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// runChild runs the child mode args[0] with the flags in args[1:].
func runChild(args []string) error {
	if len(args) == 0 {
		return errors.New("child: want a mode: etcd-member or etcd-candidate")
	}
	switch args[0] {
	case "etcd-member":
		return etcdMember(args[1:])
	case "etcd-candidate":
		return etcdCandidate(args[1:])
	}
	return fmt.Errorf("child: unknown mode %q", args[0])
}

// emit prints one event line for the parent: "EVENT UNIXNANO [ARG]".
var emitMu sync.Mutex

func emit(event string, arg ...string) {
	emitMu.Lock()
	defer emitMu.Unlock()
	fmt.Println(strings.Join(append([]string{event, fmt.Sprint(time.Now().UnixNano())}, arg...), " "))
}

// etcdMember runs one member of an etcd cluster with etcd's default
// timings (100 ms heartbeat, 1 s election timeout), prints "ready" once
// it serves, and stops on SIGTERM.
func etcdMember(args []string) error {
	fs := flag.NewFlagSet("etcd-member", flag.ContinueOnError)
	name := fs.String("name", "", "member name")
	dir := fs.String("dir", "", "data directory")
	peer := fs.String("peer-url", "", "peer URL, http://127.0.0.1:PORT")
	client := fs.String("client-url", "", "client URL, http://127.0.0.1:PORT")
	cluster := fs.String("initial-cluster", "", "NAME=PEER-URL,...")
	if err := fs.Parse(args); err != nil {
		return err
	}
	pu, err := url.Parse(*peer)
	if err != nil {
		return fmt.Errorf("etcd member: --peer-url: %w", err)
	}
	cu, err := url.Parse(*client)
	if err != nil {
		return fmt.Errorf("etcd member: --client-url: %w", err)
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = *name, *dir
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.InitialCluster, cfg.InitialClusterToken = *cluster, "tenure-bench"
	cfg.ClusterState = embed.ClusterStateFlagNew
	cfg.LogLevel, cfg.LogOutputs = "error", []string{"stderr"}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("etcd member %s: %w", *name, err)
	}
	defer e.Close()
	select {
	case <-e.Server.ReadyNotify():
		emit("ready")
	case <-time.After(time.Minute):
		return fmt.Errorf("etcd member %s: not ready within a minute", *name)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	select {
	case <-sigs:
		return nil
	case err := <-e.Err():
		return fmt.Errorf("etcd member %s: %w", *name, err)
	}
}

// etcdCandidate campaigns in a concurrency.Election with a session of the
// given TTL, the way a program uses etcd to elect a leader. It prints
// "ka" for each keepalive etcd answered (the session's lease then runs
// until about that time + TTL), "leader NAME" for each leader it observes,
// and "elected" when its campaign wins. On SIGTERM it resigns, revokes
// its session and exits.
func etcdCandidate(args []string) error {
	fs := flag.NewFlagSet("etcd-candidate", flag.ContinueOnError)
	name := fs.String("name", "", "candidate name, the election value")
	endpoint := fs.String("endpoint", "", "etcd client URL")
	ttl := fs.Int("ttl", 10, "session TTL, seconds")
	prefix := fs.String("prefix", "/bench/election", "election key prefix")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{*endpoint}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return fmt.Errorf("etcd candidate %s: client: %w", *name, err)
	}
	defer cli.Close()
	lease, err := cli.Grant(ctx, int64(*ttl))
	if err != nil {
		return fmt.Errorf("etcd candidate %s: grant: %w", *name, err)
	}
	// The session keeps the lease alive itself; this second keepalive
	// channel only reports the answers (the client sends one stream per
	// lease and fans the answers out).
	kas, err := cli.KeepAlive(context.WithoutCancel(ctx), lease.ID)
	if err != nil {
		return fmt.Errorf("etcd candidate %s: keepalive: %w", *name, err)
	}
	go func() {
		for range kas {
			emit("ka")
		}
	}()
	s, err := concurrency.NewSession(cli, concurrency.WithLease(lease.ID))
	if err != nil {
		return fmt.Errorf("etcd candidate %s: session: %w", *name, err)
	}
	e := concurrency.NewElection(s, *prefix)
	go func() {
		for r := range e.Observe(ctx) {
			if len(r.Kvs) > 0 {
				emit("leader", string(r.Kvs[0].Value))
			}
		}
	}()
	elected := make(chan struct{})
	go func() {
		if err := e.Campaign(ctx, *name); err == nil {
			emit("elected")
			close(elected)
		}
	}()
	<-ctx.Done()
	stop, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	select {
	case <-elected:
		if err := e.Resign(stop); err != nil {
			return fmt.Errorf("etcd candidate %s: resign: %w", *name, err)
		}
	default:
	}
	if err := s.Close(); err != nil {
		return fmt.Errorf("etcd candidate %s: close session: %w", *name, err)
	}
	return nil
}
