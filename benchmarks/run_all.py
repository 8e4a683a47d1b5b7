"""`make bench`: run every CPU benchmark and print their JSON lines. GPU measurements live in benchmarks/gpu/ and
`sglwrap bench-comm` (see docs/benchmarks.md and docs/verified-on-h200.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RUNS = (
    ["bench_preflight.py", "--", "--assume", "8xRTX-PRO-6000", "--", "--tp-size", "8"],
    ["bench_launch.py"],
    ["bench_diagnose.py", "1"],
    ["bench_rehearse_skip.py"],
)


def main() -> int:
    worst = 0
    for cmd in RUNS:
        print(f"# {' '.join(cmd)}", flush=True)
        rc = subprocess.run([sys.executable, str(HERE / cmd[0]), *cmd[1:]], check=False).returncode
        worst = max(worst, rc)
    return worst


if __name__ == "__main__":
    raise SystemExit(main())
