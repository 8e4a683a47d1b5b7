"""Fit the accountant's empirical terms on the corpus of real SGLang logs: ``sglwrap/data/memory/fits.json``.

Maintainer tool: never imported by sglwrap at run time. Run from the checkout (offline: the corpus is in the
repository, so CI runs the check)::

    python tools/gen_memory_fits.py [CORPUS]            # rewrite fits.json (CORPUS: default tests/corpus/memory)
    python tools/gen_memory_fits.py --check [CORPUS]    # fits.json is the fit of the corpus, byte for byte (exit 1: not)

It reads every case's ``truth:`` (numbers copied from the log) and writes, for each term, the value, its ± (the
largest absolute residual of the cases it was fitted on, never below a floor) and the ids of those cases.
``sglwrap.memory.fits`` reads the file at run time; nothing here runs when sglwrap plans.

Terms (all GiB per rank):

- ``overhead``: memory used before NCCL on an otherwise idle GPU (driver reserve + CUDA context + torch):
  ``total - avail_before_weights - init_dist_mem``, per GPU family (compute capability), and ``by_memory``: a
  line ``a + b x total GiB`` over the data-centre/workstation cards (the driver's reserve grows with the card);
  GeForce cards add the mean of their residuals (a desktop or WSL may hold memory too), with their own ±.
- ``nccl_fixed``: what NCCL/torch distributed init costs beyond the channel buffers the model of
  ``sglwrap.memory.nccl`` computes for the default environment, per transport (NVLink/NVSwitch vs PCIe).
- ``decode_graph``: the logged "Capture cuda graph end ... mem usage" as ``c0 + c1 x captured batch sizes``, on
  launches without speculative decoding; ``spec_graph``: what the target's graphs of a speculative launch (verify
  graphs, draft tokens per request > 1) hold beyond that line.
- ``weights_extra``: what "Load weight end ... mem usage" holds beyond the weights computed from the config.
- ``verify_graph_legacy``: the relative residual of the source model of SGLang < 0.4.4's verify graphs
  (``sglwrap.memory.extras.verify_graph_bytes``) against speculative launches whose log shows the target's capture
  between its "Memory pool end" and the draft's "Load weight begin".
- ``prefill_graph``: the logged "Capture target prefill CUDA graph end ... mem usage" per captured token size.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

if not __package__:  # run as a script: the checkout's sglwrap, the one whose data this writes
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sglwrap.memory.fits import FITS_PATH, family, is_geforce  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tests" / "corpus" / "memory"
GENERATED_BY = "python tools/gen_memory_fits.py"

GIB = float(1 << 30)
MIB = float(1 << 20)
# measured here, with its script: docs/data/h200_context_graph_probe.py (driver reserve + context, torch 2.11)
H200_PROBE = "docs/data/h200_context_graph_run1.json"
# measured here: shared/data/nccl_sweep_h200x2.json, cumem0_default (SGLang's NCCL_CUMEM_ENABLE=0), 2 ranks NVLink
H200X2_NCCL_INIT_MIB = 994.0
FLOOR = {"overhead": 0.15, "nccl_fixed": 0.10, "decode_graph": 0.10, "weights_extra": 0.05}


def _cases(corpus: Path) -> list[dict[str, Any]]:
    import yaml

    return [yaml.safe_load(p.read_text(encoding="utf-8")) for p in sorted(corpus.glob("*.yaml"))]


def _gpu(case: Mapping[str, Any]) -> Any:
    from sglwrap.host.catalogue import CATALOGUE

    key = (case.get("gpu") or {}).get("catalogue")
    return CATALOGUE.get(str(key).upper()) if key else None


def _p_before(truth: Mapping[str, Any]) -> float | None:
    p = truth.get("avail_before_weights_gb")
    if p is None:
        p = truth.get("avail_before_weights_gb_derived")
    return None if p is None else float(p)


def _spread(values: Iterable[float], mean: float, floor: float) -> float:
    return round(max([floor] + [abs(v - mean) for v in values]), 3)


def _channel_part_gib(interconnect: str, ranks: int) -> float:
    """NCCL's channel buffers for SGLang's default environment (the model of sglwrap.memory.nccl)."""
    from sglwrap.memory.nccl import NcclSettings, comm_cost

    cost = comm_cost(NcclSettings.from_env({}, p2p_possible=True), ranks=ranks, interconnect=interconnect)
    return cost.per_comm_bytes / GIB


def fit_overhead(cases: list[dict[str, Any]], repo: Path) -> dict[str, Any]:
    """Overhead before NCCL per family, from every case with the free memory before weights on a known GPU."""
    points: dict[str, list[tuple[str, float]]] = {}
    for c in cases:
        gpu, truth = _gpu(c), c.get("truth") or {}
        p = _p_before(truth)
        init = truth.get("init_dist_mem_gb")
        count = (c.get("gpu") or {}).get("count") or 1
        if gpu is None or p is None or (init is None and count > 1 and "avail_before_torch_init_gb" not in truth):
            continue
        value = gpu.memory_mib / 1024 - p - float(init or 0.0)
        points.setdefault(family(gpu.compute_capability), []).append((c["id"], round(value, 3)))
    for c in cases:  # the old log format prints the free memory before torch.distributed init
        gpu, truth = _gpu(c), c.get("truth") or {}
        if gpu is not None and truth.get("avail_before_torch_init_gb") is not None:
            value = gpu.memory_mib / 1024 - float(truth["avail_before_torch_init_gb"])
            points.setdefault(family(gpu.compute_capability), []).append((c["id"], round(value, 3)))
    probe = repo / H200_PROBE
    if probe.is_file():
        d = json.loads(probe.read_text(encoding="utf-8"))
        value = (d["smi_before"]["total_mib"] - d["free_after_first_tensor_mib"]) / 1024
        points.setdefault("hopper", []).append((f"{H200_PROBE} (1x H200 measured)", round(value, 3)))
    out: dict[str, Any] = {}
    every = [v for pts in points.values() for _, v in pts]
    mean_all = sum(every) / len(every)
    all_pm = _spread(every, mean_all, FLOOR["overhead"])
    for fam, pts in sorted(points.items()):
        vals = [v for _, v in pts]
        mean = sum(vals) / len(vals)
        pm = _spread(vals, mean, FLOOR["overhead"]) if len(vals) > 1 else all_pm
        out[fam] = {"gib": round(mean, 3), "pm_gib": pm, "cases": [{"id": i, "gib": v} for i, v in pts]}
    out["default"] = {"gib": round(mean_all, 3), "pm_gib": all_pm, "cases": "every case above"}
    out["by_memory"] = _overhead_by_memory(cases, repo)
    return out


def _overhead_by_memory(cases: list[dict[str, Any]], repo: Path) -> dict[str, Any]:
    """Least squares of the overhead on the card's total GiB over non-GeForce cards; GeForce residuals kept apart."""
    pts: list[tuple[str, float, float, bool]] = []
    for c in cases:
        gpu, truth = _gpu(c), c.get("truth") or {}
        p = _p_before(truth)
        init = truth.get("init_dist_mem_gb")
        count = (c.get("gpu") or {}).get("count") or 1
        if gpu is None or p is None or (init is None and count > 1):
            continue
        total = gpu.memory_mib / 1024
        pts.append((c["id"], round(total, 3), round(total - p - float(init or 0.0), 3), is_geforce(gpu.nvml_name)))
    probe = repo / H200_PROBE
    if probe.is_file():
        d = json.loads(probe.read_text(encoding="utf-8"))
        total = d["smi_before"]["total_mib"] / 1024
        pts.append((f"{H200_PROBE} (1x H200 measured)", round(total, 3),
                    round(total - d["free_after_first_tensor_mib"] / 1024, 3), False))
    dc = [(x, y) for _, x, y, g in pts if not g]
    mx, my = sum(x for x, _ in dc) / len(dc), sum(y for _, y in dc) / len(dc)
    slope = sum((x - mx) * (y - my) for x, y in dc) / max(1e-9, sum((x - mx) ** 2 for x, _ in dc))
    a = my - slope * mx
    resid = [(i, x, y, round(y - (a + slope * x), 3), g) for i, x, y, g in pts]
    rows: list[dict[str, Any]] = [{"id": i, "total_gib": x, "gib": y, "residual_gib": r, "geforce": g}
                                  for i, x, y, r, g in resid]
    dc_res = [abs(r) for _, _, _, r, g in resid if not g]
    gf = [r for _, _, _, r, g in resid if g]
    extra = sum(gf) / len(gf) if gf else 0.0
    return {"intercept_gib": round(a, 4), "per_gib": round(slope, 5),
            "pm_gib": round(max([FLOOR["overhead"]] + dc_res), 3),
            "geforce_extra_gib": round(extra, 3),
            "pm_gib_geforce": round(max([FLOOR["overhead"]] + [abs(r - extra) for r in gf]), 3), "cases": rows}


def fit_nccl(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """NCCL at init beyond the channel model, per transport, from "Init torch distributed ends. mem usage"."""
    points: dict[str, list[tuple[str, float, float]]] = {"nvlink": [], "pcie": []}
    for c in cases:
        gpu, truth = _gpu(c), c.get("truth") or {}
        count = (c.get("gpu") or {}).get("count") or 1
        init = truth.get("init_dist_mem_gb")
        if gpu is None or init is None or count < 2:
            continue
        transport = "nvlink" if gpu.interconnect == "nvswitch" else "pcie"
        model = _channel_part_gib("nvswitch" if transport == "nvlink" else "pcie", count)
        points[transport].append((c["id"], float(init), round(float(init) - model, 3)))
    points["nvlink"].append(("shared/data/nccl_sweep_h200x2.json cumem0_default (2x H200 measured)",
                             H200X2_NCCL_INIT_MIB / 1024,
                             round(H200X2_NCCL_INIT_MIB / 1024 - _channel_part_gib("nvlink", 2), 3)))
    out: dict[str, Any] = {}
    for transport, pts in points.items():
        fixed = [f for _, _, f in pts]
        mean = sum(fixed) / len(fixed)
        out[transport] = {"fixed_gib": round(mean, 3), "pm_gib": _spread(fixed, mean, FLOOR["nccl_fixed"]),
                          "cases": [{"id": i, "logged_gib": round(v, 3), "fixed_gib": f} for i, v, f in pts]}
    return out


def fit_decode_graph(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """Least squares of the logged decode-graph memory on the number of captured batch sizes."""
    pts: list[tuple[str, int, float]] = []
    excluded: list[dict[str, str]] = []
    for c in cases:
        truth = c.get("truth") or {}
        mem, n = truth.get("cuda_graph_mem_gb"), truth.get("cuda_graph_batch_sizes_count")
        if mem is None or is_speculative(c):
            continue
        if n is None or "unified" in str(c.get("gpu")) or "WSL" in str((c.get("gpu") or {}).get("name")):
            excluded.append({"id": c["id"], "why": "no batch-size list in the log, or WSL/unified memory "
                                                   "(free memory not reported faithfully)"})
            continue
        if truth.get("prefill_graph_mem_gb") is not None:
            excluded.append({"id": c["id"], "why": "decode graphs captured after the prefill graphs, in the pool "
                                                   "those left (fitted with them in prefill_graph)"})
            continue
        pts.append((c["id"], int(n), float(mem)))
    xs, ys = [float(n) for _, n, _ in pts], [m for _, _, m in pts]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / max(1e-9, sum((x - mx) ** 2 for x in xs))
    c0 = my - slope * mx
    resid = [y - (c0 + slope * x) for x, y in zip(xs, ys)]
    return {"c0_gib": round(c0, 4), "per_size_gib": round(slope, 5),
            "pm_gib": round(max([FLOOR["decode_graph"]] + [abs(r) for r in resid]), 3),
            "cases": [{"id": i, "sizes": n, "logged_gib": m, "residual_gib": round(r, 3)}
                      for (i, n, m), r in zip(pts, resid)],
            "excluded": excluded}


def is_speculative(case: Mapping[str, Any]) -> bool:
    """The launch ran speculative decoding (its logged server_args name an algorithm)."""
    sa = str(case.get("server_args") or "")
    return "speculative_algorithm='" in sa or "--speculative-algo" in sa


def fit_spec_graph(cases: list[dict[str, Any]], decode: Mapping[str, Any]) -> dict[str, Any]:
    """The target graphs of speculative launches beyond the decode-graph line for the same captured sizes."""
    pts: list[tuple[str, int, float, float]] = []
    for c in cases:
        truth = c.get("truth") or {}
        mem, n = truth.get("cuda_graph_mem_gb"), truth.get("cuda_graph_batch_sizes_count")
        if mem is None or n is None or not is_speculative(c):
            continue
        line = decode["c0_gib"] + decode["per_size_gib"] * int(n)
        pts.append((c["id"], int(n), float(mem), round(float(mem) - line, 3)))
    extra = [e for *_, e in pts]
    mean = sum(extra) / len(extra) if extra else 0.0
    return {"extra_gib": round(mean, 3), "pm_gib": _spread(extra, mean, FLOOR["decode_graph"]),
            "cases": [{"id": i, "sizes": n, "logged_gib": m, "extra_gib": e} for i, n, m, e in pts]}


def fit_weights_extra(cases: list[dict[str, Any]], repo: Path) -> dict[str, Any]:
    """Logged weight memory minus the weights computed from the config (non-parameter buffers, padding)."""
    from sglwrap.memory.model import load_shape
    from sglwrap.memory.weights import weights_for
    from sglwrap.sglang.cmdline import cmdline_for

    pts: list[tuple[str, float, float]] = []
    for c in cases:
        truth, argv = c.get("truth") or {}, c.get("argv") or []
        w = truth.get("weight_mem_gb")
        model = c.get("model_config")
        if w is None or not model:
            continue
        tp = cmdline_for([str(a) for a in argv], c.get("version_for_plan")).tp if argv else 1  # one reading of argv
        shape = load_shape(str(repo / model) if "/" in str(model) else str(model))
        pred = weights_for(shape, tp=tp, attn_tp=tp, pp=1, online_quant=None).per_rank_bytes / GIB
        pts.append((c["id"], float(w), round(float(w) - pred, 3)))
    extra = [e for _, _, e in pts]
    mean = sum(extra) / len(extra) if extra else 0.0
    return {"gib": round(mean, 3), "pm_gib": _spread(extra, mean, FLOOR["weights_extra"]),
            "cases": [{"id": i, "logged_gib": w, "extra_gib": e} for i, w, e in pts]}


def _verify_observed(case: Mapping[str, Any]) -> float | None:
    """GiB the target's verify graphs took: the first "Memory pool end" avail minus the next "Load weight begin"
    avail (SGLang < 0.4.4 captures the target's graphs between the two; the draft's init adds no NCCL)."""
    log = str(case.get("log") or "")
    m = re.search(r"Memory pool end\. avail mem=([0-9.]+) GB", log)
    if not m:
        return None
    n = re.search(r"Load weight begin\. avail mem=([0-9.]+) GB", log[m.end():])
    return None if not n else float(m.group(1)) - float(n.group(1))


def fit_verify_graph_legacy(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """Relative residual of the source model of pre-0.4.4 verify graphs on the launches that log them."""
    from sglwrap.memory.extras import LEGACY_VERIFY_BEFORE
    from sglwrap.versions import at_least

    pts: list[tuple[str, float, float]] = []
    for c in cases:
        v = c.get("version_for_plan")
        obs = _verify_observed(c) if is_speculative(c) else None
        if obs is None or not v or at_least(str(v), LEGACY_VERIFY_BEFORE) or not c.get("argv"):
            continue
        model = _plan_case(c).budget.draft_graphs / GIB
        pts.append((c["id"], round(obs, 2), model))
    rel = [(o - m) / m for _, o, m in pts if m > 0]
    # the bound is rounded up, so every case it was fitted on stays inside it
    return {"rel_pm": math.ceil(max([0.10] + [abs(r) for r in rel]) * 1000) / 1000,
            "cases": [{"id": i, "logged_gib": o, "model_gib": round(m, 3), "residual_rel": round((o - m) / m, 3)}
                      for i, o, m in pts]}


def _plan_case(case: Mapping[str, Any]) -> Any:
    """The accountant's plan for a corpus case (its catalogue GPUs, argv and release)."""
    from sglwrap.host.catalogue import resolve_assume
    from sglwrap.memory import plan

    g = case["gpu"]
    return plan(resolve_assume(f"{g['count']}x{g['catalogue']}"), {}, [str(a) for a in case["argv"]],
                sglang_version=case.get("version_for_plan"))


def fit_prefill_graph(cases: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean logged prefill-graph memory per captured token size (the breakable prefill graphs of SGLang >= 0.5.20,
    captured before the decode graphs)."""
    pts = [(c["id"], int(t["prefill_graph_token_sizes_count"]), float(t["prefill_graph_mem_gb"]))
           for c in cases for t in [c.get("truth") or {}]
           if t.get("prefill_graph_mem_gb") is not None and t.get("prefill_graph_token_sizes_count")]
    per = [m / n for _, n, m in pts]
    mean = sum(per) / len(per) if per else 0.0
    return {"per_size_gib": round(mean, 5), "pm_rel": round(max([0.5] + [abs(p - mean) / mean for p in per]), 3)
            if per else 1.0, "cases": [{"id": i, "sizes": n, "logged_gib": m} for i, n, m in pts]}


def fit_all(corpus: Path, repo: Path) -> dict[str, Any]:
    """Every fit, with the cases it used."""
    cases = _cases(corpus)
    decode = fit_decode_graph(cases)
    return {"schema": 1, "generated_by": GENERATED_BY,
            "corpus_cases": len(cases), "overhead": fit_overhead(cases, repo), "nccl": fit_nccl(cases),
            "decode_graph": decode, "spec_graph": fit_spec_graph(cases, decode),
            "verify_graph_legacy": fit_verify_graph_legacy(cases), "prefill_graph": fit_prefill_graph(cases),
            "weights_extra": fit_weights_extra(cases, repo)}


def dump(doc: dict[str, Any]) -> str:
    """The file's text for a fits document."""
    return json.dumps(doc, indent=1) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write fits.json from the corpus, or check it (``--check``)."""
    ap = argparse.ArgumentParser(prog="python tools/gen_memory_fits.py", description=(__doc__ or "").split("\n")[0])
    ap.add_argument("corpus", nargs="?", type=Path, default=CORPUS, help="corpus directory (default: %(default)s)")
    ap.add_argument("--out", type=Path, default=FITS_PATH, help="output file (default: %(default)s)")
    ap.add_argument("--check", action="store_true", help="compare with the file on disk; write nothing")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    text = dump(fit_all(args.corpus, REPO))
    if args.check:
        same = args.out.is_file() and args.out.read_text(encoding="utf-8") == text
        print(f"{args.out}: {'up to date' if same else 'differs from the fit of ' + str(args.corpus)}")
        return 0 if same else 1
    tmp = args.out.with_suffix(".json.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, args.out)
    print(f"{args.out}: fitted on {json.loads(text)['corpus_cases']} cases")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
