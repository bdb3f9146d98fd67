// Command etcd-candidate is the etcd side of tenure's benchmark suite
// (../..): a program that campaigns in a concurrency.Election with a
// session of a given TTL, the way an application uses etcd to elect a
// leader. It is linked with etcd's client only, so that its memory is that
// of such an application. It prints event lines for the suite on standard
// output, "EVENT UNIXNANO [ARG]":
//
//	ka           etcd answered a keepalive of the session's lease, which
//	             then runs until about that time + TTL
//	leader NAME  the election's leader is NAME (from Observe)
//	elected      this candidate's campaign won
//
// On SIGTERM it resigns, revokes its session and exits.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		slog.Error("etcd-candidate", "err", err)
		os.Exit(1)
	}
}

// emit prints one event line: "EVENT UNIXNANO [ARG]".
var emitMu sync.Mutex

func emit(event string, arg ...string) {
	emitMu.Lock()
	defer emitMu.Unlock()
	fmt.Println(strings.Join(append([]string{event, fmt.Sprint(time.Now().UnixNano())}, arg...), " "))
}

// run campaigns until SIGTERM.
func run(args []string) error {
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
