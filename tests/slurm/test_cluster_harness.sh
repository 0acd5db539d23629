#!/usr/bin/env bash
# cluster.sh itself: a second cluster in another state dir runs beside the first, and stop leaves nothing behind.
source "$(dirname "$0")/lib.sh"
[[ $EUID == 0 ]] || skip "the local Slurm cluster needs root"
command -v slurmctld >/dev/null || [[ -x /usr/sbin/slurmctld ]] || skip "slurm-wlm is not installed"

second=$(mktemp -d /tmp/ddprun-slurm-harness.XXXXXX)
rmdir "$second"
marks=$(mktemp -d /tmp/ddprun-slurm-harness-marks.XXXXXX)
trap 'DDPRUN_SLURM_DIR=$second "$CLUSTER_SH" stop >/dev/null 2>&1 || true; rm -rf "$marks"' EXIT

DDPRUN_SLURM_DIR=$second "$CLUSTER_SH" start 2 --gpus 2 || fail "start 2 in $second failed"
conf=$second/etc/slurm.conf
expect_eq "second cluster hostnames" "node1 node2" "$(SLURM_CONF=$conf srun -N2 hostname | sort | tr '\n' ' ' | sed 's/ $//')"
# A task left running must not survive stop.
SLURM_CONF=$conf sbatch -N2 -o /dev/null --wrap "srun bash -c 'echo up >> $marks/up; exec sleep 600'" >/dev/null \
  || fail "sbatch in second cluster failed"
deadline=$((SECONDS + 30))
until [[ $(grep -c up "$marks/up" 2>/dev/null) == 2 ]]; do
  (( SECONDS < deadline )) || fail "the sleep tasks did not start"
  sleep 0.2
done
ns=$(cat "$second/run/namespaces")
DDPRUN_SLURM_DIR=$second "$CLUSTER_SH" stop || fail "stop failed"
[[ ! -e $second ]] || fail "stop left the state dir $second"
left=""
for d in /proc/[0-9]*; do
  n=$(readlink "$d/ns/uts" 2>/dev/null) || continue
  grep -qxF "$n" <<<"$ns" && left+=" ${d#/proc/}"
done
[[ -z $left ]] || fail "processes left after stop:$left"
note "ok: stop left no process in the cluster's namespaces"
DDPRUN_SLURM_DIR=$second "$CLUSTER_SH" stop || fail "a second stop is not a no-op"
note "ok: stop is idempotent"

# The fixture's cluster is untouched.
if [[ -n ${DDPRUN_SLURM_DIR:-} && -e $DDPRUN_SLURM_DIR/etc/slurm.conf ]]; then
  expect_eq "first cluster still answers" "node1" "$(SLURM_CONF=$DDPRUN_SLURM_DIR/etc/slurm.conf srun -N1 -w node1 hostname)"
fi

# stop refuses a directory it did not create.
notours=$(mktemp -d /tmp/ddprun-slurm-notours.XXXXXX)
if DDPRUN_SLURM_DIR=$notours "$CLUSTER_SH" stop 2>/dev/null; then rm -rf "$notours"; fail "stop accepted a dir without the marker"; fi
[[ -d $notours ]] || fail "stop removed a dir it does not own"
rmdir "$notours"
note "ok: stop refuses a foreign dir"
pass
