package main

import (
	"strings"
	"testing"

	"github.com/tenurehq/tenure/rpc"
)

// TestStatusQuorumLine: status shows a lease round's count only for a node
// that runs rounds; a follower shows what a lease needs, not "0 grants".
func TestStatusQuorumLine(t *testing.T) {
	for _, tt := range []struct {
		state string
		q     rpc.QuorumInfo
		want  string
	}{
		{"leader", rpc.QuorumInfo{Have: 3, Need: 2}, "quorum:       3 grants, 2 needed (last lease round)"},
		{"no-quorum", rpc.QuorumInfo{Have: 1, Need: 2}, "quorum:       1 grants, 2 needed (last lease round)"},
		{"follower", rpc.QuorumInfo{Need: 2}, "quorum:       2 grants needed (this node runs no lease round)"},
	} {
		var b strings.Builder
		q := tt.q
		printStatus(&b, rpc.Status{Node: "n1", State: tt.state, Consistency: "quorum", Quorum: &q})
		if !strings.Contains(b.String(), tt.want+"\n") {
			t.Errorf("%s %+v:\n%s\nwant the line %q", tt.state, tt.q, b.String(), tt.want)
		}
	}
}
