"""Wall time of `sglwrap preflight --json` (a fresh interpreter each run): the first run, then warm-cache runs.

Target (issue 3): warm runs under 0.3 s. Usage: python benchmarks/bench_preflight.py [-n 7] [-- preflight args]
Prints one JSON object; the first run's stack-probe cost comes from preflight's own "timing".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET_S = 0.3


def once(args: list[str]) -> tuple[float, int, dict[str, object]]:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "sglwrap", "preflight", "--json", *args], capture_output=True,
                          text=True, env=env, check=False)
    wall = time.perf_counter() - t0
    try:
        timing = json.loads(proc.stdout).get("timing", {})
    except ValueError:
        timing = {"error": proc.stderr[-300:]}
    return wall, proc.returncode, timing


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-n", type=int, default=7, help="warm runs after the first")
    argv = sys.argv[1:]
    rest: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, rest = argv[:cut], argv[cut + 1:]
    opts = ap.parse_args(argv)
    first = once(rest)
    warm = [once(rest) for _ in range(opts.n)]
    walls = [w for w, _, _ in warm]
    out = {
        "python": sys.executable,
        "args": rest,
        "first_run_s": round(first[0], 3),
        "first_run_timing": first[2],
        "exit_code": first[1],
        "warm_runs_s": [round(w, 3) for w in walls],
        "warm_median_s": round(statistics.median(walls), 3),
        "warm_min_s": round(min(walls), 3),
        "warm_timing": warm[-1][2],
        "target_s": TARGET_S,
        "meets_target": statistics.median(walls) < TARGET_S,
    }
    print(json.dumps(out, indent=1))
    return 0 if out["meets_target"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
