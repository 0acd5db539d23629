#!/usr/bin/env bash
# Runs a command with /etc/hosts naming loopback's IPv6 forms (::1, ::ffff:127.0.0.1), in a private mount namespace
# (the machine's file is untouched). c10d's TCPStore (torch 2.x: every client; torchrun's c10d rendezvous too)
# looks up the name of each peer address it connects to; over IPv4-mapped loopback that address is not in a usual
# /etc/hosts and the lookup goes to DNS, which on a machine without a reachable server costs each client a
# resolver time-out (5 to 10 s), so a benchmark would measure the resolver. Without root or unshare the command
# runs as is, with a warning.
#   bench/loopback_hosts.sh COMMAND [ARG...]
set -euo pipefail
if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null; then
  hosts=$(mktemp /tmp/ddprun-bench-hosts.XXXXXX)
  trap 'rm -f "$hosts"' EXIT
  { cat /etc/hosts; echo "::1 localhost"; echo "::ffff:127.0.0.1 localhost"; } >"$hosts"
  chmod 0644 "$hosts"
  # shellcheck disable=SC2016 # expanded by the inner sh
  unshare --mount -- sh -c 'mount --bind "$0" /etc/hosts && exec "$@"' "$hosts" "$@"
else
  echo "loopback_hosts.sh: not root or no unshare: running with the machine's /etc/hosts" >&2
  exec "$@"
fi
