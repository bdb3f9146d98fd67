package agent

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/tenurehq/tenure/gossip"
)

// TestPeerCauseTellsConnectingFromWaiting calls, over real sockets with
// TLS, a peer whose handshake never finishes and a peer that accepts the
// request but never answers: the causes the status and logs show say
// which of the two timed out.
func TestPeerCauseTellsConnectingFromWaiting(t *testing.T) {
	key := make([]byte, 32)
	wrap := func() gossip.ConnWrapper {
		k, err := gossip.NewKeyedTLS([][]byte{key})
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	client, err := gossip.ListenTransport(gossip.TransportConfig{BindAddr: "127.0.0.1:0", Wrap: wrap(),
		Handler: func(context.Context, []byte) ([]byte, error) { return nil, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()

	// A listener that accepts TCP connections and never speaks: the TLS
	// handshake cannot finish.
	mute, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Close()
	go func() {
		for {
			c, err := mute.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()

	// A peer that takes requests and never answers them.
	stuck := make(chan struct{})
	defer close(stuck)
	server, err := gossip.ListenTransport(gossip.TransportConfig{BindAddr: "127.0.0.1:0", Wrap: wrap(),
		Handler: func(ctx context.Context, _ []byte) ([]byte, error) {
			select {
			case <-stuck:
			case <-ctx.Done():
			}
			return nil, ctx.Err()
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()

	for _, tc := range []struct {
		name, addr, want string
	}{
		{"handshake never finishes", mute.Addr().String(), "i/o timeout while connecting"},
		{"request never answered", server.Addr(), "i/o timeout waiting for the reply"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		_, err := client.Call(ctx, tc.addr, []byte("x"))
		cancel()
		if err == nil {
			t.Fatalf("%s: the call succeeded", tc.name)
		}
		if got := peerCause(err); got != tc.want {
			t.Errorf("%s: cause %q (from %v), want %q", tc.name, got, err, tc.want)
		}
	}
}
