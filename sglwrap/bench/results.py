"""From rank logs to results: statistics, nccl-tests bandwidths, the JSON document and the winner.

Per sample the slowest rank counts (a collective ends when the last rank ends), then ``latency_us`` is the median
over samples and ``latency_us_p90`` the 90th percentile (nearest rank). A sample is ``ops_per_sample``
back-to-back all-reduces (eager) or one replay of a captured graph of ``graph_ops`` all-reduces, divided by that
count. Bandwidth as nccl-tests reports it: ``alg_bw = bytes / time / 1e9`` (GB/s), all-reduce
``bus_bw = alg_bw * 2 (n - 1) / n``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sglwrap.bench.runner import ConfigRun
from sglwrap.bench.sizes import Size

TIE = 0.05  # the least noise margin: scores within 5% of the best count as equal; less NCCL memory wins then


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty sequence."""
    s = sorted(values)
    k = max(1, math.ceil(q / 100 * len(s)))
    return s[min(k, len(s)) - 1]


def bus_factor(world: int) -> float:
    """nccl-tests' all-reduce bus-bandwidth factor 2(n-1)/n."""
    return 2 * (world - 1) / world if world > 0 else 0.0


def _mem(run: ConfigRun) -> dict[str, int] | None:
    stages: dict[str, int] = {}
    for lg in run.ranks:
        mem = (lg.result or {}).get("mem")
        if not mem:
            continue
        for k, v in mem.items():
            stages[k] = max(stages.get(k, 0), int(v))
    return stages or None


def rows_for(run: ConfigRun, sizes: Sequence[Size], world: int) -> list[dict[str, Any]]:
    """The result rows of one configuration (empty unless every rank reported)."""
    if run.status != "ok":
        return []
    labels = {s.nbytes: s.label for s in sizes}
    mem = _mem(run)
    results = [lg.result for lg in run.ranks if lg.result]
    dtype = results[0].get("dtype")
    out = []
    for i, row0 in enumerate(results[0]["rows"]):
        per_rank = [r["rows"][i]["samples_us"] for r in results]
        n = min(len(x) for x in per_rank)
        samples = [max(x[j] for x in per_rank) for j in range(n)]
        med = statistics.median(samples)
        size = int(row0["size_bytes"])
        alg = size / (med * 1e-6) / 1e9 if med > 0 else 0.0
        mode = row0["mode"]
        nccl_mem = None
        if mem is not None:
            nccl_mem = mem.get("graph") if mode == "graph" else mem.get("after_eager", mem.get("first_collective"))
        out.append({
            "profile": run.config.name,
            "base": run.config.base,
            "kind": run.config.kind,
            "size_bytes": size,
            "count": int(row0["count"]),
            "type": dtype,
            "mode": mode,
            "latency_us": round(med, 3),
            "latency_us_p90": round(percentile(samples, 90), 3),
            "latency_us_min": round(min(samples), 3),
            "latency_us_mean": round(statistics.fmean(samples), 3),
            "alg_bw": float(f"{alg:.6g}"),
            "bus_bw": float(f"{alg * bus_factor(world):.6g}"),
            "nwrong": sum(int(r["rows"][i].get("nwrong", 0)) for r in results),
            "samples": n,
            "ops_per_sample": int(row0.get("ops_per_sample", 1)),
            "graph_ops": row0.get("graph_ops"),
            "nccl_mem_bytes": nccl_mem,
            "label": labels.get(size, ""),
        })
    return out


def config_doc(run: ConfigRun) -> dict[str, Any]:
    """The per-configuration record in the JSON document (environment proof per rank, memory, status)."""
    info = next(((lg.result or {}).get("info") for lg in run.ranks if lg.result), None) or {}
    ranks = []
    for lg in run.ranks:
        ev = lg.env_event or {}
        ranks.append({
            "rank": lg.rank,
            "pid": ev.get("pid"),
            "env": ev.get("env"),
            "injector": ev.get("injector"),
            "safety": ev.get("safety"),
            "worker_env": lg.worker_env,
            "returncode": lg.returncode,
            "device": (lg.result or {}).get("info", {}).get("device"),
            "pci_bus_id": (lg.result or {}).get("info", {}).get("pci_bus_id"),
            "tail": lg.tail[-12:] if run.status != "ok" else [],
        })
    return {
        "name": run.config.name,
        "kind": run.config.kind,
        "base": run.config.base,
        "hash": run.config.profile.hash,
        "overrides": run.config.overrides,
        "env": {k: v.value for k, v in sorted(run.config.profile.env.items())},
        "env_set": run.env_set,
        "warnings": run.warnings,
        "sitecustomize": run.sitecustomize,
        "status": run.status,
        "error": run.error,
        "wall_s": round(run.wall_s, 2),
        "nccl_mem_bytes": _mem(run),
        "context_bytes": info.get("context_bytes"),
        "nccl_version": info.get("nccl_version"),
        "torch_version": info.get("torch_version"),
        "ranks": ranks,
    }


@dataclass(frozen=True)
class Winner:
    """The best configuration for the target sizes, with the numbers that made it win."""

    name: str
    mode: str
    score: float  # geometric mean of latency / the reference configuration's latency over the target sizes
    reference: str
    sizes: tuple[int, ...]
    latency_us: dict[int, float]
    reference_us: dict[int, float]
    nccl_mem_bytes: int | None
    reference_mem_bytes: int | None
    margin: float = TIE  # scores within this fraction of the best counted as equal (noise)
    equal: tuple[str, ...] = ()  # the configurations that were equal within the noise


def pick_winner(results: Sequence[dict[str, Any]], order: Sequence[str], targets: Sequence[int]) -> Winner | None:
    """The configuration to recommend for ``targets``, judged against the first one (the reference).

    Score: geometric mean over the target sizes of median latency / the reference's. Graph mode decides when it
    was measured (SGLang decodes in graphs), else eager. Only configurations with a result at every target size
    compete. Scores within the noise of the best one (``margin``: the reference's own p90/median spread, at
    least ``TIE``) count as equal; among equals the one with the least NCCL device memory wins, then the
    reference, then the lower score. So a setting has to be faster by more than the noise to win on speed, and
    one that is as fast within the noise but uses less memory wins on memory.
    """
    modes = {r["mode"] for r in results}
    mode = "graph" if "graph" in modes else "eager"
    table: dict[str, dict[int, dict[str, Any]]] = {}
    for r in results:
        if r["mode"] == mode:
            table.setdefault(r["profile"], {})[r["size_bytes"]] = r
    complete = [n for n in order if n in table and all(t in table[n] for t in targets)]
    if not complete or not targets:
        return None
    ref = complete[0]

    def geomean(xs: Sequence[float]) -> float:
        return math.exp(statistics.fmean(math.log(max(x, 1e-9)) for x in xs))

    def score(name: str) -> float:
        return geomean([table[name][t]["latency_us"] / max(table[ref][t]["latency_us"], 1e-9) for t in targets])

    def mem(name: str) -> float:
        vals = [table[name][t].get("nccl_mem_bytes") for t in targets]
        known = [v for v in vals if v is not None]
        return max(known) if known else math.inf

    spread = geomean([table[ref][t]["latency_us_p90"] / max(table[ref][t]["latency_us"], 1e-9) for t in targets])
    margin = max(TIE, spread - 1)
    scores = {n: score(n) for n in complete}
    best = min(scores.values())
    equal = [n for n in complete if scores[n] <= best * (1 + margin)]
    win = min(equal, key=lambda n: (mem(n), n != ref, scores[n], complete.index(n)))
    wmem, rmem = mem(win), mem(ref)
    return Winner(
        name=win, mode=mode, score=round(scores[win], 4), reference=ref, sizes=tuple(targets),
        latency_us={t: table[win][t]["latency_us"] for t in targets},
        reference_us={t: table[ref][t]["latency_us"] for t in targets},
        nccl_mem_bytes=None if wmem == math.inf else int(wmem),
        reference_mem_bytes=None if rmem == math.inf else int(rmem),
        margin=round(margin, 4), equal=tuple(equal),
    )


def winner_doc(w: Winner | None) -> dict[str, Any] | None:
    if w is None:
        return None
    return {"name": w.name, "mode": w.mode, "score": w.score, "reference": w.reference, "sizes": list(w.sizes),
            "latency_us": {str(k): v for k, v in w.latency_us.items()},
            "reference_latency_us": {str(k): v for k, v in w.reference_us.items()},
            "nccl_mem_bytes": w.nccl_mem_bytes, "reference_nccl_mem_bytes": w.reference_mem_bytes,
            "margin": w.margin, "equal_within_noise": list(w.equal)}
