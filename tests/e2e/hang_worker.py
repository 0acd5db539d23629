# Workers for the hang tests (tests/e2e/test_hang.cpp). Modes:
#   stuck      rank 1 sleeps forever in stuck_in_distinctive_function, the others wait for it
#              silently (as ranks blocked in a collective do)
#   collective the same in a real gloo process group: the others are blocked in an all_reduce that
#              rank 1 never joins
#   stuck_chatty  rank 1 sleeps forever in stuck_in_distinctive_function, the others keep printing a
#              line every 0.2 s (only rank 1's node finds a hang)
#   chatty S   prints a line every 0.2 s for S seconds, then exits 0
#   heartbeat S  prints nothing, touches $DDPRUN_HEARTBEAT_FILE every 0.2 s for S seconds, exits 0
# chatty and heartbeat write their DDPRUN_HEARTBEAT_FILE's path to $DIR/heartbeat_path_<rank>.
import os
import subprocess
import sys
import threading
import time


def stuck_in_distinctive_function():
    while True:
        time.sleep(3600)


def wait_for_peer():
    threading.Event().wait()


def wait_for_peer_in_all_reduce(dist, torch):
    dist.all_reduce(torch.ones(1))


def meet_peers():
    """Imports torch and joins the gloo group. That is silent and can outlast the hang timeout on a
    loaded machine, so a helper touches the heartbeat file meanwhile; the silence the test wants
    starts when it is stopped."""
    me = os.getpid()
    beat = subprocess.Popen(["/bin/sh", "-c", 'while kill -0 "$1" 2>/dev/null; do touch "$2"; sleep 0.2; done',
                             "beat", str(me), os.environ["DDPRUN_HEARTBEAT_FILE"]])
    import torch
    import torch.distributed as dist
    dist.init_process_group("gloo")
    dist.barrier()
    beat.kill()
    beat.wait()
    return dist, torch


def main():
    mode = sys.argv[1]
    rank = int(os.environ["RANK"])
    if mode == "stuck":
        if rank == 1:
            stuck_in_distinctive_function()
        wait_for_peer()
    if mode == "collective":
        dist, torch = meet_peers()
        if rank == 1:
            stuck_in_distinctive_function()
        wait_for_peer_in_all_reduce(dist, torch)
    if mode == "stuck_chatty":
        if rank == 1:
            stuck_in_distinctive_function()
        while True:
            print(f"rank {rank} still working", flush=True)
            time.sleep(0.2)
    beat = os.environ.get("DDPRUN_HEARTBEAT_FILE", "")
    with open(os.path.join(os.environ["DIR"], f"heartbeat_path_{rank}"), "w") as f:
        f.write(beat)
    end = time.monotonic() + float(sys.argv[2])
    while time.monotonic() < end:
        if mode == "chatty":
            print(f"rank {rank} still working", flush=True)
        else:
            os.utime(beat)
        time.sleep(0.2)


if __name__ == "__main__":
    main()
