# A worker whose main is decorated with torch's @record, as torchrun users write it. RANK 1 raises in
# a function with a distinctive name; the others wait to be torn down.
import os
import time

from torch.distributed.elastic.multiprocessing.errors import record


def load_shard_distinctive_frame():
    raise ValueError("distinctive-message")


@record
def main():
    if os.environ["RANK"] == "1":
        load_shard_distinctive_frame()
    time.sleep(120)


if __name__ == "__main__":
    main()
