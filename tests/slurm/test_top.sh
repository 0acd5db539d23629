#!/usr/bin/env bash
# ddprun top with only the Slurm job (docs/observe.md): from the batch host (SLURM_JOB_ID) and from another
# node of the allocation (an overlapping step, which must not take itself for the job), it finds the newest
# ddprun step's store (the cluster reserves ports for every step: the store is on the first reserved one),
# authenticates with MUNGE as the agents do, and lists all four ranks; the job then ends with exit 0.
source "$(dirname "$0")/lib.sh"
setup
need_ddprun

cat > job.sh <<EOS
#!/bin/bash
srun -N2 -w 'node[1-2]' "$DDPRUN" --nproc-per-node 2 --no-python --no-prefix -- \
  sh -c 'echo "hello from \$RANK"; until [ -e "$WORK/go" ]; do sleep 0.2; done' > "$WORK/run.out" 2> "$WORK/run.err" &
run=\$!
# Until every rank is listed (the agents publish about once a second); bounded.
for i in \$(seq 1 150); do
  "$DDPRUN" top --once --format json > "$WORK/batch.json" 2> "$WORK/batch.err"; echo \$? > "$WORK/batch.rc"
  [ "\$(grep -o '"last_line":"hello from' "$WORK/batch.json" | wc -l)" = 4 ] && break
  sleep 0.2
done
srun -N1 -w node2 --overlap "$DDPRUN" top --once --format json > "$WORK/other.json" 2> "$WORK/other.err"
echo \$? > "$WORK/other.rc"
"$DDPRUN" top --once > "$WORK/batch.txt" 2>> "$WORK/batch.err"
touch "$WORK/go"
wait \$run
echo \$? > "$WORK/srun.rc"
EOS
chmod +x job.sh
job=$(submit -N2 -w 'node[1-2]' -o "$WORK/batch.out" "$WORK/job.sh")
expect_eq "job state" COMPLETED "$(wait_job "$job" 200)"
for who in batch other; do
  expect_eq "$who: ddprun top exit code" 0 "$(cat "$who.rc")"
  [[ ! -s $who.err ]] || fail "$who: ddprun top wrote to stderr: $(cat "$who.err")"
  python3 - "$who.json" "$job" <<'EOP' || fail "$who: the snapshot is not the job's: $(cat "$who.json")"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["job"]["world_size"] == 4 and j["job"]["nnodes"] == 2, j["job"]
assert j["job"]["run_id"].startswith(sys.argv[2] + "."), j["job"]["run_id"]  # JOBID.STEPID
ranks = j["ranks"]
assert [r["rank"] for r in ranks] == [0, 1, 2, 3], ranks
assert [r["host"] for r in ranks] == ["node1", "node1", "node2", "node2"], ranks
assert all(r["pid"] > 0 and r["state"] == "running" for r in ranks), ranks
assert all(r["last_line"] == "hello from %d" % r["rank"] for r in ranks), ranks
EOP
done
grep -q "RANK NODE HOST" batch.txt || fail "the text view has no table: $(cat batch.txt)"
expect_eq "the job's srun" 0 "$(cat srun.rc)"
pass
