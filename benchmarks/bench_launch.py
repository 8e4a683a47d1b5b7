"""Wall time of `sglwrap launch --dry-run --json` (a fresh interpreter each run, warm caches): what sglwrap adds
before SGLang starts. Prints one JSON object. Usage: python benchmarks/bench_launch.py [-n 7]

No target is set by an issue; the number is reported so a change that slows the launch path shows up.
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
ARGS = ["launch", "--dry-run", "--json", "--assume", "8xRTX-PRO-6000", "--profile", "fewchan", "--",
        "--model-path", str(REPO / "sglwrap" / "data" / "models" / "Llama-3.1-8B"), "--tp-size", "8"]


def once() -> float:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "sglwrap", *ARGS], capture_output=True, text=True, env=env,
                          check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"launch --dry-run failed ({proc.returncode}): {proc.stderr[-500:]}")
    return wall


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-n", type=int, default=7, help="warm runs after the first")
    n = ap.parse_args().n
    first = once()
    warm = [once() for _ in range(n)]
    print(json.dumps({"benchmark": "launch --dry-run --json (preflight + memory + files)", "first_s": round(first, 3),
                      "warm_median_s": round(statistics.median(warm), 3), "warm_max_s": round(max(warm), 3),
                      "runs": n}))


if __name__ == "__main__":
    main()
