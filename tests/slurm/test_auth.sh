#!/usr/bin/env bash
# Under Slurm the rendezvous store is never open to another user with --rdzv-auth auto (the default):
#  - ddprun finds munged where Slurm does, from slurm.conf's AuthInfo socket (no DDPRUN_MUNGE_SOCKET here);
#  - a self-launch where ddprun finds no munged hands its agents a per-job token through srun's environment,
#    which no worker sees;
#  - an srun step with neither MUNGE nor a token is refused at once; --rdzv-auth none runs it open.
# The intruder is another Unix user outside the job with no credential: before, it reached the store (it was
# told that node rank 1 is taken, and could as well have aborted the job).
source "$(dirname "$0")/lib.sh"
setup
need_ddprun
command -v setpriv >/dev/null || skip "setpriv (util-linux) is needed to run the intruder as another user"
unset DDPRUN_MUNGE_SOCKET DDPRUN_TOKEN DDPRUN_TOKEN_FILE DDPRUN_RDZV_AUTH  # cluster.sh env sets the first

# port.sh RUN: the store port ddprun derives for run RUN, JOBID.STEPID of a step or JOBID of a self-launch
# (its own dry run in that step's, or that batch script's, environment). The step runs with --resv-ports=0, so that
# its store is on that port, not on one Slurm reserved (the cluster's MpiParams=ports).
cat > port.sh <<EOS
#!/bin/bash
case \$1 in
  *.*) ctx="SLURM_JOB_ID=\${1%%.*} SLURM_STEP_ID=\${1#*.} SLURM_STEP_NODELIST=node1 SLURM_NODEID=0" ;;
  *) ctx="SLURM_JOB_ID=\$1 SLURM_JOB_NODELIST=node1" ;;
esac
env -i PATH="\$PATH" \$ctx "$DDPRUN" --dry-run --format json --rdzv-auth none --nproc-per-node 1 -- true |
  sed -n 's/.*"rdzv_endpoint": "node1:\([0-9]*\)".*/\1/p'
EOS
# intruder.sh RUN NAME: user nobody, outside Slurm, no credential, asks run RUN's store for node rank 1.
cat > intruder.sh <<EOS
#!/bin/bash
port=\$("$WORK/port.sh" "\$1")
env -i PATH=/usr/bin:/bin setpriv --reuid=nobody --regid=nogroup --clear-groups -- "$DDPRUN" --nnodes 2 \\
  --node-rank 1 --rdzv-endpoint "127.0.1.1:\$port" --rdzv-id "\$1" --rdzv-auth none --rdzv-timeout 30 \\
  -- true > "$WORK/intruder_\$2.log" 2>&1
echo "intruder rc \$?" >> "$WORK/intruder_\$2.log"
touch "$WORK/intruder_\$2.done"
EOS
# worker.sh NAME: records whether the rendezvous token reached it, and stays up until the intruder is done.
cat > worker.sh <<EOS
#!/bin/bash
echo "\$(hostname)\${DDPRUN_TOKEN:+ token-leaked}" > "$WORK/\$1_rank\$RANK"
for _ in \$(seq 600); do [ -e "$WORK/intruder_\$1.done" ] && exit 0; sleep 0.1; done
exit 3
EOS
chmod +x port.sh intruder.sh worker.sh

# check NAME MODE: the job completed on both nodes, no worker saw a token, and the intruder was refused.
check() {
  local name=$1 mode=$2 j=$3
  st=$(wait_job "$j" 120) || fail "job $j did not finish (state $st)"
  cat "$name.out" "$name.err" "intruder_$name.log" 2>/dev/null | sed 's/^/   /'
  expect_job "$j" COMPLETED 0:0
  expect_eq "$name: workers (host, no token)" "node1 node2 " "$(cat "${name}_rank0" "${name}_rank1" | tr '\n' ' ')"
  grep -q "authentication required: this store uses --rdzv-auth $mode" "intruder_$name.log" \
    || fail "$name: the intruder was not refused by a $mode store: $(cat "intruder_$name.log")"
  note "ok: $name: the intruder was refused ($mode)"
}

note "srun ddprun, no DDPRUN_MUNGE_SOCKET: MUNGE from slurm.conf"
cat > munge.sh <<EOS
#!/bin/bash
srun -N2 --ntasks-per-node=1 --resv-ports=0 "$DDPRUN" --nproc-per-node 1 -- "$WORK/worker.sh" munge &
pid=\$!
"$WORK/intruder.sh" "\$SLURM_JOB_ID.0" munge
wait \$pid
EOS
j=$(submit -N2 -o munge.out -e munge.err munge.sh)
check munge munge "$j"

note "self-launch where ddprun finds no munged: a per-job token"
cat > token.sh <<EOS
#!/bin/bash
export DDPRUN_MUNGE_SOCKET="$WORK/no-munged-here.sock"
"$DDPRUN" --nproc-per-node 1 -- "$WORK/worker.sh" token &
pid=\$!
"$WORK/intruder.sh" "\$SLURM_JOB_ID" token   # a self-launch runs as the job id
wait \$pid
EOS
j=$(submit -N2 -o token.out -e token.err token.sh)
check token token "$j"

note "srun ddprun with neither MUNGE nor a token: refused, unless --rdzv-auth none"
export DDPRUN_MUNGE_SOCKET=$WORK/no-munged-here.sock
timeout 120 srun -N2 --ntasks-per-node=1 "$DDPRUN" --nproc-per-node 1 -- true > open.out 2> open.err
rc=$?
sed 's/^/   /' open.err
expect_eq "srun exit code without MUNGE or token" 2 "$rc"
grep -q "ddprun: error: --rdzv-auth auto found no MUNGE (munged does not answer on $WORK/no-munged-here.sock)" open.err \
  || fail "no one-line refusal naming the munged socket"
timeout 120 srun -N2 --ntasks-per-node=1 "$DDPRUN" --rdzv-auth none --nproc-per-node 1 -- true > none.out 2> none.err
expect_eq "srun exit code with --rdzv-auth none" 0 "$?"
pass
