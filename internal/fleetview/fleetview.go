// Package fleetview reads a fleet's agreement from the statuses its
// agents report: whether they all name one leader and epoch, and a short
// summary when they do not. The scale run and the benchmark suite poll
// many agents and judge the answers the same way.
package fleetview

import (
	"fmt"
	"sort"
	"strings"

	"github.com/tenurehq/tenure/rpc"
)

// Agreed reports the leader and epoch every status names, when all of
// them (none missing) name the same leader with the same epoch, that
// leader is not the node not, and the leader itself says it leads.
func Agreed(sts map[string]*rpc.Status, not string) (leader string, epoch uint64, ok bool) {
	for _, st := range sts {
		if st == nil || st.Leader == nil || st.Leader.Node == not {
			return "", 0, false
		}
		if leader == "" {
			leader, epoch = st.Leader.Node, st.Leader.Epoch
		}
		if st.Leader.Node != leader || st.Leader.Epoch != epoch {
			return "", 0, false
		}
	}
	lst := sts[leader]
	if leader == "" || lst == nil || !lst.IsLeader {
		return "", 0, false
	}
	return leader, epoch, true
}

// Summarize counts the agents by the leader and epoch they name (or, with
// none, by their state; "unreachable" for a missing status), as
// "n3@7×28 none/candidate×2".
func Summarize(sts map[string]*rpc.Status) string {
	counts := map[string]int{}
	for _, st := range sts {
		k := "unreachable"
		switch {
		case st == nil:
		case st.Leader == nil:
			k = "none/" + st.State
		default:
			k = fmt.Sprintf("%s@%d", st.Leader.Node, st.Leader.Epoch)
		}
		counts[k]++
	}
	var parts []string
	for k, c := range counts {
		parts = append(parts, fmt.Sprintf("%s×%d", k, c))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}
