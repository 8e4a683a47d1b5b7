"""Wall time of `sglwrap preflight --json` (a fresh interpreter each run) on the path users take: the argv changes
between runs (a different `--port` each time), against a bare start of the same interpreter (`python -c pass`)
measured the same way, interleaved.

Target (issue 23): the warm median at most 4x a bare interpreter start here, also with SGLang installed for the
interpreter (what every real user has), and at most 0.2 s live on an H200.
Usage: python benchmarks/bench_preflight.py [-n 7] [-- preflight args, e.g. --assume 8xH200 -- --model-path M]
Prints one JSON object; the first run's stack-probe cost comes from preflight's own "timing". The import profile
(`-X importtime`, top 12 modules by cumulative time) says where a warm run goes.

With the target release installed, `sglang-selfcheck` (SGLang's own checks in a CPU child) is measured too: its
cold cost (`preflight --deep` on a command line it has not seen: a `--max-running-requests` no earlier run used)
and its warm cost (`--deep` again with another `--port`: the kept result answers, no child starts).

sglwrap's modules are byte-compiled first (as `pip install` does), so an interpreter run with
PYTHONDONTWRITEBYTECODE does not pay for compiling them on every start.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGET_S = 0.2
TARGET_RATIO = 4.0


def with_port(args: list[str], port: int, *extra: str) -> list[str]:
    """``args`` with SGLang's ``--port`` (and ``extra``) appended to the SGLang part (after ``--``)."""
    return [*args, *([] if "--" in args else ["--"]), "--port", str(port), *extra]


def once(args: list[str], *own: str) -> tuple[float, int, dict[str, object]]:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "sglwrap", "preflight", "--json", *own, *args],
                          capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - t0
    try:
        out = json.loads(proc.stdout)
        timing = dict(out.get("timing", {}))
        timing["selfcheck"] = next((c["status"] for c in out.get("checks", []) if c["id"] == "sglang-selfcheck"),
                                   None)
    except ValueError:
        timing = {"error": proc.stderr[-300:]}
    return wall, proc.returncode, timing


def bare_start() -> float:
    """One `python -c pass` of the same interpreter."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=False)
    return time.perf_counter() - t0


def import_profile(args: list[str]) -> list[tuple[str, float]]:
    """The modules with the largest cumulative import time in one warm run (seconds)."""
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
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


def selfcheck_cost(args: list[str], n: int) -> dict[str, object]:
    """Cold and warm cost of ``preflight --deep`` (sglang-selfcheck), on a command line no earlier run used."""
    fresh = str(random.randint(1000, 9999))  # a --max-running-requests no kept result answers for
    cold = once(with_port(args, 32000, "--max-running-requests", fresh), "--deep")
    warm = [once(with_port(args, 32001 + i, "--max-running-requests", fresh), "--deep")[0] for i in range(n)]
    return {"cold_s": round(cold[0], 3), "cold_status": cold[2].get("selfcheck"),
            "warm_deep_median_s": round(statistics.median(warm), 3),
            "warm_deep_runs_s": [round(w, 3) for w in warm]}


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
    load_before = [round(x, 2) for x in os.getloadavg()]
    first = once(with_port(rest, 30000))
    once(with_port(rest, 30001))  # a cold run fills caches; the warm runs below change --port each time
    warm, bare = [], []
    for i in range(opts.n):
        warm.append(once(with_port(rest, 30100 + i)))
        bare.append(bare_start())
    walls = [w for w, _, _ in warm]
    bare_median = statistics.median(bare)
    sglang = first[2].get("sglang") if isinstance(first[2].get("sglang"), dict) else {}
    installed = isinstance(sglang, dict) and sglang.get("source") == "installed"
    out = {
        "python": sys.executable,
        "load_avg_1_5_15": {"before": load_before, "after": [round(x, 2) for x in os.getloadavg()]},
        "args": rest,
        "argv_changes": "--port differs on every run",
        "sglang": sglang,
        "first_run_s": round(first[0], 3),
        "first_run_timing": first[2],
        "exit_code": first[1],
        "warm_runs_s": [round(w, 3) for w in walls],
        "warm_median_s": round(statistics.median(walls), 3),
        "warm_min_s": round(min(walls), 3),
        "warm_timing": warm[-1][2],
        "bare_start_median_s": round(bare_median, 3),
        "bare_start_min_s": round(min(bare), 3),
        "ratio_to_bare_start": round(statistics.median(walls) / bare_median, 2),
        "ratio_of_minima": round(min(walls) / min(bare), 2),  # less sensitive to a shared, loaded machine
        "target_ratio": TARGET_RATIO,
        "meets_ratio": statistics.median(walls) <= TARGET_RATIO * bare_median,
        "target_live_h200_s": TARGET_S,
        "selfcheck": selfcheck_cost(rest, 3) if installed else "the target release is not installed: not run",
        "import_profile_top": [{"module": m, "cumulative_s": round(t, 3)}
                               for m, t in import_profile(with_port(rest, 30099))],
    }
    print(json.dumps(out, indent=1))
    return 0 if out["meets_ratio"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
