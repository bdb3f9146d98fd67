// Package leasing owns leases and epochs: the epoch that numbers every term
// and serves resources as a fencing token, persisted so that it only grows
// across restarts.
//
// Today it holds the durable epoch store used by every mode. The quorum lease
// rounds (voter promises, acquire / renew / release, validity arithmetic with
// a drift bound) and Fence for resources belong here too as they are built;
// see docs/DESIGN.md. Leasing knows nothing of who should lead: package bully
// decides that and asks for a lease round.
package leasing
