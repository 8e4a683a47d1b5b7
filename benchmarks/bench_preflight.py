"""Wall time of `sglwrap preflight --json` (a fresh interpreter each run): the first run, then warm-cache runs,
against a bare start of the same interpreter (`python -c pass`) measured the same way, interleaved.

Target (issue 11): the warm median at most 4x a bare interpreter start here, and at most 0.2 s live on an H200.
Usage: python benchmarks/bench_preflight.py [-n 7] [-- preflight args, e.g. --assume 8xH200]
Prints one JSON object; the first run's stack-probe cost comes from preflight's own "timing". The import profile
(`-X importtime`, top 12 modules by cumulative time) says where a warm run goes.

sglwrap's modules are byte-compiled first (as `pip install` does), so an interpreter run with
PYTHONDONTWRITEBYTECODE does not pay for compiling them on every start. A run planned with `--assume` is replayed
from the run memo (`sglwrap/runmemo.py`) once warm; the same runs with `SGLWRAP_MEMO=0` are timed too
(`warm_no_memo_*`), so the figure without the memo is always beside the one with it.
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
TARGET_S = 0.2
TARGET_RATIO = 4.0


def once(args: list[str], memo: bool = True) -> tuple[float, int, dict[str, object]]:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    if not memo:
        env["SGLWRAP_MEMO"] = "0"
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "sglwrap", "preflight", "--json", *args], capture_output=True,
                          text=True, env=env, check=False)
    wall = time.perf_counter() - t0
    try:
        timing = json.loads(proc.stdout).get("timing", {})
    except ValueError:
        timing = {"error": proc.stderr[-300:]}
    return wall, proc.returncode, timing


def bare_start() -> float:
    """One `python -c pass` of the same interpreter."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=False)
    return time.perf_counter() - t0


def import_profile(args: list[str]) -> list[tuple[str, float]]:
    """The modules with the largest cumulative import time in one warm run without the memo (seconds)."""
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "SGLWRAP_MEMO": "0"}
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "sglwrap", "preflight", "--json", *args],
                          capture_output=True, text=True, env=env, check=False)
    rows: list[tuple[str, float]] = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        parts = [p.strip() for p in line.split("|")]
        try:
            rows.append((parts[2], int(parts[1]) / 1e6))
        except (IndexError, ValueError):
            continue
    return sorted(rows, key=lambda r: -r[1])[:12]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-n", type=int, default=7, help="warm runs after the first")
    argv = sys.argv[1:]
    rest: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, rest = argv[:cut], argv[cut + 1:]
    opts = ap.parse_args(argv)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(REPO / "sglwrap")], check=False,
                   capture_output=True)
    first = once(rest)
    for _ in range(2):  # cold runs fill caches; the memo keeps the first warm one
        once(rest)
    warm, bare, plain = [], [], []
    for _ in range(opts.n):
        warm.append(once(rest))
        bare.append(bare_start())
        plain.append(once(rest, memo=False)[0])
    walls = [w for w, _, _ in warm]
    bare_median = statistics.median(bare)
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
        "warm_replayed": bool((warm[-1][2].get("memo") or {}).get("replayed")) if isinstance(warm[-1][2], dict)
        else False,
        "warm_no_memo_median_s": round(statistics.median(plain), 3),
        "warm_no_memo_ratio_to_bare_start": round(statistics.median(plain) / bare_median, 2),
        "bare_start_median_s": round(bare_median, 3),
        "ratio_to_bare_start": round(statistics.median(walls) / bare_median, 2),
        "target_ratio": TARGET_RATIO,
        "meets_ratio": statistics.median(walls) <= TARGET_RATIO * bare_median,
        "target_live_h200_s": TARGET_S,
        "import_profile_top": [{"module": m, "cumulative_s": round(t, 3)} for m, t in import_profile(rest)],
    }
    print(json.dumps(out, indent=1))
    return 0 if out["meets_ratio"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
