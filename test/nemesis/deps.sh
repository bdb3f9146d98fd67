#!/usr/bin/env bash
# Installs what the fault-injection harness needs on a Debian or Ubuntu
# machine, if missing: iproute2 (ip netns, veth, bridges) and iptables
# (the partitions), and loads the kernel's netfilter queues (the delays)
# where they are a module not yet loaded. Run as root; as another user it
# only says what is missing, since the harness then skips anyway.
set -euo pipefail

if [[ ! -e /proc/net/netfilter/nfnetlink_queue && $(id -u) == 0 ]] && command -v modprobe >/dev/null; then
  modprobe nfnetlink_queue 2>/dev/null ||
    echo "nemesis: no netfilter queues (nfnetlink_queue) in this kernel: delay faults are not drawn" >&2
fi

missing=()
command -v ip >/dev/null || missing+=(iproute2)
command -v iptables-restore >/dev/null || missing+=(iptables)
[[ ${#missing[@]} == 0 ]] && exit 0

if [[ $(id -u) != 0 ]]; then
  echo "nemesis: missing ${missing[*]}; the harness needs root and skips without them" >&2
  exit 0
fi
echo "== installing ${missing[*]} for the network namespace and fault-injection tests"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
