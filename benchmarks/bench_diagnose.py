"""Benchmark (not a test): time ``sglwrap diagnose`` on generated logs and compare with ``grep -E`` on the same file.

Two logs, written to a temp dir:
- serving noise: one real-format startup, then SGLang's serving lines (Decode/Prefill batch, access log) up to SIZE;
- startup-dense: a crash loop, the real captured launch in tests/fixtures/logs/real_sglang-0.5.23_cpu_fewchan.log
  (112 lines, ends in an error) repeated up to SIZE/4, as a crash-looping journal would hold it.
Prints, per log: wall seconds and MB/s of the diagnose process, its CPU seconds (user+sys, what a busy machine does
not inflate as much), peak RSS, and grep -E's wall seconds on the same file.
Usage: python benchmarks/bench_diagnose.py [GiB of serving noise, default 1]
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STARTUP = (ROOT / "tests" / "fixtures" / "logs" / "v0.4.8_docker_tp4_mla_ok.log").read_bytes()
CRASH = (ROOT / "tests" / "fixtures" / "logs" / "real_sglang-0.5.23_cpu_fewchan.log").read_bytes()
NOISE_LINES = (
    b"[2025-06-20 09:10:00 TP0] Decode batch. #running-req: 37, #token: 51200, token usage: 0.05, "
    b"cuda graph: True, gen throughput (token/s): 2512.33, #queue-req: 0\n",
    b"[2025-06-20 09:10:00 TP0] Prefill batch. #new-seq: 1, #new-token: 812, #cached-token: 64, "
    b"token usage: 0.05, #running-req: 36, #queue-req: 0\n",
    b'[2025-06-20 09:10:00] INFO:     127.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n',
)
GREP = r"mem|KV Cache|Capture|max_total|fired up|Error|xception|Traceback|server_args"


def generate(path: Path, size: int, head: bytes, block: bytes) -> None:
    """Write ``head`` then ``block`` repeated until ``size`` bytes."""
    with path.open("wb") as fh:
        fh.write(head)
        while fh.tell() < size:
            fh.write(block)


def _child_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def measure(log: Path, want: str) -> str:
    """One line of figures for ``log``; ``want`` is the outcome diagnose must report."""
    size = log.stat().st_size
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cpu0 = _child_cpu()
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "sglwrap", "diagnose", "--json", str(log)], env=env,
                          capture_output=True, text=True)
    secs = time.perf_counter() - t0
    cpu = _child_cpu() - cpu0
    peak_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    grep = shutil.which("grep")
    g_secs = float("nan")
    if grep:
        t0 = time.perf_counter()
        subprocess.run([grep, "-cE", GREP, str(log)], capture_output=True)
        g_secs = time.perf_counter() - t0
    ok = f'"outcome": "{want}"' in proc.stdout
    mb = size / 1e6
    return (f"{log.name}: {size / (1 << 20):.0f} MiB  diagnose {secs:.2f} s wall ({mb / secs:.0f} MB/s), "
            f"{cpu:.2f} s CPU ({mb / cpu:.0f} MB/s)  peak RSS {peak_kib / 1024:.0f} MiB  grep -E {g_secs:.2f} s "
            f"({secs / g_secs:.0f}x)  outcome {want}: {ok}")


def main() -> int:
    gib = float(sys.argv[1]) if len(sys.argv) > 1 else 1.0
    size = int(gib * (1 << 30))
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        noise = Path(tmp) / "serving-noise.log"
        generate(noise, size, STARTUP, b"".join(NOISE_LINES) * 20000)
        line = measure(noise, "ok")
        print(line)
        ok &= line.endswith("True")
        noise.unlink()
        dense = Path(tmp) / "startup-dense.log"
        generate(dense, size // 4, b"", CRASH)
        line = measure(dense, "error")
        print(line)
        ok &= line.endswith("True")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
