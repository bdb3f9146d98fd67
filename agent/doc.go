// Package agent wires tenure together: gossip membership and the peer
// transport (package gossip), the election state machine (package bully),
// the durable epoch (package leasing) and the local socket (package rpc).
//
// An Agent owns one driver goroutine that feeds the bully Machine its inputs
// (membership changes, peer messages, clock ticks, resign requests) and carries
// out what the Machine asks: persist the epoch, send messages, run the lease
// round. Everything the Machine touches happens on that goroutine; the rest
// of the Agent reads a snapshot under a mutex.
//
// The agent is embeddable: cmd/tenure only parses flags into a Config and
// calls Start and Shutdown.
package agent
