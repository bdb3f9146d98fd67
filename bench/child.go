package main

// The suite's etcd members run as this same binary (`compare child
// etcd-member ...`), one process each, so that each member's CPU and
// memory can be read from /proc on its own. The candidates are a program
// of their own (cmd/etcd-candidate), linked with etcd's client only, as an
// application using etcd for elections would be.

import (
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// runChild runs the child mode args[0] with the flags in args[1:].
func runChild(args []string) error {
	if len(args) == 0 || args[0] != "etcd-member" {
		return errors.New("child: want the mode etcd-member")
	}
	return etcdMember(args[1:])
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
		fmt.Println("ready", time.Now().UnixNano()) // an event line: "EVENT UNIXNANO"
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
