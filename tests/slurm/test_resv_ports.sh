#!/usr/bin/env bash
# srun --resv-ports: the ports Slurm reserved for the step (SLURM_STEP_RESV_PORTS) carry the rendezvous store
# (the first) and MASTER_PORT (the second), on every node alike; explicit flags still win. Before, ddprun
# derived both from JOBID.STEPID and left the reserved ports unused.
source "$(dirname "$0")/lib.sh"
setup
need_ddprun

# Every port of a Slurm port list ("12000-12003", "12000,12002"), one a line.
expand() { tr ',' '\n' <<<"$1" | while IFS=- read -r a b; do seq "$a" "${b:-$a}"; done; }

note "the variable is the same on every node of the step"
srun -N2 -w 'node[1-2]' --resv-ports=2 -l printenv SLURM_STEP_RESV_PORTS > resv.out 2> resv.err \
  || fail "srun --resv-ports=2 printenv failed"
expect_eq "nodes reporting" 2 "$(wc -l < resv.out)"
expect_eq "distinct values" 1 "$(sed 's/^[0-9]*: //' resv.out | sort -u | wc -l)"
expect_eq "ports reserved" 2 "$(expand "$(sed -n 's/^0: //p' resv.out)" | wc -l)"

note "the dry run in the step plans the store and MASTER_PORT on the reserved ports"
srun -N2 -w 'node[1-2]' --resv-ports=2 -l bash -c \
  'echo "resv $SLURM_STEP_RESV_PORTS"; "$0" --dry-run --format json --nproc-per-node 1 --no-python -- true' \
  "$DDPRUN" > dry.out 2> dry.err || fail "the dry run under srun --resv-ports failed"
for node in 0 1; do
  resv=$(sed -n "s/^$node: resv //p" dry.out)
  [[ -n $resv ]] || fail "node $node printed no SLURM_STEP_RESV_PORTS"
  read -r first second < <(expand "$resv" | head -n2 | tr '\n' ' ')
  expect_eq "node $node store endpoint" "node1:$first" \
    "$(sed -n "s/^$node: .*\"rdzv_endpoint\": \"\([^\"]*\)\".*/\1/p" dry.out | head -n1)"
  expect_eq "node $node master port" "$second" \
    "$(sed -n "s/^$node: .*\"master_port\": \([0-9]*\).*/\1/p" dry.out | head -n1)"
done

note "a real 2-node run: MASTER_PORT is the second reserved port, the store listens on the first"
cat > worker.sh <<'EOS'
#!/bin/sh
first=$(echo "$SLURM_STEP_RESV_PORTS" | cut -d, -f1 | cut -d- -f1)
listening=none
[ "$RANK" = 0 ] && ss -Hltn "sport = :$first" | grep -q LISTEN && listening=yes
echo "rank=$RANK master_port=$MASTER_PORT resv=$SLURM_STEP_RESV_PORTS store_on_first=$listening"
EOS
chmod +x worker.sh
srun -N2 -w 'node[1-2]' --resv-ports=2 "$DDPRUN" --nproc-per-node 1 --no-python --no-prefix -- "$WORK/worker.sh" \
  > run.out 2> run.err || fail "srun -N2 --resv-ports=2 ddprun failed (exit $?)"
expect_eq "workers" 2 "$(grep -c '^rank=' run.out)"
resv=$(sed -n 's/^rank=0 .* resv=\([^ ]*\) .*/\1/p' run.out)
[[ -n $resv ]] || fail "rank 0 saw no SLURM_STEP_RESV_PORTS"
read -r first second < <(expand "$resv" | head -n2 | tr '\n' ' ')
expect_eq "MASTER_PORT of both ranks" "$second $second" \
  "$(sed -n 's/^rank=[01] master_port=\([0-9]*\) .*/\1/p' run.out | tr '\n' ' ' | sed 's/ $//')"
expect_eq "the store listens on the first reserved port ($first)" yes \
  "$(sed -n 's/^rank=0 .*store_on_first=\(.*\)/\1/p' run.out)"

note "explicit --master-port wins over the reserved port"
srun -N2 -w 'node[1-2]' --resv-ports=2 bash -c \
  '"$0" --dry-run --format json --nproc-per-node 1 --master-port 18888 --no-python -- true' "$DDPRUN" \
  > flag.out 2> flag.err || fail "the dry run with --master-port under --resv-ports failed"
expect_eq "master port with --master-port" "18888 18888" \
  "$(sed -n 's/.*"master_port": \([0-9]*\).*/\1/p' flag.out | tr '\n' ' ' | sed 's/ $//')"

pass
