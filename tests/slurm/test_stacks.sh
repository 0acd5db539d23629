#!/usr/bin/env bash
# ddprun stacks with only the Slurm job (docs/observe.md): from the batch host (SLURM_JOB_ID) and from
# another node of the allocation, it finds the newest ddprun step's store as `top` does, and prints the
# stacks of all four ranks (local rank 0 Python in known_function_xyz, local rank 1 a native shell)
# without stopping them; --rank narrows; the job then ends with exit 0.
source "$(dirname "$0")/lib.sh"
setup
need_ddprun

cat > worker.py <<'EOS'
import os, time
def known_function_xyz():
    print("ready", flush=True)
    while not os.path.exists(os.environ["WORK"] + "/go"):
        time.sleep(0.1)
known_function_xyz()
EOS
cat > job.sh <<EOS
#!/bin/bash
export WORK="$WORK"
srun -N2 -w 'node[1-2]' "$DDPRUN" --nproc-per-node 2 --no-python --no-prefix -- \
  sh -c 'if [ "\$LOCAL_RANK" = 0 ]; then exec "$PYTHON" "$WORK/worker.py"; fi; echo ready; until [ -e "$WORK/go" ]; do sleep 0.2; done' \
  > "$WORK/run.out" 2> "$WORK/run.err" &
run=\$!
# Until every rank printed ready (the agents publish about once a second); bounded.
for i in \$(seq 1 150); do
  "$DDPRUN" top --once --format json > "$WORK/top.json" 2> /dev/null
  [ "\$(grep -o '"last_line":"ready' "$WORK/top.json" | wc -l)" = 4 ] && break
  sleep 0.2
done
"$DDPRUN" stacks > "$WORK/batch.txt" 2> "$WORK/batch.err"; echo \$? > "$WORK/batch.rc"
srun -N1 -w node2 --overlap "$DDPRUN" stacks --rank 2-3 > "$WORK/other.txt" 2> "$WORK/other.err"
echo \$? > "$WORK/other.rc"
touch "$WORK/go"
wait \$run
echo \$? > "$WORK/srun.rc"
EOS
chmod +x job.sh
job=$(submit -N2 -w 'node[1-2]' -o "$WORK/batch.out" "$WORK/job.sh")
expect_eq "job state" COMPLETED "$(wait_job "$job" 200)"
for who in batch other; do
  expect_eq "$who: ddprun stacks exit code" 0 "$(cat "$who.rc")"
  [[ ! -s $who.err ]] || fail "$who: ddprun stacks wrote to stderr: $(cat "$who.err")"
  grep -q "in known_function_xyz" "$who.txt" || fail "$who: no Python frame: $(cat "$who.txt")"
  grep -q "TID" "$who.txt" || fail "$who: no native stack: $(cat "$who.txt")"
done
grep -q "^ranks 0,2 (2 ranks):" batch.txt || fail "the Python ranks are not one group: $(cat batch.txt)"
grep -q "^ranks 0\|^rank 0" other.txt && fail "--rank 2-3 printed rank 0: $(cat other.txt)"
expect_eq "the job's srun" 0 "$(cat srun.rc)"
pass
