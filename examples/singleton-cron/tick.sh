#!/bin/sh
# tick.sh: a singleton job. While this node leads term $TENURE_EPOCH it
# appends "EPOCH HOST TIME" to a shared file every TICK_INTERVAL seconds; it
# exits as soon as the local agent says this node no longer leads that term.
#
# Run it on every host in one of two ways (see README.md):
#
#   tenure run --grace 5s -- /path/to/tick.sh            # recommended
#   tenure agent ... --hook became-leader=/path/to/tick.sh --hook-timeout 24h
#
# and, for a job that runs once per term (a short hook):
#
#   tenure agent ... --hook 'became-leader=/path/to/tick.sh --once'
#
# Environment:
#   TENURE_EPOCH   the term to work for (set by `tenure run` and by hooks)
#   TENURE_NODE    this node's name (set by hooks); else TENURE_LEADER (set
#                  by `tenure run`: this node's name); else the hostname
#   TENURE_SOCKET  the local agent's socket, for `tenure leader --check`
#                  (set by `tenure run` and by hooks to their agent's socket)
#   TICK_FILE      the shared file to append to (required)
#   TICK_INTERVAL  seconds between two lines (default 2)
#   TENURE_BIN     the tenure binary (default: tenure, from PATH)
#
# The check before every line is what stops a loop started by a hook, which
# nothing else stops when leadership ends. Under `tenure run` it is a second
# line of defence only: `tenure run` stops the loop's process group itself.
# Neither is a fence: a process paused between its check and its write can
# still write late. A resource that must refuse such writes has to check the
# epoch itself (see examples/fenced-store).
set -u

file=${TICK_FILE:?set TICK_FILE to the file to append to}
interval=${TICK_INTERVAL:-2}
tenure=${TENURE_BIN:-tenure}
epoch=${TENURE_EPOCH:?no TENURE_EPOCH: run me from tenure run or a became-leader hook}
host=${TENURE_NODE:-${TENURE_LEADER:-$(hostname)}}
once=false
if [ "${1:-}" = --once ]; then once=true; fi

# still_leads exits 0 only while the local agent leads term $epoch with a
# valid lease; an unreachable agent counts as "no".
still_leads() { "$tenure" leader --check "$epoch" >/dev/null 2>&1; }

while still_leads; do
  echo "$epoch $host $(date -u +%Y-%m-%dT%H:%M:%SZ)" >>"$file"
  if $once; then exit 0; fi
  sleep "$interval"
done
echo "tick: $host does not lead epoch $epoch (any more); stopping" >&2
