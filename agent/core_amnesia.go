package agent

import (
	"fmt"
	"time"

	"github.com/tenurehq/tenure/leasing"
)

// amnesia is the state of a voter that may have granted before and
// forgotten: it learned a roster naming itself from a peer (its bootstrap
// raced, or it lost its disk). It votes only after one TTL (its old
// promises have run out by then), and only once a majority of the other
// voters told it the highest epoch they granted: any earlier term's epoch
// was stored on a majority, which that majority meets, so its floor is
// above every epoch used.
type amnesia struct {
	active  bool
	holdEnd time.Time         // the longest promise it may have given ends
	floors  map[string]uint64 // replies to FloorQuery
	queryAt time.Time         // next FloorQuery
}

// becomeAmnesiac makes this voter forget that it knows its floor: it votes
// only after the longest promise it may have given has run out and enough
// voters told it the highest epoch they granted (see core.amnesia).
func (c *core) becomeAmnesiac(now time.Time, why string) {
	c.amnesia.active, c.amnesia.holdEnd = true, now.Add(c.maxTTL())
	c.amnesia.floors = map[string]uint64{}
	c.log.Warn("this voter may have forgotten promises and grants: voting only after the longest lease TTL it accepts and a floor query",
		"why", why, "hold", c.maxTTL())
}

// recover ends an amnesiac voter's hold once its longest promise has run
// out and it knows its floor: it records the floor as granted and votes
// again. It is called on a vote and on every tick, so that a node outside
// the roster, which gets no lease requests, recovers too (and may then be
// promoted).
func (c *core) recover(now time.Time) error {
	if !c.amnesia.active || now.Before(c.amnesia.holdEnd) || !c.floorKnown() {
		return nil
	}
	if err := c.granted.Raise(c.floor()); err != nil {
		return fmt.Errorf("record the floor after a lost or raced roster: %w", err)
	}
	c.amnesia.active = false
	c.log.Info("voting again after a lost or raced roster", "floor", c.granted.Epoch())
	return nil
}

// queryFloors asks the other voters, once a second while this voter is
// amnesiac, for the highest epoch each has granted.
func (c *core) queryFloors(now time.Time) {
	if !c.amnesia.active || c.floorKnown() || now.Before(c.amnesia.queryAt) {
		return
	}
	c.amnesia.queryAt = now.Add(rosterFetchInterval)
	c.askFloors()
}

// askFloors sends a FloorQuery to every other voter of the roster. Its
// answers serve both the amnesiac's floor and the reach probe.
func (c *core) askFloors() {
	for _, v := range c.reachCheck().others() {
		c.out = append(c.out, outMsg{to: toBully(v), env: envelope{FloorQuery: true}})
	}
}

// floorKnown reports whether enough other voters answered the floor query:
// in a set of n voters with majority m, any n-m+1 of them include one of
// every majority (less this node), so they know every epoch a majority
// stored. For a joint roster, in both sets.
func (c *core) floorKnown() bool {
	r := c.roster()
	ok := c.enoughFloors(r.Voters)
	if r.Joint() {
		ok = ok && c.enoughFloors(r.Prev)
	}
	return ok
}

func (c *core) enoughFloors(set []leasing.Node) bool {
	got := 0
	for _, v := range set {
		if _, ok := c.amnesia.floors[v.Name]; ok && toBully(v) != c.cfg.Self {
			got++
		}
	}
	return got >= len(set)-(len(set)/2+1)+1
}

// floor is the highest epoch this voter must not grant at or below: the
// highest the others reported, or this node has seen.
func (c *core) floor() uint64 {
	f := c.epochs.Epoch()
	for _, e := range c.amnesia.floors {
		f = max(f, e)
	}
	return f
}
