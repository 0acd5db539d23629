# A worker written for torch.distributed.launch, started by it or by ddprun: it parses its local rank from
# the argument the launcher inserts (either spelling) and records its arguments and environment in
# $DIR/$LAUNCHER.<RANK>.json, for the test to compare what the two launchers gave it.
import argparse
import json
import os
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", "--local-rank", type=int, default=-1)
parser.add_argument("--lr", type=float, default=1.0)
args = parser.parse_args()
record = {"argv": sys.argv[1:], "env": dict(os.environ), "parsed_local_rank": args.local_rank}
path = os.path.join(os.environ["DIR"], "%s.%s.json" % (os.environ["LAUNCHER"], os.environ["RANK"]))
with open(path + ".tmp", "w") as f:
    json.dump(record, f)
os.rename(path + ".tmp", path)
