//go:build nemesis

// Package nemesis is tenure's fault-injection harness: it runs real
// `tenure agent` processes (the binary built from this tree), each in a
// network namespace of its own with its own address, a fenced store in
// another, and on every node `tenure run` with a writer that writes to the
// store with its TENURE_EPOCH. It then injects faults in the style of
// Jepsen's nemesis, from a seeded random schedule whose seed it prints:
// partitions made with iptables inside the hosts' namespaces (halves, an
// isolated leader, a majorities ring, a bridge, one-way, UDP only, random
// packet loss), delays and reordering of every link or of the leader's
// (NFQUEUE rules, the harness holding each packet a while), kill -9 with and without the data dir, SIGSTOP of the
// leader's agent or of its whole host, a restart of every agent, a full
// disk (each node's data dir is on a small tmpfs of its own), and a
// sixth node with the highest ID joining part way; and, unless told not to,
// what an operator does: a graceful stop, a drain, a transfer and a resign,
// half of them under one of the network faults, a kill, a pause or a full
// disk of another node (for a transfer, often the named successor).
//
// The package owns the cluster's processes, the faults and the record of
// them (events.jsonl in the run directory: Events). It judges nothing
// itself: test/nemesis/check, which shares no code with the agent, reads
// the agents' journals, the writers' histories and the events and gives
// the verdicts.
//
// Every file is behind the build tag nemesis; run it as root with
// `make nemesis` (short) or `make soak` (long). docs/RELIABILITY.md says
// what the faults are, how to replay a seed, and what the runs found.
//
// A run that is killed (an interrupted `make soak`) cannot clean up: the
// next run removes its namespaces, with the agents in them
// (netns.Sweep), unmounts the nodes' disks in its run directory and
// removes its built binaries (SweepRuns); the run directory stays, with
// the logs.
package nemesis
