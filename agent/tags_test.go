package agent

import "testing"

// TestTagKeysDistinct: every gossip tag the agent advertises has its own
// key, and none is one gossip reserves. A storage tag once took the seat
// tag's key, and every voter showed as unable to write its data dir.
func TestTagKeysDistinct(t *testing.T) {
	keys := map[string]string{"id": "gossip's node ID", "peer": "gossip's peer address",
		"v": "gossip's voter flag", "e": "gossip's eligibility", "l": "gossip's leaving mark"}
	for _, tag := range []struct{ name, key string }{
		{"clusterTag", clusterTag}, {"rosterVersionTag", rosterVersionTag}, {"rosterEpochTag", rosterEpochTag}, {"seatTag", seatTag},
		{"expectTag", expectTag}, {"zoneTag", zoneTag}, {"drainedTag", drainedTag}, {"storageTag", storageTag},
	} {
		if other, ok := keys[tag.key]; ok {
			t.Errorf("%s uses the key %q of %s", tag.name, tag.key, other)
		}
		keys[tag.key] = tag.name
	}
}
