package gossip_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/tenurehq/tenure/gossip"
)

func ExampleTransport_Call() {
	upper := func(_ context.Context, req []byte) ([]byte, error) {
		return []byte(strings.ToUpper(string(req))), nil
	}
	server, err := gossip.ListenTransport(gossip.TransportConfig{BindAddr: "127.0.0.1:0", Handler: upper})
	if err != nil {
		panic(err)
	}
	defer server.Close()
	client, err := gossip.ListenTransport(gossip.TransportConfig{BindAddr: "127.0.0.1:0", Handler: upper})
	if err != nil {
		panic(err)
	}
	defer client.Close()

	resp, err := client.Call(context.Background(), server.Addr(), []byte("election"))
	fmt.Println(string(resp), err)
	// Output: ELECTION <nil>
}

func ExampleStart() {
	start := func(name string, id uint64, join []string) *gossip.Membership {
		m, err := gossip.Start(gossip.Config{
			Name: name, ID: id, BindAddr: "127.0.0.1:0", PeerAddr: "127.0.0.1:7947",
			Voter: true, Eligible: true, Join: join, Timing: gossip.LocalTiming(),
		})
		if err != nil {
			panic(err)
		}
		return m
	}
	a := start("a", 1, nil)
	defer a.Shutdown()
	b := start("b", 2, []string{a.LocalMember().Addr})
	defer b.Shutdown()

	for deadline := time.Now().Add(5 * time.Second); len(a.Members()) < 2 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	for _, m := range a.Members() {
		fmt.Println(m.Name, m.ID, m.Status)
	}
	// Output:
	// a 1 alive
	// b 2 alive
}
