"""The empirical terms of the budget, each with the ± of its fit, read from ``sglwrap/data/memory/fits.json``.

The file is written by ``python tools/gen_memory_fits.py`` from the corpus of real SGLang logs
(``tests/corpus/memory``); every entry names the cases it was fitted on. Fits and residuals:
``docs/memory-model.md``.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path
from typing import Any

from sglwrap.record import Record


FITS_PATH = Path(__file__).resolve().parent.parent / "data" / "memory" / "fits.json"
GIB = 1 << 30


def family(compute_capability: tuple[int, int] | None) -> str:
    """GPU family from the compute capability: the part of the overhead that moves with the architecture."""
    if compute_capability is None:
        return "unknown"
    return {(8, 0): "ampere-dc", (8, 6): "ampere", (8, 9): "ada", (9, 0): "hopper", (10, 0): "blackwell-dc",
            (12, 0): "blackwell-rtx", (12, 1): "blackwell-gb10"}.get(
                (int(compute_capability[0]), int(compute_capability[1])), "unknown")


def is_geforce(name: str | None) -> bool:
    """A consumer (GeForce) card: it may drive a desktop, whose memory the log cannot separate from the overhead."""
    return bool(name) and "GEFORCE" in str(name).upper()


class Term(Record):
    """One budget term: its value, the ± of its fit (bytes) and where both came from."""

    bytes: int
    pm: int
    source: str

    def __add__(self, other: Term) -> Term:
        return Term(self.bytes + other.bytes, rss(self.pm, other.pm), f"{self.source} + {other.source}")


def rss(*pms: float) -> int:
    """Root of the sum of squares: the ± of a sum of independent terms."""
    return int(math.sqrt(sum(float(p) ** 2 for p in pms)))


def exact(n: int, source: str) -> Term:
    """A term known exactly (given by the user, or a formula of SGLang's)."""
    return Term(int(n), 0, source)


@lru_cache(maxsize=1)
def load() -> dict[str, Any]:
    """The parsed fits file."""
    data: dict[str, Any] = json.loads(FITS_PATH.read_text(encoding="utf-8"))
    return data


def _gib(v: float) -> int:
    return int(float(v) * GIB)


def overhead(compute_capability: tuple[int, int] | None, total_bytes: int | None = None,
             gpu_name: str | None = None) -> Term:
    """Memory used before NCCL on an idle GPU (driver reserve + CUDA context + torch): the line over the card's
    memory when its size is known (a GeForce card's ± also covers a desktop's share), else the family's mean."""
    table = load()["overhead"]
    line = table.get("by_memory")
    if line and total_bytes:
        gib = total_bytes / GIB
        value = line["intercept_gib"] + line["per_gib"] * gib
        geforce = is_geforce(gpu_name)
        extra = float(line.get("geforce_extra_gib", 0.0)) if geforce else 0.0
        pm = line["pm_gib_geforce"] if geforce else line["pm_gib"]
        label = f" + GeForce {extra:.3f} (desktop/WSL share, mean of the GeForce cases)" if geforce else ""
        return Term(_gib(value + extra), _gib(pm),
                    f"fit: {line['intercept_gib']:.3f} + {line['per_gib']:.4f} x {gib:.1f} GiB{label}, "
                    f"{len(line['cases'])} case(s)")
    fam = family(compute_capability)
    entry = table.get(fam) or table["default"]
    label = fam if fam in table else f"default (no case for {fam})"
    n = len(entry["cases"]) if isinstance(entry["cases"], list) else "all"
    return Term(_gib(entry["gib"]), _gib(entry["pm_gib"]), f"fit: {label}, {n} case(s)")


def nccl_fixed(transport: str) -> Term:
    """NCCL/torch.distributed memory at init beyond the channel buffers, per transport ("nvlink" or "pcie")."""
    entry = load()["nccl"]["nvlink" if transport in ("nvlink", "nvswitch") else "pcie"]
    return Term(_gib(entry["fixed_gib"]), _gib(entry["pm_gib"]),
                f"fit: {transport} init beyond channels, {len(entry['cases'])} case(s)")


def decode_graphs(n_sizes: int) -> Term:
    """Decode CUDA-graph memory for ``n_sizes`` captured batch sizes (logged "Capture cuda graph end ... mem usage")."""
    g = load()["decode_graph"]
    if n_sizes <= 0:
        return exact(0, "decode graphs off")
    value = g["c0_gib"] + g["per_size_gib"] * n_sizes
    return Term(_gib(value), _gib(g["pm_gib"]),
                f"fit: {g['c0_gib']:.3f} + {g['per_size_gib']:.4f} GiB x {n_sizes} sizes, {len(g['cases'])} cases")


def weights_extra() -> Term:
    """What SGLang's "Load weight end ... mem usage" holds beyond the weights computed from the config."""
    w = load()["weights_extra"]
    return Term(_gib(w["gib"]), _gib(w["pm_gib"]), f"fit: non-parameter buffers, {len(w['cases'])} cases")
