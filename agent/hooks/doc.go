// Package hooks runs the operator's event hooks: shell commands the agent
// starts when leadership or membership changes (`tenure agent --hook
// EVENT=COMMAND`).
//
// A Runner owns one goroutine and one ordered queue per Hook. Dispatch never
// blocks: it appends the event to the queue of every hook that wants it.
// Each hook then runs its queued events one at a time, in the order they
// were dispatched, so a slow hook delays only itself, never another hook nor
// the agent.
//
// # One run
//
// A run is `/bin/sh -c COMMAND` in a process group of its own, with the
// Runner's base environment plus these variables (any value they had in the
// base environment is replaced):
//
//	TENURE_EVENT        the event name, e.g. became-leader
//	TENURE_NODE         this agent's node name
//	TENURE_NODE_ID      this agent's node ID
//	TENURE_LEADER       the leader's node name, empty when none is known
//	TENURE_LEADER_ID    the leader's node ID, empty when none is known
//	TENURE_EPOCH        the epoch (fencing token) of the term the event is about, 0 if none
//	TENURE_MEMBER       member events only: the member's node name
//	TENURE_MEMBER_ID    member events only: the member's node ID
//	TENURE_MEMBER_ADDR  member events only: the member's gossip address
//	TENURE_TASK         task events only: the task's name
//	TENURE_TOKEN        task events only: the task's fencing token
//
// Its standard input is one JSON object followed by end of file:
//
//	{
//	  "event":   "became-leader",
//	  "time":    "2025-01-02T03:04:05.123456789Z",   // RFC 3339, UTC
//	  "node":    "web-1",                            // this agent
//	  "node_id": 17,
//	  "leader":  {"node": "web-1", "id": 17, "epoch": 42},  // null when none is known
//	  "epoch":   42,
//	  "member":  {"name": "web-2", "id": 18, "addr": "10.0.0.2:7946"}  // member events only
//	}
//
// Its standard output and standard error are logged line by line (Info and
// Warn) with the keys hook, event and stream; a line longer than 4 KiB is cut
// and marked truncated. The end of every run is logged with its exit code
// (or signal) and duration, at Warn when it did not exit 0.
//
// A run that outlasts Config.Timeout is stopped: SIGTERM to its whole process
// group, then SIGKILL to the group when anything in it still runs after
// Config.KillGrace. The hook's next queued event runs as soon as the group is
// gone.
//
// # Ordering, and what is not guaranteed
//
// Runs of one hook never overlap and happen in dispatch order. If a
// became-leader run is still going when leadership is lost, the
// lost-leadership run still happens, after it, in order (per hook). A hook
// that must stop work on lost-leadership should use `tenure run` instead or
// keep its runs short. Runs of different hooks are not ordered with respect
// to each other.
//
// Runner.Barrier waits for the runs queued so far. The agent uses it when a
// term it led ends while the lease is still valid: it releases the lease
// only after the runs of its leadership hooks queued until then (the
// lost-leadership run, and a became-leader run still going) are done, or
// at the lease deadline without a release. So a lost-leadership hook that
// finishes in time runs before the next leader's became-leader.
//
// Hooks are notifications, not a fence: a became-leader run may start after
// leadership has already been lost again, and a run is not stopped when
// leadership ends. Work that must never overlap another leader's must check
// the epoch against the resource it touches.
//
// Delivery is at most once. When a hook falls more than Config.QueueLimit
// events behind, its oldest pending events are dropped (and logged); events
// still queued when Close gives up are dropped too; an agent that crashes
// runs nothing for the events it never saw.
//
// A process a run leaves in the background (`cmd &`) is not stopped when the
// run's shell exits normally, and its output is still logged, as long as the
// Runner is open. Close stops reading it; redirect such output elsewhere.
package hooks
