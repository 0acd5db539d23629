# A worker written for torch.distributed.launch: it reads its local rank from --local_rank (argparse),
# not from LOCAL_RANK. Writes what it parsed to $DIR/parsed_<RANK>.txt: "<local_rank> <LOCAL_RANK> <lr>".
import argparse
import os

parser = argparse.ArgumentParser()
parser.add_argument("--local_rank", "--local-rank", type=int, default=0)
parser.add_argument("--lr", type=float, default=1.0)
args = parser.parse_args()
path = os.path.join(os.environ["DIR"], "parsed_%s.txt" % os.environ["RANK"])
with open(path, "w") as f:
    f.write("%d %s %g\n" % (args.local_rank, os.environ["LOCAL_RANK"], args.lr))
