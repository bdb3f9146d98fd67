#!/usr/bin/env bash
# Installs redis-server (Debian's package) on a Debian or Ubuntu machine if
# it is missing. The Redis and Redlock tests (leasing/redislock,
# cmd/tenure's --backend tests) and `tenure demo --compare` start real
# redis-server processes on loopback ports and skip without it. Run as
# root; as another user it only says what is missing.
set -euo pipefail

command -v redis-server >/dev/null && exit 0

if [[ $(id -u) != 0 ]]; then
  echo "redis: redis-server is missing; install Debian's redis-server package (the Redis tests skip without it)" >&2
  exit 0
fi
echo "== installing redis-server for the Redis and Redlock lock tests"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server >/dev/null
# The package starts a system service on 6379; the tests start their own
# servers on free ports and need none.
if command -v systemctl >/dev/null && systemctl is-active --quiet redis-server 2>/dev/null; then
  systemctl stop redis-server || true
fi
