"""Benchmark (not a test): generate a 1 GiB SGLang log in a temp dir and time ``sglwrap diagnose`` on it.

Prints wall seconds and peak RSS of the diagnose process. Usage: python benchmarks/bench_diagnose.py [GiB]
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STARTUP = (ROOT / "tests" / "fixtures" / "logs" / "v0.4.8_docker_tp4_mla_ok.log").read_bytes()
NOISE_LINES = (
    b"[2025-06-20 09:10:00 TP0] Decode batch. #running-req: 37, #token: 51200, token usage: 0.05, "
    b"cuda graph: True, gen throughput (token/s): 2512.33, #queue-req: 0\n",
    b"[2025-06-20 09:10:00 TP0] Prefill batch. #new-seq: 1, #new-token: 812, #cached-token: 64, "
    b"token usage: 0.05, #running-req: 36, #queue-req: 0\n",
    b'[2025-06-20 09:10:00] INFO:     127.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n',
)


def generate(path: Path, size: int) -> None:
    """Write a startup log followed by serving noise until ``size`` bytes."""
    block = b"".join(NOISE_LINES) * 20000
    with path.open("wb") as fh:
        fh.write(STARTUP)
        while fh.tell() < size:
            fh.write(block)


def main() -> int:
    gib = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "big.log"
        generate(log, int(gib * (1 << 30)))
        size = log.stat().st_size
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "sglwrap", "diagnose", "--json", str(log)], env=env,
                              capture_output=True, text=True)
        secs = time.perf_counter() - t0
        peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    ok = proc.returncode == 0 and '"outcome": "ok"' in proc.stdout
    print(f"log {size / (1 << 30):.2f} GiB  diagnose {secs:.2f} s  ({size / secs / (1 << 20):.0f} MiB/s)  "
          f"peak RSS {peak_kib / 1024:.1f} MiB  exit {proc.returncode}  outcome ok: {ok}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
