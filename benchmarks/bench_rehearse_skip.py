"""Wall time of a `sglwrap launch --rehearse` whose fingerprint passed before (a systemd restart): a fresh
interpreter each run, from its start until the exec'd server exits, against a plain `sglwrap launch` of the same
plan measured the same way, interleaved. The difference is what the skipped rehearsal costs (fingerprint + cache
lookup).

Target (issue 21): the skip path under 1 s, and well under 1 s more than the plain launch.
The server is the test stand-in (tests/fixtures/fakeserver/standin_sglang.py), which exits at once when started
without --load-format dummy, so only sglwrap's own work is timed. One rehearsal runs first to record the verdict.
Usage: python benchmarks/bench_rehearse_skip.py [-n 9]; prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FAKE = REPO / "tests" / "fixtures" / "fakeserver"
TARGET_S = 1.0


def once(env: dict[str, str], model: Path, rehearse: bool) -> tuple[float, int, str]:
    argv = [sys.executable, "-m", "sglwrap", "launch", *(["--rehearse"] if rehearse else []), "--",
            "--model-path", str(model), "--device", "cpu"]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    return time.perf_counter() - t0, proc.returncode, proc.stderr


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=9)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="sglwrap-bench-rehearse-") as tmp:
        model = Path(tmp) / "model"
        model.mkdir()
        (model / "config.json").write_text((REPO / "tests" / "fixtures" / "models" / "qwen3-0.6b.json").read_text())
        env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{FAKE}", "SGLWRAP_SERVER_MODULE": "standin_sglang",
               "STANDIN_MODE": "pass", "STANDIN_REAL_EXIT": "0", "XDG_CACHE_HOME": str(Path(tmp) / "cache")}
        first, rc, err = once(env, model, rehearse=True)
        if rc != 0 or "rehearse  PASS" not in err:
            sys.stderr.write(err)
            return 1
        skip, plain = [], []
        for _ in range(args.n):
            wall, rc, err = once(env, model, rehearse=True)
            if rc != 0 or "skipped, this fingerprint" not in err:
                sys.stderr.write(err)
                return 1
            skip.append(wall)
            plain.append(once(env, model, rehearse=False)[0])
    out = {"first_with_rehearsal_s": round(first, 3), "skip_median_s": round(statistics.median(skip), 3),
           "skip_max_s": round(max(skip), 3), "plain_launch_median_s": round(statistics.median(plain), 3),
           "skip_cost_s": round(statistics.median(skip) - statistics.median(plain), 3), "runs": args.n,
           "target_s": TARGET_S, "met": statistics.median(skip) < TARGET_S, "when": time.strftime("%Y-%m-%d")}
    sys.stdout.write(json.dumps(out) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
