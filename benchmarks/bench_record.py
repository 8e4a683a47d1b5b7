"""What a value class costs: defining one (paid at import, every run) and building an instance, for
``sglwrap.record.Record`` against ``@dataclass(frozen=True)``, on classes of 3, 12 and 50 fields (sglwrap's classes
range from 1 to 52 fields).

Why it matters: the ~60 classes a preflight imports were about 40 ms of a 140 ms run as dataclasses (issue 23).
Usage: python benchmarks/bench_record.py [-n 200]; prints one JSON object, times in microseconds (median of n).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sglwrap.record import Record  # noqa: E402


def _namespace(n: int) -> dict[str, Any]:
    ns: dict[str, Any] = {"__annotations__": {f"f{i}": "int" for i in range(n)}, "__module__": __name__}
    ns.update({f"f{i}": 0 for i in range(n // 2, n)})  # half with defaults, as sglwrap's classes have
    return ns


def _define(kind: str, n: int) -> type:
    if kind == "record":
        return type("C", (Record,), _namespace(n))
    return dataclasses.dataclass(frozen=True)(type("C", (), _namespace(n)))


def _median_us(fn: Any, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return round(statistics.median(times) * 1e6, 2)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=200)
    runs = ap.parse_args().n
    out: dict[str, Any] = {"bench": "record", "python": sys.version.split()[0], "unit": "us", "runs": runs}
    for n in (3, 12, 50):
        args = {f"f{i}": i for i in range(n // 2)}
        for kind in ("dataclass", "record"):
            cls = _define(kind, n)
            out[f"define_{kind}_{n}"] = _median_us(lambda k=kind, m=n: _define(k, m), runs)
            out[f"build_{kind}_{n}"] = round(_median_us(lambda c=cls, a=args: [c(**a) for _ in range(100)], runs) / 100, 2)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
