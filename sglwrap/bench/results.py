"""From rank logs to results: statistics, nccl-tests bandwidths, the JSON document and the winner.

Per sample the slowest rank counts (a collective ends when the last rank ends), then ``latency_us`` is the median
over samples and ``latency_us_p90`` the 90th percentile (nearest rank). A sample is ``ops_per_sample``
back-to-back all-reduces (eager) or one replay of a captured graph of ``graph_ops`` all-reduces, divided by that
count. Bandwidth as nccl-tests reports it: ``alg_bw = bytes / time / 1e9`` (GB/s), all-reduce
``bus_bw = alg_bw * 2 (n - 1) / n``.

With ``--repeat N`` each configuration runs N times in fresh rank processes, interleaved with the others
(``aggregate_rows``): ``latency_us`` is then the median over the runs of each run's median, and
``latency_us_runs`` the run medians in run order (null for a run that did not finish). The winner is decided
by ``pick_winner`` with the rule of ``RULE_REPEAT`` (``paired_verdict``) instead of ``RULE_SINGLE``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

from sglwrap.bench.runner import ConfigRun
from sglwrap.bench.sizes import Size
from sglwrap.record import Record

TIE = 0.05  # the least noise margin: scores within 5% of the best count as equal; less NCCL memory wins then
CLEAR_MAJORITY = 0.75  # with --repeat: the share of interleaved pairs a candidate must win (rounded up)
RULE_SINGLE = ("one run each: geometric-mean latency ratio to the reference better by more than the reference's "
               "own p90/median spread (at least 5%); within that, the least NCCL memory wins, then the reference")
RULE_REPEAT = ("N interleaved runs each: a candidate beats the reference only if it is faster (geometric mean "
               "over the target sizes) in at least 3/4 of the interleaved pairs AND its median improvement is "
               "larger than the reference's across-run spread (p90/p10 of the reference's run medians, at least "
               "5%); among those that do, the fastest within that margin with the least NCCL memory wins. If none "
               "does, the reference stays unless one no slower than the margin uses less NCCL memory")


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


def aggregate_rows(runs: Sequence[Sequence[dict[str, Any]]], world: int) -> list[dict[str, Any]]:
    """One row per size and mode from the rows of N runs of one configuration (in run order; [] = not finished).

    ``latency_us`` is the median of the run medians, ``latency_us_runs`` the run medians (null where a run did
    not finish), ``latency_us_runs_p10``/``_p90`` their nearest-rank p10/p90 (the min and max for 10 runs or
    fewer); ``latency_us_p90`` is the median of the runs' p90s, ``nccl_mem_bytes`` the most any run took.
    """
    order: list[tuple[int, str]] = []
    by: dict[tuple[int, str], list[dict[str, Any] | None]] = {}
    for k, rows in enumerate(runs):
        for r in rows:
            key = (r["size_bytes"], r["mode"])
            if key not in by:
                order.append(key)
                by[key] = [None] * len(runs)
            by[key][k] = r
    out = []
    for key in order:
        per = by[key]
        got = [r for r in per if r is not None]
        meds = [r["latency_us"] for r in got]
        med = statistics.median(meds)
        mems = [r["nccl_mem_bytes"] for r in got if r.get("nccl_mem_bytes") is not None]
        alg = key[0] / (med * 1e-6) / 1e9 if med > 0 else 0.0
        row = dict(got[0])
        row.update({
            "latency_us": round(med, 3),
            "latency_us_p90": round(statistics.median(r["latency_us_p90"] for r in got), 3),
            "latency_us_min": min(r["latency_us_min"] for r in got),
            "latency_us_mean": round(statistics.fmean(r["latency_us_mean"] for r in got), 3),
            "alg_bw": float(f"{alg:.6g}"),
            "bus_bw": float(f"{alg * bus_factor(world):.6g}"),
            "nwrong": sum(r["nwrong"] for r in got),
            "samples": sum(r["samples"] for r in got),
            "nccl_mem_bytes": max(mems) if mems else None,
            "repeat": len(runs),
            "latency_us_runs": [None if r is None else r["latency_us"] for r in per],
            "latency_us_runs_p10": percentile(meds, 10),
            "latency_us_runs_p90": percentile(meds, 90),
        })
        out.append(row)
    return out


def not_measured(profile: Any) -> list[str]:
    """What of a profile bench-comm cannot exercise: it times torch.distributed (NCCL/gloo) all-reduce under the
    profile's environment, not SGLang's own communicators (custom all-reduce, PCIe-IPC, symmetric memory, fusion)
    nor its server settings."""
    out = [f"features.{k}: {v}" for k, v in sorted(profile.features.items()) if v != "auto"]
    out += [f"sglang.{k}: {v}" for k, v in sorted(profile.sglang.items())]
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
            "seq": ev.get("seq"),
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
        "not_measured": not_measured(run.config.profile),
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


class Winner(Record):
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
    repeat: int = 1  # runs per configuration; above 1 the rule is RULE_REPEAT
    pairs_won: tuple[tuple[str, int, int], ...] = ()  # (candidate, pairs faster than the reference, pairs)
    needed: int = 0  # pairs a candidate had to win

    @property
    def rule(self) -> str:
        return RULE_REPEAT if self.repeat > 1 else RULE_SINGLE


class PairedVerdict(Record):
    """A candidate against the reference over N interleaved runs (the ``RULE_REPEAT`` test)."""

    wins: int  # pairs (same repeat index) in which the candidate was faster
    pairs: int  # pairs in which both finished
    needed: int  # ceil(CLEAR_MAJORITY * pairs)
    ratio: float  # geometric mean over the targets of median-over-runs latency / the reference's
    spread: float  # the reference's across-run spread: geomean of p90/p10 of its run medians, minus 1
    margin: float  # max(TIE, spread)

    @property
    def improvement(self) -> float:
        return 1 - self.ratio

    @property
    def beats(self) -> bool:
        return self.pairs > 0 and self.wins >= self.needed and self.improvement > self.margin


def _geomean(xs: Sequence[float]) -> float:
    return math.exp(statistics.fmean(math.log(max(x, 1e-9)) for x in xs))


def needed_wins(pairs: int) -> int:
    """The clear majority of ``pairs``: at least 3/4 of them, rounded up (2 of 2, 3 of 3, 4 of 5, 8 of 10)."""
    return max(1, math.ceil(CLEAR_MAJORITY * pairs - 1e-9))


def run_spread(runs: Sequence[Sequence[float | None]]) -> float:
    """Across-run spread of ``runs[k][j]`` (run k, target j): geomean over j of p90/p10 of the run values, - 1."""
    cols = [[v for v in (r[j] for r in runs) if v is not None] for j in range(len(runs[0]))] if runs else []
    ratios = [percentile(c, 90) / max(percentile(c, 10), 1e-9) for c in cols if c]
    return _geomean(ratios) - 1 if ratios else 0.0


def paired_verdict(reference: Sequence[Sequence[float | None]], candidate: Sequence[Sequence[float | None]]
                   ) -> PairedVerdict:
    """Judge ``candidate`` against ``reference`` by ``RULE_REPEAT``; both indexed [run][target], None = no run.

    Run k of both were measured in the same round of the interleaved order, so they form a pair: the candidate
    wins it when its geometric-mean latency ratio over the targets is below 1.
    """
    wins = pairs = 0
    for r_opt, c_opt in zip(reference, candidate):
        r = [x for x in r_opt if x is not None]
        c = [x for x in c_opt if x is not None]
        if len(r) != len(r_opt) or len(c) != len(c_opt):
            continue
        pairs += 1
        wins += _geomean([ci / max(ri, 1e-9) for ri, ci in zip(r, c)]) < 1
    n = len(reference[0]) if reference else 0

    def med(runs: Sequence[Sequence[float | None]], j: int) -> float:
        vals = [v for v in (x[j] for x in runs) if v is not None]
        return statistics.median(vals) if vals else math.inf

    ratio = _geomean([med(candidate, j) / max(med(reference, j), 1e-9) for j in range(n)]) if n else math.inf
    spread = run_spread(reference)
    return PairedVerdict(wins=wins, pairs=pairs, needed=needed_wins(pairs), ratio=ratio, spread=spread,
                         margin=max(TIE, spread))


def pick_winner(results: Sequence[dict[str, Any]], order: Sequence[str], targets: Sequence[int]) -> Winner | None:
    """The configuration to recommend for ``targets``, judged against the first one (the reference).

    Score: geometric mean over the target sizes of median latency / the reference's. Graph mode decides when it
    was measured (SGLang decodes in graphs), else eager. Only configurations with a result at every target size
    compete. With one run per configuration (``RULE_SINGLE``): scores within the noise of the best one
    (``margin``: the reference's own p90/median spread, at least ``TIE``) count as equal; among equals the one
    with the least NCCL device memory wins, then the reference, then the lower score. So a setting has to be
    faster by more than the noise to win on speed, and one that is as fast within the noise but uses less memory
    wins on memory. With repeated runs (rows carrying ``latency_us_runs``) ``RULE_REPEAT`` decides instead.
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
    repeat = max(int(table[n][t].get("repeat", 1)) for n in complete for t in targets)

    def score(name: str) -> float:
        return _geomean([table[name][t]["latency_us"] / max(table[ref][t]["latency_us"], 1e-9) for t in targets])

    def mem(name: str) -> float:
        vals = [table[name][t].get("nccl_mem_bytes") for t in targets]
        known = [v for v in vals if v is not None]
        return max(known) if known else math.inf

    scores = {n: score(n) for n in complete}
    pairs_won: tuple[tuple[str, int, int], ...] = ()
    needed = 0
    if repeat > 1:
        def runs(name: str) -> list[list[float | None]]:
            cols = [table[name][t].get("latency_us_runs") or [table[name][t]["latency_us"]] for t in targets]
            return [[c[k] if k < len(c) else None for c in cols] for k in range(max(len(c) for c in cols))]

        verdicts = {n: paired_verdict(runs(ref), runs(n)) for n in complete[1:]}
        margin = max(TIE, run_spread(runs(ref)))
        pairs_won = tuple((n, v.wins, v.pairs) for n, v in verdicts.items())
        needed = max((v.needed for v in verdicts.values()), default=0)
        faster = [n for n in complete[1:] if verdicts[n].beats]
        if faster:
            best = min(scores[n] for n in faster)
            equal = [n for n in faster if scores[n] <= best * (1 + margin)]
        else:
            equal = [n for n in complete if scores[n] <= 1 + margin]
    else:
        spread = _geomean([table[ref][t]["latency_us_p90"] / max(table[ref][t]["latency_us"], 1e-9)
                           for t in targets])
        margin = max(TIE, spread - 1)
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
        margin=round(margin, 4), equal=tuple(equal), repeat=repeat, pairs_won=pairs_won, needed=needed,
    )


def winner_doc(w: Winner | None) -> dict[str, Any] | None:
    if w is None:
        return None
    return {"name": w.name, "mode": w.mode, "score": w.score, "reference": w.reference, "sizes": list(w.sizes),
            "latency_us": {str(k): v for k, v in w.latency_us.items()},
            "reference_latency_us": {str(k): v for k, v in w.reference_us.items()},
            "nccl_mem_bytes": w.nccl_mem_bytes, "reference_nccl_mem_bytes": w.reference_mem_bytes,
            "margin": w.margin, "equal_within_noise": list(w.equal), "repeat": w.repeat, "rule": w.rule,
            "pairs_won": {n: [k, p] for n, k, p in w.pairs_won}, "pairs_needed": w.needed}


def winner_from_doc(w: dict[str, Any]) -> Winner:
    """The inverse of ``winner_doc`` (for --write-profile)."""
    return Winner(name=w["name"], mode=w["mode"], score=w["score"], reference=w["reference"],
                  sizes=tuple(int(s) for s in w["sizes"]),
                  latency_us={int(k): v for k, v in w["latency_us"].items()},
                  reference_us={int(k): v for k, v in w["reference_latency_us"].items()},
                  nccl_mem_bytes=w["nccl_mem_bytes"], reference_mem_bytes=w["reference_nccl_mem_bytes"],
                  margin=w.get("margin", TIE), equal=tuple(w.get("equal_within_noise", ())),
                  repeat=int(w.get("repeat", 1)),
                  pairs_won=tuple((n, int(k), int(p)) for n, (k, p) in w.get("pairs_won", {}).items()),
                  needed=int(w.get("pairs_needed", 0)))
