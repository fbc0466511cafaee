"""Writes its argv (and rank) to $ARGV_DUMP_DIR/argv<RANK>.json and exits with $EXIT_CODE."""

import json
import os
import sys

rank = os.environ.get("RANK", "0")
with open(os.path.join(os.environ["ARGV_DUMP_DIR"], f"argv{rank}.json"), "w") as fh:
    json.dump({"argv": sys.argv[1:], "rank": rank, "pythonpath": os.environ.get("PYTHONPATH", "")}, fh)
print(f"argv_dump rank {rank}: {len(sys.argv) - 1} args", flush=True)
os.write(2, b"written straight to fd 2 by rank " + rank.encode() + b"\n")
sys.exit(int(os.environ.get("EXIT_CODE", "0")))
