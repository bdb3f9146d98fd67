#!/bin/sh
# worker.sh: a consumer of some partitions of a queue. `tenure run --group`
# starts it with the partitions this member holds and their fencing tokens,
#
#   TENURE_GROUP=queue TENURE_PARTITIONS=3:TOKEN,7:TOKEN worker.sh
#
# and, for each of them, it writes to the key part-N of the fenced store
# (started with --fence per-key), with that partition's token in the
# Fencing-Token header and "WORKER write COUNT" as the value, every
# WORKER_INTERVAL seconds, until it is stopped (SIGTERM: `tenure run` stops
# it whenever the set of partitions changes, and starts it again with the
# new set). A write refused with 409 means the partition has a newer owner:
# the worker stops writing to that partition, and does not retry.
#
# Environment:
#   TENURE_PARTITIONS  P:TOKEN,... (set by tenure run --group)
#   TENURE_GROUP       the group (set by tenure run --group)
#   STORE_URL          the fenced store, e.g. http://127.0.0.1:8081 (required)
#   WORKER             this worker's name in the values (default: hostname)
#   WORKER_INTERVAL    seconds between two writes to one partition (default 0.5)
set -eu

store=${STORE_URL:?set STORE_URL to the fenced store, e.g. http://127.0.0.1:8081}
parts=${TENURE_PARTITIONS:?no TENURE_PARTITIONS: run me from tenure run --group}
group=${TENURE_GROUP:-?}
me=${WORKER:-$(hostname)}
interval=${WORKER_INTERVAL:-0.5}

log() { echo "worker $me ($group): $*" >&2; }

# write_loop P TOKEN: write to part-P with TOKEN until stopped or fenced off.
write_loop() {
  p=$1 token=$2 n=0
  while :; do
    n=$((n + 1))
    code=$(curl -sS -o /dev/null -w '%{http_code}' -X PUT -H "Fencing-Token: $token" \
      --data "$me write $n" "$store/kv/part-$p") || code=000
    case $code in
    200) ;;
    409)
      log "partition $p: write $n with token $token refused (409): it has a newer owner; no more writes to it"
      return 0
      ;;
    *) log "partition $p: write $n got HTTP $code; trying again" ;;
    esac
    sleep "$interval"
  done
}

# stopped: SIGTERM from tenure run, sent to the whole process group, so
# the loops may be gone already. Stop what is left of them, then exit.
stopped() {
  trap - TERM INT
  kill $(jobs -p) 2>/dev/null || true
  wait || true
  log "stopped (partitions $parts)"
  exit 0
}
trap stopped TERM INT

log "started with partitions $parts"
for pt in $(echo "$parts" | tr ',' ' '); do
  write_loop "${pt%%:*}" "${pt#*:}" &
done
wait
# Every partition was fenced off: stay idle until tenure run stops this
# worker (exiting would make it start the worker again with the same set).
log "no partition left to write to; idle until stopped"
sleep 2147483647 &
wait
