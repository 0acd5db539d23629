#!/usr/bin/env bash
# Per-task mode at scale: only local task 0 of each node talks to the master's store; the node's other tasks use
# a node-local store through it. The master sees one client process per node, and failures still reach every
# task with the root cause's exit code, a lost relay included, with nothing left running.
source "$(dirname "$0")/lib.sh"
setup
need_ddprun

N=3
K=4
MARK="pertask-relay-$$"  # in every worker's argv, to find leftovers

# Rank 0's worker looks at the master's store while the job runs: every relay is connected by then (a relay
# joins before any worker starts and stays until the exit barrier, which waits for rank 0).
snapshot='if [ "$RANK" = 0 ]; then echo $PPID > '"$WORK"'/master.pid; echo $MASTER_PORT > '"$WORK"'/master_port; '
snapshot+='ss -tlnpH > '"$WORK"'/listen.txt; '
snapshot+='ss -tnpH state established > '"$WORK"'/est.txt; fi; echo "$RANK $LOCAL_RANK $WORLD_SIZE" > '"$WORK"'/t.$RANK'

note "srun -N$N --ntasks-per-node=$K ddprun: the master's store sees one client process per node"
timeout 180 srun -N$N -w "node[1-$N]" --ntasks-per-node=$K "$DDPRUN" -- sh -c "$snapshot" "$MARK" \
  > ok.out 2> ok.err || fail "srun -N$N --ntasks-per-node=$K ddprun exited $?"
expect_eq "workers that ran" $((N * K)) "$(ls t.* | wc -l)"
mpid=$(cat master.pid)
# The store listens on every address (the node-local one on 127.0.0.1 only); so may the workers' store on
# MASTER_PORT, which the master serves too (--worker-store agent): not the one counted here.
store_port=$(awk -v p="pid=$mpid," -v mp="$(cat master_port)" \
  'index($0, p) && $4 ~ /^(0\.0\.0\.0|\*|\[::\]):/ { sub(/.*:/, "", $4); if ($4 != mp) print $4 }' \
  listen.txt | head -n1)
[[ -n $store_port ]] || fail "found no store port the master (pid $mpid) listens on: $(cat listen.txt)"
# Client sockets: the peer is the store port; the process column names their owner.
clients=$(awk -v port=":$store_port" '{ n = length(port) } substr($4, length($4) - n + 1) == port' est.txt)
client_pids=$(grep -o 'pid=[0-9]*' <<< "$clients" | sort -u | wc -l)
conns=$(awk -v port=":$store_port" '{ n = length(port) } substr($3, length($3) - n + 1) == port' est.txt | wc -l)
note "store port $store_port: $conns connections from $client_pids processes ($((N * K)) tasks on $N nodes)"
expect_eq "processes connected to the master's store (one per node)" "$N" "$client_pids"
# Each agent holds at most two connections (main and watch), the master one more (its monitor).
((conns <= 2 * N + 1)) || fail "$conns connections to the master's store for $N nodes (at most $((2 * N + 1)))"

note "a failing task's exit code on every task"
rm -f rc.*
fail_cmd='if [ "$RANK" = 6 ]; then sleep 1; exit 7; fi; exec sleep 600'
timeout 180 srun -N$N -w "node[1-$N]" --ntasks-per-node=$K sh -c \
  '"$1" -- sh -c "$2" "$3"; echo $? > '"$WORK"'/rc.$SLURM_PROCID' sh "$DDPRUN" "$fail_cmd" "$MARK" \
  > fail.out 2> fail.err
for ((p = 0; p < N * K; p++)); do
  expect_eq "task $p exit code" 7 "$(cat "rc.$p" 2> /dev/null)"
done
expect_eq "full reports (on the master only)" 1 "$(grep -c '^Root cause (first observed failure):' fail.err)"
pgrep -f -- "$MARK" > /dev/null && fail "workers left running after the failure: $(pgrep -af -- "$MARK")"

note "a lost relay (local task 0 of node 2 killed) does not leave its node's tasks hanging"
rm -f rc.*
lost_cmd='if [ "$RANK" = '"$K"' ]; then sleep 1; kill -9 $PPID; exit 0; fi; exec sleep 600'
timeout 180 srun -N$N -w "node[1-$N]" --ntasks-per-node=$K sh -c \
  '"$1" -- sh -c "$2" "$3"; echo $? > '"$WORK"'/rc.$SLURM_PROCID' sh "$DDPRUN" "$lost_cmd" "$MARK" \
  > lost.out 2> lost.err
rc=$?
((rc != 124)) || fail "srun was still running after 180 s: a task hangs"
expect_eq "the killed relay" 137 "$(cat "rc.$K" 2> /dev/null)"
for ((p = 0; p < N * K; p++)); do
  ((p == K)) && continue
  expect_eq "task $p exit code" 1 "$(cat "rc.$p" 2> /dev/null)"
done
pgrep -f -- "$MARK" > /dev/null && fail "workers left running after the lost relay: $(pgrep -af -- "$MARK")"
pass
