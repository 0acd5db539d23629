# A worker that writes its own TORCHELASTIC_ERROR_FILE and exits 1; argv[1] says what it writes:
# malformed (not JSON), huge (a valid record over ddprun's read cap), long (a valid record with a
# traceback far over the report's 16 KB).
import json
import os
import sys

kind = sys.argv[1]
path = os.environ["TORCHELASTIC_ERROR_FILE"]
with open(path, "w") as f:
    if kind == "malformed":
        f.write('{"message": {"message": "ValueError: cut short')
    elif kind == "huge":
        tb = "".join('  File "w.py", line %d, in frame_%d\n' % (i, i) for i in range(200000))
        json.dump({"message": {"message": "ValueError: huge", "extraInfo": {"py_callstack": tb, "timestamp": "1"}}}, f)
    else:
        tb = "".join('  File "w.py", line %d, in frame_%d\n' % (i, i) for i in range(5000))
        tb += '  File "w.py", line 1, in innermost_long_frame\n'
        json.dump({"message": {"message": "ValueError: long", "extraInfo": {"py_callstack": tb, "timestamp": "1"}}}, f)
sys.exit(1)
