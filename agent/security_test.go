package agent

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"testing"
	"time"

	"github.com/tenurehq/tenure/bully"
	"github.com/tenurehq/tenure/gossip"
	"github.com/tenurehq/tenure/rpc"
)

func newKey(t *testing.T) []byte {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

// TestWrongKeyNodeNeverJoinsOrLeads: with a cluster key, agents that share
// it elect a leader; an agent with another key (or none) never joins the
// gossip cluster, never gets a grant, and its election messages are refused,
// even though it has the highest ID.
func TestWrongKeyNodeNeverJoinsOrLeads(t *testing.T) {
	c := newTestCluster(t)
	key := newKey(t)
	c.expect = 3
	for i := 1; i <= 3; i++ {
		cfg := c.config(fmt.Sprintf("n%d", i), uint64(i))
		cfg.EncryptKey = key
		c.start(cfg)
	}
	epoch := c.waitLeader("n3", 15*time.Second)
	for name, k := range map[string][]byte{"n8": newKey(t), "n9": nil} {
		cfg := c.config(name, 90)
		if name == "n8" {
			cfg.ID = 80
		}
		cfg.Expect = 0
		cfg.EncryptKey = k
		intruder := c.start(cfg)
		// Asserting that something never happens: give it several gossip
		// and election rounds first.
		time.Sleep(3 * time.Second)
		st := intruder.Status()
		if st.IsLeader || st.Members != 1 || (st.Leader != nil && st.Leader.Node != name) {
			t.Fatalf("%s (key %v) sees %d members, leader %v", name, k != nil, st.Members, st.Leader)
		}
		delete(c.agents, name)
		if got := c.waitLeader("n3", 5*time.Second); got != epoch {
			t.Fatalf("the keyed cluster's term changed from %d to %d while %s tried to join", epoch, got, name)
		}
		for _, m := range c.agents["n1"].Members() {
			if m.Name == name {
				t.Fatalf("%s appears in the keyed cluster's members: %+v", name, m)
			}
		}
		intruder.Halt()
	}
	forgeCoordinator(t, c, epoch)
}

// forgeCoordinator sends a COORDINATOR for a higher term straight to a
// keyed agent's peer port, without the key and with a wrong one: both are
// refused by the TLS handshake and the agent's view does not change.
func forgeCoordinator(t *testing.T, c *testCluster, epoch uint64) {
	forged := envelope{Bully: &bully.Message{Type: bully.MsgCoordinator, From: bully.Node{ID: 99, Name: "evil"},
		To: c.agents["n1"].self(), Leader: bully.Node{ID: 99, Name: "evil"}, Term: epoch + 100, Epoch: epoch + 100}}
	body, err := encodeEnvelope(forged)
	if err != nil {
		t.Fatal(err)
	}
	wrong, err := gossip.NewKeyedTLS([][]byte{newKey(t)})
	if err != nil {
		t.Fatal(err)
	}
	for _, wrap := range []gossip.ConnWrapper{nil, wrong} {
		tr, err := gossip.ListenTransport(gossip.TransportConfig{BindAddr: "127.0.0.1:0", Wrap: wrap,
			Handler: func(context.Context, []byte) ([]byte, error) { return nil, nil }})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err = tr.Call(ctx, c.agents["n1"].peers.Addr(), body)
		cancel()
		tr.Close()
		if err == nil {
			t.Fatalf("a forged COORDINATOR (wrapper %T) was delivered", wrap)
		}
	}
	if st := c.agents["n1"].Status(); st.Leader == nil || st.Leader.Node != "n3" || st.Epoch >= epoch+100 {
		t.Fatalf("n1's view changed after forged messages: %+v", st)
	}
	eventually(t, 2*time.Second, func() error {
		if n := c.agents["n1"].RefusedPeers(); n < 2 {
			return fmt.Errorf("refused peer connections counted: %d, want 2 (no key, wrong key)", n)
		}
		return nil
	})
}

// TestKeyRotationWithoutDowntime: install a new key, make it primary and
// remove the old one through the agent; the leader keeps its term, peer
// messages keep flowing under the new key (a resign hands over), and a node
// holding only the old key can no longer join.
func TestKeyRotationWithoutDowntime(t *testing.T) {
	c := newTestCluster(t)
	oldKey, newKeyB := newKey(t), newKey(t)
	c.expect = 3
	for i := 1; i <= 3; i++ {
		cfg := c.config(fmt.Sprintf("n%d", i), uint64(i))
		cfg.EncryptKey = oldKey
		c.start(cfg)
	}
	epoch := c.waitLeader("n3", 15*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b64 := base64.StdEncoding.EncodeToString
	for _, step := range []rpc.KeysRequest{
		{Action: rpc.KeysInstall, Key: b64(newKeyB)},
		{Action: rpc.KeysUse, Key: b64(newKeyB)},
		{Action: rpc.KeysRemove, Key: b64(oldKey)},
	} {
		if _, err := c.agents["n1"].Keys(ctx, step); err != nil {
			t.Fatalf("keys %s: %v", step.Action, err)
		}
		if got := c.waitLeader("n3", 5*time.Second); got != epoch {
			t.Fatalf("after keys %s the term changed from %d to %d", step.Action, epoch, got)
		}
	}
	info, err := c.agents["n2"].Keys(ctx, rpc.KeysRequest{Action: rpc.KeysList})
	if err != nil || len(info.Keys) != 1 || info.Keys[b64(newKeyB)] != 3 {
		t.Fatalf("keys after rotation: %+v, %v; want only the new key on 3 members", info, err)
	}
	eventually(t, 5*time.Second, func() error { // peers follow the keyring
		for _, name := range []string{"n1", "n2", "n3"} {
			if p, _ := c.agents[name].peerTLS.Keys(); string(p) != string(newKeyB) {
				return fmt.Errorf("%s's peer transport still presents the old key", name)
			}
		}
		return nil
	})
	if err := c.agents["n3"].Resign(ctx); err != nil {
		t.Fatal(err)
	}
	if got := c.waitLeader("n2", 5*time.Second); got <= epoch {
		t.Fatalf("hand-over under the new key: epoch %d, want > %d", got, epoch)
	}
	cfg := c.config("n9", 90)
	cfg.Expect, cfg.EncryptKey = 0, oldKey
	stale := c.start(cfg)
	time.Sleep(2 * time.Second) // asserting a non-event: let gossip try
	if st := stale.Status(); st.Members != 1 {
		t.Fatalf("a node with only the removed key sees %d members", st.Members)
	}
}
