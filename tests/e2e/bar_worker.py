# Workers whose output is progress without newlines (tests/e2e/test_bars.cpp, test_top.cpp). Modes:
#   bar S      a tqdm-style bar on stderr ("\rtrain:  42%|####      | 420/1000"), one step and a redraw every 0.05 s
#              for S seconds, or until $DIR/go exists when S is "go"; then the newline that ends it
#              and "done" on stdout
#   dots S     a dot on stdout every 0.1 s for S seconds, no newline; then " done" and the newline
#   tqdm S     a real tqdm bar (Debian's python3-tqdm) for S seconds; exits 77 without tqdm
import os
import sys
import time


def until(arg):
    if arg == "go":
        go = os.path.join(os.environ["DIR"], "go")
        end = time.monotonic() + 120
        return lambda: not os.path.exists(go) and time.monotonic() < end
    end = time.monotonic() + float(arg)
    return lambda: time.monotonic() < end


def bar(arg):
    going = until(arg)
    i = 0
    while going():
        i = min(i + 1, 1000)
        fill = i // 100
        sys.stderr.write(f"\rtrain: {i // 10:3d}%|{'#' * fill}{' ' * (10 - fill)}| {i}/1000")
        sys.stderr.flush()
        time.sleep(0.05)
    sys.stderr.write("\n")
    print("done")


def dots(arg):
    going = until(arg)
    while going():
        sys.stdout.write(".")
        sys.stdout.flush()
        time.sleep(0.1)
    print(" done")


def real_tqdm(arg):
    try:
        from tqdm import tqdm
    except ImportError:
        sys.exit(77)
    going = until(arg)
    with tqdm(total=1000, desc="train", mininterval=0.05) as t:
        while going():
            t.update(1)
            time.sleep(0.02)


if __name__ == "__main__":
    {"bar": bar, "dots": dots, "tqdm": real_tqdm}[sys.argv[1]](sys.argv[2])
