// Package supervise runs a command only while the local tenure agent leads:
// the engine of `tenure run`. It is a client of the agent's socket (package
// rpc) and can be embedded in any Go program.
//
// Run connects to the agent, follows its event stream and polls its status
// (every Grace/4, and at least every 500ms). It starts the command when both
// say this node leads, in a process group of its own, with TENURE_EPOCH (the
// term's epoch, a fencing token) and TENURE_LEADER (this node's name) in its
// environment. It stops the command, by SIGTERM to the whole process group
// and SIGKILL to the group Grace later if anything in it still runs, when:
//
//   - leadership is lost: a lost-leadership, leader-changed or no-leader
//     event, or a status saying this node does not lead;
//   - the term changes: the leader's epoch differs from the running one's
//     (the command is then started again with the new epoch);
//   - the lease is about to end: less than Grace remains before the lease
//     deadline the last status reported (timed from when that status was
//     asked for), with no renewal since. In quorum mode a reported
//     lease_remaining_ms of 0 means the lease has expired. In available mode
//     the agent has no lease and reports 0 always, so there is no deadline;
//   - the agent becomes unreachable: the socket fails, the event stream ends,
//     or a call takes longer than max(Grace, 1s). Run keeps reconnecting
//     every RetryInterval and starts the command again when the agent says
//     this node leads.
//
// If the command exits by itself while leading, Run returns its exit code
// when Config.Once is set; otherwise it logs the exit and starts the command
// again after a delay of RestartDelay (default 1s), doubled after each quick
// exit up to 30s, and back to RestartDelay once a run lasts 30s or a new term
// begins. Whatever the command left running in its process group is stopped
// the same way (SIGTERM, then SIGKILL after Grace) before it is started
// again or Run returns.
//
// When ctx ends, Run stops the command the same way and returns. Run never
// returns while a process of the command's group still runs.
//
// # Hand-over
//
// Run registers with the agent as a runner (rpc.Client.WatchAsRunner, with
// Grace). When a term this node led ends while its lease is valid (resign,
// preemption, the agent's graceful stop), the agent waits before it
// releases the lease to the voters: Run stops the command (SIGTERM, SIGKILL
// after Grace, until the whole group is gone) and then reports the term
// stopped; for a term in which no command ran it reports at once. Only
// then can the next leader be granted the lease and start its own command,
// so the two never run at the same time. The agent waits no longer than the
// lease deadline: a stop that takes longer gets no release, and the next
// leader waits for the voters' promises to run out instead.
//
// # What is not guaranteed
//
// The command is stopped before the lease can end only if Grace is shorter
// than the time between the lease's last renewal and its deadline, the agent
// is reachable and answers promptly, and this process is scheduled in time:
// Run learns of a lease only through the agent's status, and a hung agent
// shows only as a missing renewal. A process that leaves its process group
// (setsid, or a daemon that forks into a new session) escapes the stop and
// is not tracked. A SIGKILL to `tenure run` itself does not orphan the
// command on Linux: the command gets SIGKILL with its parent (a parent-death
// signal), and the agent, to which Run registered the command's process
// group with a `running` frame, stops that group and counts the term
// stopped only once the group is gone. Elsewhere neither happens: run it
// under a service manager that kills its whole cgroup.
//
// Nor is the command ever the only holder of the epoch: a former leader's
// command may still be running on another host while this one starts (after
// a partition, or a host that cannot be reached). Every resource the command
// writes must check TENURE_EPOCH as a fencing token.
package supervise
