#!/usr/bin/env bash
# --log-format json under srun (issue 35, item 19): srun forwards a line longer than about 1 KiB in pieces
# among the other tasks' lines, so docs/agent.md sends whoever parses the events to one stream per agent.
# That way out keeps every event whole: `srun -e FILE-%t`, and in a batch script whose ddprun starts srun
# itself, SLURM_STDERRMODE=FILE-%t. Each node's events are long here (a root cause with 20 stderr lines of
# 200 bytes: failure_report, teardown, remote_abort well above 1 KiB) and written while the other node writes.
source "$(dirname "$0")/lib.sh"
setup
need_ddprun

cat > worker.sh <<'EOW'
#!/bin/sh
# Rank 1 fails with 20 long stderr lines once rank 0 runs; rank 0 waits to be torn down.
touch "$WORK/up_$RANK"
if [ "$RANK" = 1 ]; then
  for i in $(seq 1 3000); do [ -e "$WORK/up_0" ] && break; sleep 0.01; done
  for i in $(seq 1 20); do printf 'line %02d %0200d\n' "$i" 0 >&2; done
  exit 3
fi
exec sleep 120
EOW

# Every line of each agent's file that ddprun wrote is a whole JSON event; some are longer than 1 KiB.
check_events() { # label files...
  local label=$1
  shift
  "$PYTHON" - "$label" "$@" <<'EOP' || fail "$label: events not whole (above)"
import json, sys
label, files = sys.argv[1], sys.argv[2:]
long = 0
for path in files:
    names = set()
    for line in open(path, encoding="utf-8", errors="replace"):
        if not line.startswith("{"):
            continue
        e = json.loads(line)  # a cut event does not parse
        names.add(e["event"])
        long += len(line) > 1024
    assert {"failure_report", "job_finished"} <= names, f"{path}: events {sorted(names)}"
assert long >= 2, f"{label}: no event above 1 KiB"
print(f"{label}: {len(files)} files, {long} events above 1 KiB, all whole")
EOP
}

note "srun -e events-%t.jsonl ddprun --log-format json: one whole stream per agent"
cat > job.sh <<EOJ
#!/bin/bash
export WORK="$WORK"
srun --ntasks-per-node=1 -e "$WORK/events-%t.jsonl" "$DDPRUN" --log-format json --nproc-per-node 1 \
  --term-timeout 3 -- sh "$WORK/worker.sh"
echo "srun exited \$?"
EOJ
j=$(submit -N2 -o job.out job.sh)
st=$(wait_job "$j" 180) || fail "job $j did not end (state $st)"
grep -q 'srun exited 3' job.out || fail "srun did not exit 3"
check_events "srun -e" events-0.jsonl events-1.jsonl

note "a batch script's self-launch with SLURM_STDERRMODE=self-%t.jsonl"
rm -f up_*
cat > self.sh <<EOJ
#!/bin/bash
export WORK="$WORK"
export SLURM_STDERRMODE="$WORK/self-%t.jsonl"
"$DDPRUN" --log-format json --nproc-per-node 1 --term-timeout 3 -- sh "$WORK/worker.sh"
echo "ddprun exited \$?"
EOJ
j=$(submit -N2 -o self.out self.sh)
st=$(wait_job "$j" 180) || fail "job $j did not end (state $st)"
grep -q 'ddprun exited 3' self.out || fail "the self-launched ddprun did not exit 3"
check_events "self-launch" self-0.jsonl self-1.jsonl
pass
