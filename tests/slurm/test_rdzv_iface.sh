#!/usr/bin/env bash
# --rdzv-iface under Slurm (docs/slurm.md, "Several networks"): a batch script's self-launch passes
# DDPRUN_RDZV_IFACE on to every node, each agent advertises its own address on that interface (here lo: the
# local cluster's nodes share this machine), node 0's is every worker's MASTER_ADDR, the startup table lists
# the addresses, and node 0 warns that nodes of different names advertise a loopback one. An interface one
# node lacks is one line there, and every node ends with it (exit 2).
# The separate networks themselves are tests/netns/test_multi_nic.sh's.
source "$(dirname "$0")/lib.sh"
setup
need_ddprun

mkdir -p out
cat > job.sh <<EOS
#!/bin/bash
export DDPRUN_RDZV_IFACE=lo
"$DDPRUN" --nproc-per-node 2 --no-python -- sh -c 'echo "\$MASTER_ADDR" > "$WORK/out/rank_\$RANK"'
EOS
j=$(submit -N2 -w 'node[1-2]' -o job.out job.sh)
st=$(wait_job "$j" 200) || fail "job $j did not finish (state $st)"
expect_job "$j" COMPLETED 0:0
for r in 0 1 2 3; do expect_eq "rank $r's MASTER_ADDR" 127.0.0.1 "$(cat "out/rank_$r" 2>/dev/null)"; done
grep -qE '^  node +host +address +ranks ' job.out || fail "the startup table has no address column"
grep -qE '^  1 +node2 +127\.0\.0\.1 +2-3 ' job.out || fail "the startup table does not show node2 at 127.0.0.1"
note "ok: the startup table shows each node's address"
# lo on nodes of different names: node 0 warns once that the nodes advertise a loopback address, naming
# them and the variable that chose it (on separate machines the workers would dial their own loopback).
grep -q '^ddprun: warning: node1, node2 advertise 127.0.0.1, a loopback address (DDPRUN_RDZV_IFACE=lo), in a job of 2 host names' \
  job.out || fail "node 0 did not warn about the loopback address"
expect_eq "loopback warnings" 1 "$(grep -c 'a loopback address' job.out)"
note "ok: node 0 warns of the loopback address, once"

# agent.sh: node id 1 names an interface it lacks.
cat > agent.sh <<EOS
#!/bin/bash
if [ "\$SLURM_NODEID" = 1 ]; then exec "$DDPRUN" --rdzv-iface nosuch0 "\$@"; fi
exec "$DDPRUN" --rdzv-iface lo "\$@"
EOS
chmod +x agent.sh
note "srun ddprun: node id 1 has no interface nosuch0"
timeout 200 srun -N2 --ntasks-per-node=1 -l ./agent.sh --rdzv-timeout 60 --no-python -- true \
  > wrong.out 2> wrong.err
rc=$?
sed 's/^/   /' wrong.err
expect_eq "srun exit code" 2 "$rc"
grep -qE '^1: ddprun: error: --rdzv-iface nosuch0: node node[0-9]+ has no interface nosuch0; its interfaces that are up with an address: lo' \
  wrong.err || fail "node id 1 did not report its own error"
grep -qE '^0: ddprun: error: node[0-9]+ \(node rank 1\) could not start: --rdzv-iface nosuch0' wrong.err \
  || fail "node id 0 does not name node rank 1's error"
if grep -qE 'timed out|cannot reach' wrong.err; then fail "a node waited for the rendezvous"; fi
pass
