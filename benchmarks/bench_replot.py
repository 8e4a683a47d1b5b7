"""Re-draw a bench-comm PNG from its JSON, optionally for some configurations only.

python benchmarks/bench_replot.py docs/data/bench_h200x2.json docs/bench_h200x2.png [NAME ...]
(The PNG is never written over an existing file: NAME.png.0 ... then, as bench-comm --plot does.)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from sglwrap.bench.plot import write_plot


def main(argv: list[str]) -> int:
    src, dst, *names = argv
    doc = json.loads(Path(src).read_text())
    if names:
        doc["results"] = [r for r in doc["results"] if r["profile"] in names]
    print(write_plot(doc, Path(dst)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
