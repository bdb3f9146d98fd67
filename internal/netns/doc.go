// Package netns gives tests hosts of their own on one Linux machine:
// network namespaces, each with one address on a /24, joined by veth pairs
// to a bridge that lives in a namespace of its own. Real agents started in
// them (Host.Command, Start) bind 0.0.0.0 and find one address, as on a
// real host; all their traffic stays inside namespaces this package made,
// and nothing is added to the machine's own namespace.
//
// The package owns the namespaces and links it creates and the processes a
// caller starts through it: Network.Close removes them all, and Sweep
// removes what an earlier process that crashed before its Close left
// behind. Every namespace's name carries the prefix its caller chose and the
// creating process's PID, so two suites with different prefixes, or two
// runs of one suite at once, never touch each other's namespaces.
//
// It needs root and iproute2 (ip); Available says why it cannot run.
// Network delay and reordering (netem) are not offered: the kernels this
// runs on may lack the module.
package netns
