#!/usr/bin/env bash
# ddprun top and stacks with only the Slurm job id, run from where this test runs: a login node where the
# cluster's node names (nodeK) do not resolve (they resolve only inside the cluster's namespaces), so the
# store is reached at Slurm's NodeAddr (127.0.1.K) (issue 35):
#  1. a step started with --rdzv-id: found from inside the allocation and from the login node (items 24, 12);
#  2. per-task mode: top says it publishes no status (not "still joining"), and --metrics-port says why it
#     serves nothing (item 29);
#  3. an elastic job whose node 0 is SIGKILLed: top and stacks find the store on the survivor it moved to,
#     and the survivors print where it went (item 6).
source "$(dirname "$0")/lib.sh"
setup
need_ddprun
if getent hosts node1 > /dev/null; then
  skip "node1 resolves here: this test needs a caller where the cluster's node names do not"
fi

# Polls `ddprun top --job J --once --format json` (into $2.json, $2.err, $2.rc) until the Python check $3
# holds for the snapshot; bounded.
top_until() { # job name check [tries]
  local i
  for i in $(seq 1 "${4:-300}"); do
    "$DDPRUN" top --job "$1" --once --format json > "$2.json" 2> "$2.err"
    echo $? > "$2.rc"
    if [[ $(cat "$2.rc") == 0 ]] && python3 -c "import json,sys; j=json.load(open(sys.argv[1])); sys.exit(0 if ($3) else 1)" "$2.json" 2>/dev/null; then
      return 0
    fi
    sleep 0.2
  done
  return 1
}

job_of() { squeue -h -n "$1" -o %i | head -n1; }

note "1. a step started with --rdzv-id myrun"
srun -N2 -w 'node[1-2]' --job-name=observe1 "$DDPRUN" --rdzv-id myrun --nproc-per-node 1 --no-python --no-prefix \
  -- sh -c "echo \"hello from \$RANK\"; until [ -e '$WORK/go1' ]; do sleep 0.2; done" > run1.out 2> run1.err &
run1=$!
for _ in $(seq 1 100); do job1=$(job_of observe1); [[ -n $job1 ]] && break; sleep 0.1; done
[[ -n $job1 ]] || fail "the srun of case 1 did not start a job"
echo "$job1" >> "$WORK/.jobs"
top_until "$job1" login 'len(j["ranks"]) == 2 and all(r["last_line"].startswith("hello") for r in j["ranks"])' \
  || fail "top --job $job1 from the login node: exit $(cat login.rc): $(cat login.err)"
python3 - login.json "$job1" <<'EOP' || fail "the snapshot is not the step's: $(cat login.json)"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["job"]["run_id"] == "myrun (step %s.0)" % sys.argv[2], j["job"]
assert j["job"]["endpoint"].startswith("node1:"), j["job"]
EOP
note "ok: found from the login node: $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["job"]["endpoint"])' login.json)"
srun --jobid="$job1" --overlap -N1 -w node2 "$DDPRUN" top --once --format json > inside.json 2> inside.err
expect_eq "top from inside the allocation, no --rdzv-id given" 0 $?
grep -q '"run_id":"myrun (step ' inside.json || fail "inside: not the step's store: $(cat inside.json)"
"$DDPRUN" stacks --job "$job1" > stacks1.out 2> stacks1.err
expect_eq "stacks --job from the login node" 0 $?
grep -q "TID" stacks1.out || fail "stacks: no native stack: $(cat stacks1.out)"
touch go1
wait $run1
expect_eq "case 1's srun" 0 $?

note "2. per-task mode"
srun -N2 -w 'node[1-2]' --ntasks-per-node=2 --job-name=observe2 "$DDPRUN" --metrics-port 39111 -- \
  sh -c "echo \"hello from \$RANK\"; until [ -e '$WORK/go2' ]; do sleep 0.2; done" > run2.out 2> run2.err &
run2=$!
for _ in $(seq 1 100); do job2=$(job_of observe2); [[ -n $job2 ]] && break; sleep 0.1; done
[[ -n $job2 ]] || fail "the srun of case 2 did not start a job"
echo "$job2" >> "$WORK/.jobs"
wait_file_grep run2.out 'hello from 3' 120 || fail "the per-task workers did not start"
"$DDPRUN" top --job "$job2" --once > pt.out 2> pt.err
expect_eq "top of a per-task job" 1 $?
grep -q "publishes no status: per-task mode" pt.err || fail "top does not say per-task mode publishes no status: $(cat pt.err)"
grep -q "still joining" pt.err && fail "top says the job is still joining: $(cat pt.err)"
grep -q -- "--metrics-port: per-task mode" run2.err || fail "no per-task line for --metrics-port: $(cat run2.err)"
grep -q "give --rdzv-endpoint" run2.err && fail "--metrics-port asks for --rdzv-endpoint: $(cat run2.err)"
touch go2
wait $run2
expect_eq "case 2's srun" 0 $?

note "3. an elastic job loses node 0"
cat > elastic.sh <<EOS
#!/bin/bash
#SBATCH --no-kill
"$DDPRUN" --nnodes 2:3 --max-restarts 1 --nproc-per-node 1 --no-python --no-prefix -- \
  sh -c 'echo "attempt \$TORCHELASTIC_RESTART_COUNT rank \$RANK"; until [ -e "$WORK/go3" ]; do sleep 0.2; done'
EOS
job3=$(submit -N3 -w 'node[1-3]' -o "$WORK/elastic.out" "$WORK/elastic.sh")
top_until "$job3" before 'len(j["ranks"]) == 3 and all(r["state"] == "running" for r in j["ranks"])' \
  || fail "top --job $job3 before the loss: exit $(cat before.rc): $(cat before.err)"
[[ -n $(step_pids_on_node "$job3" 0) ]] || fail "found no agent of job $job3 on node id 0"
kill_node_tasks "$job3" 0
note "node id 0's agent and workers are gone"
top_until "$job3" after 'j["job"]["attempt"] == 1 and len(j["ranks"]) == 2 and all(r["state"] == "running" for r in j["ranks"])' 600 \
  || fail "top --job $job3 after node 0's loss: exit $(cat after.rc): $(cat after.err)"
# (On this one-machine cluster every node's addresses reach node2's store, so the endpoint top names may
# carry another node's name; the nodes it reports are the survivors.)
python3 - after.json <<'EOP' || fail "not the survivors' store: $(cat after.json)"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["job"]["world_size"] == 2, j["job"]
assert sorted(n["host"] for n in j["nodes"]) == ["node2", "node3"], j["nodes"]
EOP
note "ok: after the failover top reads $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["job"]["endpoint"])' after.json)"
"$DDPRUN" stacks --job "$job3" > stacks3.out 2> stacks3.err
expect_eq "stacks --job after the failover" 0 $?
grep -q "TID" stacks3.out || fail "stacks after the failover: $(cat stacks3.out) $(cat stacks3.err)"
grep -q "node 0 was lost: the rendezvous store moved to node2:" elastic.out \
  || fail "the survivors do not say where the store went"
grep -q "worker store: closed the connection" elastic.out \
  && fail "looking for the store sent a ddprun hello to the workers' store: $(grep 'worker store' elastic.out)"
touch go3
# The job's final state after a SIGKILLed node 0 is srun's (docs/elastic.md); the survivors' run is ours.
wait_job "$job3" 200 > /dev/null || fail "job $job3 did not end"
grep -Eq "job summary \(attempt 1\): success, [0-9]+ workers? on 2 nodes exited 0" elastic.out || fail "the survivors' attempt did not succeed"
pass
