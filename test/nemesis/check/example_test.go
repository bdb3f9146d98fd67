package check_test

import (
	"fmt"
	"time"

	"github.com/tenurehq/tenure/test/nemesis/check"
)

// Two leaders whose leases overlap by 200ms fail I1; everything else holds.
func ExampleCheck() {
	const s = int64(time.Second)
	run := &check.Run{
		Journal: []check.JournalRecord{
			{T: 1 * s, Node: "h1", Event: check.JournalLead, Epoch: 1, Until: 3 * s},
			{T: 2*s + 8e8, Node: "h2", Event: check.JournalLead, Epoch: 2, Until: 5 * s},
		},
		Events: []check.Event{{T: 1 * s, Kind: check.EventHeal}, {T: 6 * s, Kind: check.EventEnd}},
	}
	rep, err := check.Check(run, check.Options{TTL: 2 * time.Second, ElectionBound: time.Second})
	if err != nil {
		panic(err)
	}
	for _, v := range rep.Verdicts {
		fmt.Println(v.Name, v.OK)
	}
	fmt.Println(rep.Liveness)
	// Output:
	// I1 false
	// I2 true
	// I3 true
	// I4-linearizable true
	// I4-monotone true
	// I5 true
	// hand-over true
	// [0s]
}
