#!/usr/bin/env bash
# Two ddprun steps at once in one allocation (a sweep: srun --exact ... & srun --exact ... &): each step
# derives its own store port, MASTER_PORT and run id from JOBID.STEPID, so neither collides with nor
# joins the other. Before, both derived them from the job id alone. --resv-ports=0: no ports reserved by Slurm
# (the cluster's MpiParams=ports), which would replace the derived ones.
source "$(dirname "$0")/lib.sh"
setup
need_ddprun

# Each worker records its run id, MASTER_PORT and world size, then stays up long enough for the
# two steps to overlap.
cat > worker.sh <<'EOS'
#!/bin/sh
echo "$TORCHELASTIC_RUN_ID $MASTER_PORT $WORLD_SIZE $1" > "$2/$1_rank$RANK"
sleep 4
EOS
chmod +x worker.sh
cat > job.sh <<EOS
#!/bin/bash
srun -N2 --ntasks-per-node=1 --exact --resv-ports=0 "$DDPRUN" --nproc-per-node 2 -- "$WORK/worker.sh" a "$WORK" > "$WORK/a.out" 2> "$WORK/a.err" &
srun -N2 --ntasks-per-node=1 --exact --resv-ports=0 "$DDPRUN" --nproc-per-node 2 -- "$WORK/worker.sh" b "$WORK" > "$WORK/b.out" 2> "$WORK/b.err" &
wait %1; ra=\$?
wait %2; rb=\$?
echo "rc \$ra \$rb"
exit \$(( ra + rb ))
EOS
j=$(submit -N2 -w 'node[1-2]' -o job.out job.sh)
st=$(wait_job "$j" 240) || fail "job $j did not finish (state $st)"
cat job.out a.err b.err 2>/dev/null | sed 's/^/   /'
expect_job "$j" COMPLETED 0:0
for s in a b; do
  n=$(ls "$WORK"/${s}_rank* 2>/dev/null | wc -l)
  expect_eq "workers of step $s" 4 "$n"
  [[ $(cut -d' ' -f1-3 "$WORK"/${s}_rank* | sort -u | wc -l) == 1 ]] || fail "step $s's workers disagree: $(cat "$WORK"/${s}_rank*)"
  expect_eq "world size of step $s" 4 "$(cut -d' ' -f3 "$WORK/${s}_rank0")"
done
run_a=$(cut -d' ' -f1 "$WORK/a_rank0"); run_b=$(cut -d' ' -f1 "$WORK/b_rank0")
port_a=$(cut -d' ' -f2 "$WORK/a_rank0"); port_b=$(cut -d' ' -f2 "$WORK/b_rank0")
[[ $run_a != "$run_b" ]] || fail "both steps got run id $run_a"
[[ $port_a != "$port_b" ]] || fail "both steps got MASTER_PORT $port_a"
[[ $run_a == "$j".* && $run_b == "$j".* ]] || fail "run ids '$run_a' '$run_b' are not JOBID.STEPID of job $j"
note "ok: step runs $run_a and $run_b, MASTER_PORTs $port_a and $port_b"
pass
