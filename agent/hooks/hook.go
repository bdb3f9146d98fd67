package hooks

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/tenurehq/tenure/rpc"
)

// AllEvents is the Hook.Events entry that matches every event.
const AllEvents = "*"

// ErrBadHook is wrapped by every error ParseHook and NewRunner return for a
// malformed hook.
var ErrBadHook = errors.New("hooks: bad hook")

// eventNames lists the events a hook may name, in the order error messages
// list them.
var eventNames = []string{
	rpc.EventBecameLeader,
	rpc.EventLostLeadership,
	rpc.EventLeaderChanged,
	rpc.EventMemberJoin,
	rpc.EventMemberLeave,
	rpc.EventMemberFailed,
	rpc.EventTaskAcquired,
	rpc.EventTaskLost,
}

// EventNames returns the names of the events hooks run for: became-leader,
// lost-leadership, leader-changed, member-join, member-leave, member-failed,
// task-acquired, task-lost.
func EventNames() []string { return slices.Clone(eventNames) }

// knownEvent reports whether name is one of EventNames.
func knownEvent(name string) bool { return slices.Contains(eventNames, name) }

// isMemberEvent reports whether name is about a member rather than the
// leadership.
func isMemberEvent(name string) bool { return strings.HasPrefix(name, "member-") }

// A Hook runs Command (with /bin/sh -c) for each event whose name is in
// Events (or for all events, with "*").
type Hook struct {
	// Name identifies the hook in the log. NewRunner names an unnamed hook
	// "hook-N" (N counting from 1) and adds "#N" to a name used twice.
	Name string
	// Events lists event names (see EventNames), or holds AllEvents.
	Events []string
	// Command is a /bin/sh script.
	Command string
}

// ParseHook parses a hook flag, "EVENT=COMMAND". EVENT is one event name,
// several separated by commas ("member-join,member-leave"), or "*" for all
// of them. The hook's Name is the EVENT part as written. Errors wrap
// ErrBadHook and, for an unknown event, list the valid ones.
func ParseHook(spec string) (Hook, error) {
	events, command, ok := strings.Cut(spec, "=")
	if !ok {
		return Hook{}, fmt.Errorf("%w %q: want EVENT=COMMAND", ErrBadHook, spec)
	}
	h := Hook{Name: strings.TrimSpace(events), Command: command}
	for e := range strings.SplitSeq(events, ",") {
		h.Events = append(h.Events, strings.TrimSpace(e))
	}
	if err := h.validate(); err != nil {
		return Hook{}, fmt.Errorf("%w (in %q)", err, spec)
	}
	return h, nil
}

// validate reports the first problem with h.
func (h Hook) validate() error {
	if strings.TrimSpace(h.Command) == "" {
		return fmt.Errorf("%w: the command is empty", ErrBadHook)
	}
	if len(h.Events) == 0 {
		return fmt.Errorf("%w: no event named; want one of %s, or %s",
			ErrBadHook, strings.Join(eventNames, ", "), AllEvents)
	}
	for _, e := range h.Events {
		switch {
		case e == AllEvents && len(h.Events) > 1:
			return fmt.Errorf("%w: %q stands alone, not in a list", ErrBadHook, AllEvents)
		case e != AllEvents && !knownEvent(e):
			return fmt.Errorf("%w: unknown event %q; want one of %s, or %s",
				ErrBadHook, e, strings.Join(eventNames, ", "), AllEvents)
		}
	}
	return nil
}

// wants reports whether h runs for the event named name.
func (h Hook) wants(name string) bool {
	return slices.Contains(h.Events, AllEvents) || slices.Contains(h.Events, name)
}
