package agent

import (
	"fmt"
	"testing"
	"time"
)

// TestStatusNamesUnreachableVoters: real agents. When two of three voters
// crash, the survivor's status says that it has no quorum, names both
// with the peer address it dialled, and says that the connection was
// refused; its quorum count stays below the need, which it reports.
func TestStatusNamesUnreachableVoters(t *testing.T) {
	c := newTestCluster(t)
	c.startN(3)
	c.waitLeader("n3", 15*time.Second)
	peers := map[string]string{}
	for _, m := range c.agents["n3"].Members() {
		peers[m.Name] = m.PeerAddr
	}
	c.halt("n1")
	c.halt("n2")
	eventually(t, 20*time.Second, func() error {
		st, err := socketStatus(c.agents["n3"].SocketPath())
		if err != nil {
			return err
		}
		q := st.Quorum
		if q == nil || q.Need != 2 || q.Have >= q.Need || st.IsLeader {
			return fmt.Errorf("state %q, quorum %+v, is_leader %v", st.State, q, st.IsLeader)
		}
		for _, n := range []string{"n1", "n2"} {
			if !containsAll(st.Reason, "no quorum", n+" ("+peers[n], "connection refused") {
				return fmt.Errorf("state %q, reason %q: want %s at %s named, with connection refused", st.State, st.Reason, n, peers[n])
			}
		}
		t.Logf("state %q, quorum %+v, reason %q", st.State, *q, st.Reason)
		return nil
	})
}
