#!/usr/bin/env bash
# The GPU check: runs on a GPU machine (one or more NVIDIA GPUs, PyTorch 2.x with CUDA installed, nothing to download)
# and prints one line per check: PASS, FAIL or SKIP, with what was seen. The logs of every check go to
# $OUT/gpu-check (or build-gpu-check/ without $OUT). Exit 0 when nothing failed.
#
#   scripts/gpu-check.sh [KIT]     KIT: made by scripts/gpu-kit.sh on the build machine (default build-gpu-kit)
#
# The kit carries ddprun and ddprun-train (built against the same torch version as this machine's), the shared
# libraries a bare image lacks, and Fashion-MNIST. Checks (docs/benchmarks.md, "On a GPU"):
#   env            what the machine has: GPUs, driver, torch, CPUs and NUMA nodes
#   gpus           --nproc-per-node gpu finds every GPU, each worker sees them, --gpus-per-proc 1 slices them
#   train-nccl     ddprun-train on NCCL (one rank per GPU) trains Fashion-MNIST to the CPU run's accuracy
#   train-mp       the same with --model-parallel (head and tail on the process's GPUs)
#   python-ddp     a torch DDP worker on NCCL (init_process_group with device_id) launched by ddprun
#   hang-kernel    --hang-timeout on ranks stuck in a CUDA kernel: their stacks in the report, exit 124
#   hang-nccl      the same with ranks stuck inside NCCL's all_reduce (needs 2 GPUs)
#   cpu-bind-gpu   --cpu-bind gpu against the machine's PCI topology: each worker's CPUs are those local to its GPU
# Without a GPU (the build machine) the GPU checks print SKIP and the CPU reference run still runs.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
KIT=$(realpath -m "${1:-build-gpu-kit}")
LOGS=${OUT:-$ROOT/build-gpu-check}/gpu-check
PY=${PYTHON:-python3}
rm -rf "$LOGS"
mkdir -p "$LOGS"
failed=0
result() {  # result NAME PASS|FAIL|SKIP TEXT
  printf '%-4s %-13s %s\n' "$2" "$1" "$3" | tee -a "$LOGS/summary.txt"
  [ "$2" = FAIL ] && failed=1
  return 0
}
# Runs a command with a deadline, its output in $LOGS/NAME.log; prints its exit code.
run_logged() {  # run_logged NAME SECONDS CMD...
  local name=$1 secs=$2
  shift 2
  timeout -k 5 "$secs" "$@" >"$LOGS/$name.log" 2>&1
  echo $?
}

DDPRUN=$KIT/bin/ddprun
TRAIN=$KIT/bin/ddprun-train
for f in "$DDPRUN" "$KIT/manifest.txt"; do
  if [ ! -e "$f" ]; then
    result kit FAIL "missing $f: make the kit with scripts/gpu-kit.sh on the build machine and carry it"
    exit 1
  fi
done

# --- env ---------------------------------------------------------------------------------------------------------
if ! "$PY" -c 'import torch' 2>"$LOGS/python.log"; then
  result env FAIL "$PY cannot import torch ($(tail -1 "$LOGS/python.log")); set PYTHON"
  exit 1
fi
"$PY" - >"$LOGS/env.txt" 2>&1 <<'EOF'
import glob, os, torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(),
      "devices", torch.cuda.device_count())
for i in range(torch.cuda.device_count()):
    print("device", i, torch.cuda.get_device_name(i))
print("nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else None)
EOF
{
  echo "kit:"; cat "$KIT/manifest.txt"
  echo "nvidia-smi:"; nvidia-smi --query-gpu=index,name,pci.bus_id,driver_version,memory.total --format=csv 2>&1
  echo "/dev:"; ls /dev | grep -E '^nvidia' | tr '\n' ' '; echo
  echo "CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES-<unset>} NVIDIA_VISIBLE_DEVICES=${NVIDIA_VISIBLE_DEVICES-<unset>}"
  echo "cpus: $(nproc) allowed $(grep Cpus_allowed_list /proc/self/status | cut -f2)"
  for n in /sys/devices/system/node/node[0-9]*; do [ -e "$n" ] && echo "$(basename "$n"): $(cat "$n/cpulist")"; done
  # What --cpu-bind gpu and the GPU count are read from: the NVIDIA PCI functions and their NUMA nodes, the driver's
  # view, and the device nodes this container may open.
  echo "NVIDIA PCI functions (sysfs):"
  for d in /sys/bus/pci/devices/*; do
    [ "$(cat "$d/vendor" 2>/dev/null)" = 0x10de ] && case $(cat "$d/class") in 0x03*)
      echo "  $(basename "$d") class $(cat "$d/class") numa_node $(cat "$d/numa_node" 2>/dev/null) local_cpulist $(cat "$d/local_cpulist" 2>/dev/null)" ;;
    esac
  done
  echo "driver's GPUs:"; grep -H -E 'Device Minor|Bus Location' /proc/driver/nvidia/gpus/*/information 2>&1 | sed 's/^/  /'
  echo "nvidia-smi topo:"; nvidia-smi topo -m 2>&1 | sed 's/^/  /'
  echo "glibc: $(ldd --version 2>&1 | head -1)"
  echo "os: $(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-unknown}")"
} >>"$LOGS/env.txt" 2>&1
torch_version=$("$PY" -c 'import torch; print(torch.__version__)')
ngpu=$("$PY" -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)')
kit_torch=$(sed -n 's/^torch: //p' "$KIT/manifest.txt")
if ! "$DDPRUN" --version >"$LOGS/ddprun-version.log" 2>&1; then
  result env FAIL "the kit's ddprun does not run here: $(tail -1 "$LOGS/ddprun-version.log")"
  exit 1
fi
result env PASS "$ngpu GPU(s) [$("$PY" -c 'import torch; print(torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")')], torch $torch_version, $(nproc) CPUs, $(ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null | wc -l) NUMA node(s); $LOGS/env.txt"

# The trainer links this machine's libtorch: it runs only where torch is the version the kit was built against.
TORCH_LIBS=$("$PY" - <<'EOF'
import glob, os, torch
site = os.path.dirname(os.path.dirname(torch.__file__))
dirs = [os.path.join(os.path.dirname(torch.__file__), "lib")]
dirs += sorted({os.path.dirname(p) for p in glob.glob(os.path.join(site, "nvidia", "**", "lib*.so*"), recursive=True)})
print(":".join(dirs))
EOF
)
train_ok=1
if [ ! -x "$TRAIN" ]; then
  train_ok=0
  train_why="the kit has no ddprun-train"
elif [ "$kit_torch" != "$torch_version" ]; then
  train_ok=0
  train_why="the kit's trainer was built against torch $kit_torch, this machine has $torch_version"
fi
# Train one epoch of the MLP on Fashion-MNIST: world size = ranks; prints the final test accuracy (or nothing).
train_run() {  # train_run NAME DDPRUN_ARGS... -- TRAINER_ARGS...
  local name=$1
  shift
  local dargs=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do dargs+=("$1"); shift; done
  shift
  local rc
  rc=$(run_logged "$name" 300 "$DDPRUN" "${dargs[@]}" --no-python -- env LD_LIBRARY_PATH="$TORCH_LIBS" \
    "$TRAIN" --model mlp --epochs 1 --seed 1 --data-dir "$KIT/data" --metrics-file "$LOGS/$name.metrics" "$@")
  echo "$rc $(sed -n 's/.*"test_accuracy":\([0-9.]*\).*/\1/p' "$LOGS/$name.metrics" 2>/dev/null | tail -1)"
}
close() { "$PY" -c 'import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if abs(a - b) <= 0.015 else 1)' "$1" "$2"; }

# --- the CPU reference run (also what the build machine checks) ----------------------------------------------------
cpu_acc=""
if [ $train_ok = 1 ]; then
  # An empty CUDA_VISIBLE_DEVICES hides the GPUs from ddprun and from the worker: the trainer must stay on the CPU.
  read -r rc cpu_acc < <(CUDA_VISIBLE_DEVICES= train_run train-cpu --nproc-per-node 1 -- --backend gloo)
  if [ "$rc" = 0 ] && [ -n "$cpu_acc" ] && ! grep -q 'head on cuda' "$LOGS/train-cpu.log"; then
    result train-cpu PASS "gloo on the CPU, 1 rank: test accuracy $cpu_acc"
  else
    result train-cpu FAIL "exit $rc, accuracy '${cpu_acc}'$(grep -q 'head on cuda' "$LOGS/train-cpu.log" && echo ", ran on the GPU"); $LOGS/train-cpu.log"
    cpu_acc=""
  fi
else
  result train-cpu FAIL "$train_why"
fi

if [ "$ngpu" = 0 ]; then
  for c in gpus train-nccl train-mp python-ddp hang-kernel hang-nccl cpu-bind-gpu; do result "$c" SKIP "no GPU here"; done
  exit $failed
fi

# --- gpus ---------------------------------------------------------------------------------------------------------
# Each worker reports what CUDA shows it; with --gpus-per-proc 1 each sees exactly one device, all of them distinct.
cat >"$LOGS/show_gpus.py" <<'EOF'
import os, torch
n = torch.cuda.device_count()
ok = n > 0 and torch.ones(1, device="cuda").item() == 1.0
print("LOCAL_RANK=%s CUDA_VISIBLE_DEVICES=%s devices=%d usable=%s" % (os.environ["LOCAL_RANK"], os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"), n, ok), flush=True)
EOF
rc_all=$(run_logged gpus-all 120 "$DDPRUN" --nproc-per-node gpu --python "$PY" "$LOGS/show_gpus.py")
rc_one=$(run_logged gpus-one 120 "$DDPRUN" --nproc-per-node gpu --gpus-per-proc 1 --python "$PY" "$LOGS/show_gpus.py")
workers_all=$(grep -c 'usable=True' "$LOGS/gpus-all.log")
workers_one=$(grep -c "devices=1 usable=True" "$LOGS/gpus-one.log")
distinct_one=$(grep -o 'CUDA_VISIBLE_DEVICES=[^ ]*' "$LOGS/gpus-one.log" | sort -u | wc -l)
seen=$(grep -o 'CUDA_VISIBLE_DEVICES=[^ ]*' "$LOGS/gpus-one.log" | sed 's/.*=//' | sort | tr '\n' ' ')
if [ "$rc_all" = 0 ] && [ "$rc_one" = 0 ] && [ "$workers_all" = "$ngpu" ] && [ "$workers_one" = "$ngpu" ] &&
  [ "$distinct_one" = "$ngpu" ]; then
  result gpus PASS "--nproc-per-node gpu: $workers_all worker(s), each sees all $ngpu GPU(s); --gpus-per-proc 1: CUDA_VISIBLE_DEVICES $seen"
else
  result gpus FAIL "exit $rc_all/$rc_one, $workers_all and $workers_one of $ngpu workers saw their GPU(s) (CUDA_VISIBLE_DEVICES $seen); $LOGS/gpus-*.log"
fi

# --- train-nccl, train-mp -------------------------------------------------------------------------------------------
if [ $train_ok = 0 ]; then
  result train-nccl FAIL "$train_why"
  result train-mp FAIL "$train_why"
else
  # NCCL_DEBUG=INFO: NCCL's own "Init COMPLETE" line shows that the communicator was made (one rank a GPU).
  read -r rc acc < <(NCCL_DEBUG=INFO train_run train-nccl --nproc-per-node gpu --gpus-per-proc 1 -- --backend nccl)
  if [ "$rc" = 0 ] && [ -n "$acc" ] && [ -n "$cpu_acc" ] && close "$acc" "$cpu_acc" &&
    grep -q 'backend nccl, head on cuda' "$LOGS/train-nccl.log" && grep -q 'Init COMPLETE' "$LOGS/train-nccl.log"; then
    result train-nccl PASS "NCCL $(grep -o 'NCCL version [0-9.+a-z]*' "$LOGS/train-nccl.log" | head -1 | cut -d' ' -f3), $ngpu rank(s), one GPU each, communicator made: test accuracy $acc (CPU $cpu_acc)"
  else
    result train-nccl FAIL "exit $rc, accuracy '$acc' against the CPU's '$cpu_acc'; $LOGS/train-nccl.log"
  fi
  read -r rc acc < <(train_run train-mp --nproc-per-node 1 -- --backend nccl --model-parallel)
  if [ "$rc" = 0 ] && [ -n "$acc" ] && [ -n "$cpu_acc" ] && close "$acc" "$cpu_acc" &&
    grep -q 'backend nccl, head on cuda:0, tail on cuda' "$LOGS/train-mp.log"; then
    result train-mp PASS "--model-parallel on NCCL ($(grep -o 'head on [^"]*' "$LOGS/train-mp.log" | head -1)): test accuracy $acc"
  else
    result train-mp FAIL "exit $rc, accuracy '$acc' against the CPU's '$cpu_acc'; $LOGS/train-mp.log"
  fi
fi

# --- python-ddp -----------------------------------------------------------------------------------------------------
mkdir -p "$LOGS/ddp"
rc=$(DIR=$LOGS/ddp run_logged python-ddp 180 "$DDPRUN" --nproc-per-node gpu --python "$PY" tests/gpu/ddp_nccl.py)
got=$(cat "$LOGS"/ddp/ddp_*.txt 2>/dev/null | wc -l)
if [ "$rc" = 0 ] && [ "$got" = "$ngpu" ]; then
  result python-ddp PASS "torch $torch_version DDP on NCCL, $ngpu rank(s): $(head -1 "$LOGS/ddp/ddp_0.txt")"
else
  result python-ddp FAIL "exit $rc, $got of $ngpu ranks finished; $LOGS/python-ddp.log"
fi

# --- hang-kernel, hang-nccl -------------------------------------------------------------------------------------------
hang_check() {  # hang_check NAME MODE RANKS FUNCTION...
  local name=$1 mode=$2 n=$3
  shift 3
  mkdir -p "$LOGS/$name"
  local rc
  rc=$(DIR=$LOGS/$name run_logged "$name" 180 "$DDPRUN" --nproc-per-node "$n" --gpus-per-proc 1 --hang-timeout 8 \
    --term-timeout 5 --python "$PY" tests/gpu/gpu_hang.py "$mode")
  local missing=""
  for fn in "$@"; do grep -q "$fn" "$LOGS/$name.log" || missing+=" $fn"; done
  if [ "$rc" = 124 ] && [ -z "$missing" ]; then
    result "$name" PASS "exit 124; the report shows$(printf ' %s' "$@") ($(grep -c 'File ' "$LOGS/$name.log") Python frames)"
  else
    result "$name" FAIL "exit $rc (want 124)${missing:+, stack lacks$missing}; $LOGS/$name.log"
  fi
}
hang_check hang-kernel kernel 1 stuck_in_cuda_kernel
if [ "$ngpu" -ge 2 ]; then
  hang_check hang-nccl nccl 2 stuck_before_allreduce stuck_in_nccl_allreduce
else
  result hang-nccl SKIP "needs 2 GPUs, this machine has $ngpu"
fi

# --- cpu-bind-gpu ---------------------------------------------------------------------------------------------------
# Expected, from sysfs and nvidia-smi (not hwloc): the CPUs local to each GPU's PCI device, within our own affinity.
rc=$(run_logged cpu-bind-gpu 120 "$DDPRUN" --cpu-bind gpu --nproc-per-node gpu --gpus-per-proc 1 --no-python -- \
  sh -c 'echo "bind CVD=$CUDA_VISIBLE_DEVICES $(grep Cpus_allowed_list /proc/self/status | cut -f2)"')
"$PY" - "$LOGS/cpu-bind-gpu.log" >"$LOGS/cpu-bind-gpu.verdict" 2>&1 <<'EOF'
import os, re, subprocess, sys
def cpus(text):
    out = set()
    for part in text.strip().split(","):
        if part:
            lo, _, hi = part.partition("-")
            out.update(range(int(lo), int(hi or lo) + 1))
    return out
def fmt(s):
    s, runs = sorted(s), []
    for c in s:
        if runs and c == runs[-1][1] + 1: runs[-1][1] = c
        else: runs.append([c, c])
    return ",".join(f"{a}-{b}" if a != b else str(a) for a, b in runs)
own = os.sched_getaffinity(0)
smi = subprocess.run(["nvidia-smi", "--query-gpu=index,pci.bus_id", "--format=csv,noheader"], capture_output=True, text=True).stdout
bus = {}
for line in smi.splitlines():
    idx, b = [x.strip() for x in line.split(",")]
    dom, rest = b.split(":", 1)
    bus[idx] = f"{int(dom, 16):04x}:{rest}".lower()
ok, lines = True, []
for m in re.finditer(r"bind CVD=(\S+) (\S+)", open(sys.argv[1]).read()):
    gpu, got = m.group(1), cpus(m.group(2))
    dev = f"/sys/bus/pci/devices/{bus.get(gpu, '?')}"
    node = open(f"{dev}/numa_node").read().strip() if os.path.exists(f"{dev}/numa_node") else "?"
    local = cpus(open(f"{dev}/local_cpulist").read()) if os.path.exists(f"{dev}/local_cpulist") else set(own)
    want = (local & own) or own
    good = got == want
    ok &= good
    lines.append(f"GPU {gpu} ({bus.get(gpu, '?')}, NUMA node {node}): worker CPUs {fmt(got)}, local to the GPU {fmt(want)}"
                 + ("" if good else " MISMATCH"))
print("; ".join(lines) if lines else "no worker reported")
sys.exit(0 if ok and lines else 1)
EOF
vrc=$?
if [ "$rc" = 0 ] && [ $vrc = 0 ]; then
  result cpu-bind-gpu PASS "$(cat "$LOGS/cpu-bind-gpu.verdict")"
else
  result cpu-bind-gpu FAIL "exit $rc: $(tail -1 "$LOGS/cpu-bind-gpu.verdict"); $LOGS/cpu-bind-gpu.log"
fi
exit $failed
