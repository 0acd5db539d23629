#!/usr/bin/env bash
# --rdzv-iface on two hosts with two networks (docs/slurm.md, "Several networks"): network namespaces nodea
# and nodeb joined by a management network (mgmt0, 10.77.1.0/24), where their host names resolve, and a
# fabric (fab0, 10.77.2.0/24), plus an IPv6-only fabric (fab6, fd77:6::/64). The agents meet at the store by
# host name, as under Slurm; with --rdzv-iface the workers must get node 0's fabric address as MASTER_ADDR,
# reach the workers' store from their own fabric address (the store admits it), find nothing on MASTER_PORT
# at the host name's address, and run real torch traffic over the fabric. A wrong interface on one node is
# one line there, and the other node ends with it at once.
#
# Needs root (ip netns), unshare, and python3 with torch; exits 77 (skipped) without them.
# Inputs: DDPRUN (the binary), PYTHON (default /usr/bin/python3).
# shellcheck disable=SC2015,SC2016  # `a && b || fail` is meant; sh -c's script expands in that shell
set -uo pipefail

TEST_DIR=$(cd "$(dirname "$0")" && pwd)
PYTHON=${PYTHON:-/usr/bin/python3}
skip() { echo "SKIP: test_multi_nic: $*"; exit 77; }
[[ -n ${DDPRUN:-} && -x $DDPRUN ]] || skip "DDPRUN is not set to the ddprun binary"
[[ $EUID == 0 ]] || skip "network namespaces need root"
command -v ip >/dev/null && command -v unshare >/dev/null || skip "ip (iproute2) or unshare missing"
"$PYTHON" -c 'import torch.distributed' 2>/dev/null || skip "$PYTHON has no torch"

# Unique names (an interface name has at most 15 characters).
P="dn$$"
NA="${P}a" NB="${P}b"
WORK=$(mktemp -d /tmp/ddprun-netns.XXXXXX)
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done  # each agent stops its workers first
  ip netns del "$NA" 2>/dev/null
  ip netns del "$NB" 2>/dev/null  # the veth pairs go with their namespaces
  rm -rf "/etc/netns/$NA" "/etc/netns/$NB"
  [[ -n ${KEEP:-} ]] || rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 1' TERM INT  # ctest's timeout too: the EXIT trap still removes the namespaces

fail() {
  echo "FAIL: test_multi_nic: $*" >&2
  local f
  for f in "$WORK"/*/*; do
    [[ -f $f ]] || continue
    echo "---- $f" >&2
    tail -n 30 "$f" >&2
  done
  exit 1
}

ip netns add "$NA" 2>/dev/null || skip "ip netns add failed (no network namespaces here)"
ip netns add "$NB" || fail "ip netns add $NB"

# link NAME: a veth pair named NAME in both namespaces.
link() {
  ip link add "${P}x" type veth peer name "${P}y" || fail "ip link add ($1)"
  ip link set "${P}x" netns "$NA" && ip link set "${P}y" netns "$NB" || fail "moving $1"
  ip -n "$NA" link set "${P}x" name "$1" && ip -n "$NB" link set "${P}y" name "$1" || fail "renaming $1"
  ip -n "$NA" link set "$1" up && ip -n "$NB" link set "$1" up || fail "$1 up"
}
link mgmt0
link fab0
link fab6
ip -n "$NA" link set lo up && ip -n "$NB" link set lo up
ip -n "$NA" addr add 10.77.1.1/24 dev mgmt0 && ip -n "$NB" addr add 10.77.1.2/24 dev mgmt0 || fail "mgmt0 addresses"
ip -n "$NA" addr add 10.77.2.1/24 dev fab0 && ip -n "$NB" addr add 10.77.2.2/24 dev fab0 || fail "fab0 addresses"
ip -n "$NA" addr add fd77:6::1/64 dev fab6 nodad && ip -n "$NB" addr add fd77:6::2/64 dev fab6 nodad ||
  fail "fab6 addresses"
# The host names resolve to the management network on both hosts (ip netns exec mounts these as /etc/hosts).
for ns in "$NA" "$NB"; do
  mkdir -p "/etc/netns/$ns"
  printf '127.0.0.1 localhost\n::1 localhost\n10.77.1.1 nodea\n10.77.1.2 nodeb\n' >"/etc/netns/$ns/hosts"
done

# agent NS HOST RANK DIR ARGS...: one agent in namespace NS with host name HOST; output in DIR/agentRANK.*.
agent() {
  local ns=$1 host=$2 rank=$3 dir=$4
  shift 4
  ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$host" \
    "$DDPRUN" --nnodes 2 --node-rank "$rank" --rdzv-endpoint nodea:29400 --rdzv-auth none --rdzv-timeout 60 \
    --nproc-per-node 1 --python "$PYTHON" "$@" >"$dir/agent$rank.out" 2>"$dir/agent$rank.err"
}

# run CASE IFACE_A IFACE_B MODE: both agents; sets RC0 and RC1.
run() {
  local dir=$WORK/$1
  mkdir -p "$dir"
  GLOO_SOCKET_IFNAME=$2 agent "$NA" nodea 0 "$dir" --rdzv-iface "$2" "$TEST_DIR/nic_worker.py" "$dir" "$4" nodea &
  PIDS=($!)
  GLOO_SOCKET_IFNAME=$3 agent "$NB" nodeb 1 "$dir" --rdzv-iface "$3" "$TEST_DIR/nic_worker.py" "$dir" "$4" nodea &
  PIDS+=($!)
  # Both in the background: a signal to this script interrupts `wait`, and the EXIT trap stops them.
  wait "${PIDS[1]}"
  RC1=$?
  wait "${PIDS[0]}"
  RC0=$?
  PIDS=()
}

# check_ranks CASE MASTER LOCAL0 LOCAL1: each rank's line: MASTER_ADDR, its local address to the store, the
# host name's address, what MASTER_PORT there said, the torch result.
check_ranks() {
  local dir=$WORK/$1 r line want
  for r in 0 1; do
    [[ -s $dir/rank_$r.txt ]] || fail "$1: rank $r wrote nothing"
    line=$(cat "$dir/rank_$r.txt")
    want="$2 $([[ $r == 0 ]] && echo "$3" || echo "$4") 10.77.1.1 refused ok"
    [[ $line == "$want" ]] || fail "$1: rank $r: '$line', expected '$want'"
  done
}

# 1. IPv4 fabric: gloo all_reduce through the agent's workers' store.
run v4 fab0 fab0 gloo
[[ $RC0 == 0 && $RC1 == 0 ]] || fail "v4: exit codes $RC0 $RC1, expected 0 0"
check_ranks v4 10.77.2.1 10.77.2.1 10.77.2.2
grep -q "master 10.77.2.1:" "$WORK/v4/agent0.err" || fail "v4: the startup table's master is not 10.77.2.1"
grep -Eq '^  0 +nodea +10\.77\.2\.1 ' "$WORK/v4/agent0.err" || fail "v4: no row 'nodea 10.77.2.1'"
grep -Eq '^  1 +nodeb +10\.77\.2\.2 ' "$WORK/v4/agent0.err" || fail "v4: no row 'nodeb 10.77.2.2'"

# 2. An IPv6-only fabric: its unique-local address, not the link-local one; a TCPStore exchange over it.
run v6 fab6 fab6 store
[[ $RC0 == 0 && $RC1 == 0 ]] || fail "v6: exit codes $RC0 $RC1, expected 0 0"
check_ranks v6 fd77:6::1 fd77:6::1 fd77:6::2
grep -qF "master [fd77:6::1]:" "$WORK/v6/agent0.err" || fail "v6: the startup table's master is not fd77:6::1"

# 3. A wrong interface on node 1: one line there naming it and the interfaces that exist; node 0 ends with it.
run wrong fab0 ib9 gloo
[[ $RC1 == 2 ]] || fail "wrong: node 1 exited $RC1, expected 2"
want="ddprun: error: --rdzv-iface ib9: node nodeb has no interface ib9; its interfaces that are up with an address: lo, mgmt0, fab0, fab6;"
grep -qF "$want" "$WORK/wrong/agent1.err" || fail "wrong: node 1 did not say '$want'"
[[ $(grep -c . "$WORK/wrong/agent1.err") == 1 ]] || fail "wrong: node 1 said more than one line"
[[ $RC0 == 2 ]] || fail "wrong: node 0 exited $RC0, expected node 1's 2"
grep -q "ib9" "$WORK/wrong/agent0.err" || fail "wrong: node 0 does not name node 1's error"
[[ ! -e $WORK/wrong/rank_0.txt ]] || fail "wrong: a worker started"

echo "PASS: test_multi_nic"
