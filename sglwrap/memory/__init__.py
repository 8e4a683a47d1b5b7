"""The memory accountant: predict SGLang's GPU memory budget and every OOM before launch, term by term.

``plan(facts, profile_env, sglang_argv, sglang_version=...)`` is the pure entry point ``launch`` and
``preflight`` call; ``sglwrap memory`` renders its result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sglwrap.host.facts import HostFacts
from sglwrap.memory.args import ServerArgs, parse_server_args
from sglwrap.memory.budget import Budget, Observed, Terms, compute
from sglwrap.memory.cells import Cell, cell_bytes
from sglwrap.memory.defaults import Resolved, describe, resolve
from sglwrap.memory.extras import (Draft, Extra, deepep_buffers, default_draft_tokens, draft_graphs, draft_model,
                                   lora_buffers, read_extra, sharding_for, spec_algorithm)
from sglwrap.memory.explain import SURE_FAILURES, Verdict, explain
from sglwrap.memory.model import ModelShape, load_shape
from sglwrap.memory.nccl import NcclCost, NcclSettings, comm_cost
from sglwrap.memory.swa import DEFAULT_SWA_FULL_TOKENS_RATIO
from sglwrap.memory.weights import Weights, as_loaded_by, weights_for
from sglwrap.record import Record, replace
from sglwrap.sglang.cmdline import SglangCmdline, cmdline_for

SCHEMA_VERSION = 1
EXIT_FITS, EXIT_RISK, EXIT_OOM = 0, 1, 78
__all__ = ["MemoryPlan", "Observed", "plan"]


class MemoryPlan(Record):
    """The accountant's result: inputs it resolved, the budget, and the verdict. Render with ``to_dict``."""

    shape: ModelShape
    args: ServerArgs
    cell: Cell
    weights_info: Weights
    nccl: NcclCost
    budget: Budget
    result: Verdict
    sglang_version: str | None
    gpu_name: str
    interconnect: str
    profile_env: dict[str, str]
    resolved: Resolved | None = None  # the release's defaults the budget used

    @property
    def verdict(self) -> str:
        return self.result.kind

    @property
    def explanation(self) -> tuple[str, ...]:
        return self.result.sentences

    @property
    def weights_estimated(self) -> bool:
        """True when the checkpoint's size is an estimate from its config (no index, weights.json or safetensors
        headers found locally, in the HF cache or the bundled catalogue)."""
        return self.budget.w_source.startswith("params x dtype")  # observed or read sizes are known

    @property
    def exit_code(self) -> int:
        """0 for fits and fits_tight (a warning), 1 for graph_oom_risk or a failure that rests on an estimated
        checkpoint size, 78 for a failure the numbers are sure of."""
        if self.verdict in SURE_FAILURES:
            return EXIT_RISK if self.weights_estimated else EXIT_OOM
        return EXIT_RISK if self.verdict == "graph_oom_risk" else EXIT_FITS

    @property
    def blocks_launch(self) -> bool:
        """Whether a launch should be stopped: only a failure before serving that the numbers are sure of (each
        term's ± from its fit is already in the verdict: a deficit within it is ``fits_tight``) and whose weights
        are the checkpoint's real size (an estimate warns)."""
        return self.verdict in SURE_FAILURES and not self.weights_estimated

    def _swa_dict(self) -> dict[str, Any] | None:
        """The hybrid SWA split (None for an ordinary pool)."""
        sc, lay = self.cell.swa, self.shape.swa
        if sc is None or lay is None:
            return None
        return {"configurator": "HybridSWAPoolConfigurator", "full_layers": sc.full_layers,
                "swa_layers": sc.swa_layers, "sliding_window": lay.config_window, "window_checked": sc.window,
                "swa_full_tokens_ratio": sc.ratio,
                "full_cell_bytes": sc.full_per_layer * (sc.full_layers + sc.draft_full_layers),
                "swa_cell_bytes": sc.swa_per_layer * sc.swa_layers,
                "full_tokens": self.budget.kv_tokens if sc.full_layers else 0, "swa_tokens": self.budget.swa_tokens}

    def _mamba_dict(self) -> dict[str, Any] | None:
        """The mamba / linear-attention state pool (None for other models)."""
        mc, m, lay = self.cell.mamba, self.budget.mamba, self.shape.mamba
        if mc is None or m is None or lay is None:
            return None
        return {"family": lay.family, "linear_layers": mc.linear_layers, "full_attention_layers": mc.full_layers,
                "conv_state_shape": list(mc.state.conv), "ssm_state_shape": list(mc.state.temporal),
                "conv_dtype": mc.conv_dtype, "ssm_dtype": mc.ssm_dtype,
                # never negative: SGLang's own error text keeps its arithmetic (a negative K), the pool holds none
                "per_request_bytes": m.per_request_bytes, "slots": max(0, m.slots), "slots_source": m.slots_source,
                "budget_bytes": None if m.budget_bytes is None else max(0, int(m.budget_bytes)),
                "ratio": m.ratio if m.budget_bytes is not None else None,
                "ratio_source": m.ratio_source if m.budget_bytes is not None else None,
                "state_bytes": self.budget.mamba_state, "spec_reserve_bytes": m.spec_reserve_bytes,
                "slots_per_request": m.slots_per_request,
                "error": self.budget.mamba_error}

    def context_capped(self) -> dict[str, Any] | None:
        """An explicit ``--context-length`` the KV pool cannot hold for one request: SGLang still starts but caps
        every request at ``min(context_len, pool) - 1`` tokens (0.5.23 ``tp_worker.py`` ``get_worker_info``, which
        logs "KV pool holds N tokens, fewer than --context-length"); None when the context fits or was not given."""
        b = self.budget
        if self.args.context_length is None or self.verdict not in ("fits", "fits_tight") \
                or not 0 < b.kv_tokens < b.context_len:
            return None
        capped = b.kv_tokens - 1
        fix = f"--context-length {capped}"
        plain = self.cell.swa is None and b.mamba is None and self.args.max_total_tokens is None
        if plain and b.pre_weights_free > 0 and b.cell_bytes:
            import math

            short = (b.context_len - b.kv_tokens + 2 * b.page_size) * b.cell_bytes
            f_new = math.ceil((b.mem_fraction_static + short / b.pre_weights_free) * 1000 + 1) / 1000
            # the runtime need grows with the pool (req_to_token): keep its own margin too
            if f_new < 1 and b.pre_weights_free * (1 - f_new) >= 1.1 * b.runtime_need + b.need_pm:
                fix = f"--mem-fraction-static {f_new:.3f}"
        return {"context_length": b.context_len, "kv_tokens": b.kv_tokens, "max_request_tokens": capped,
                "fix": fix, "alternative": None if fix.startswith("--context-length") else
                f"--context-length {capped}"}

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract (schema_version 1)."""
        b = self.budget
        return {
            "schema_version": SCHEMA_VERSION, "command": "memory", "verdict": self.verdict,
            "exit_code": self.exit_code, "sglang_version": self.sglang_version,
            "model": {"name": self.shape.name, "source": self.shape.source, "architecture": self.shape.architecture,
                      "layers": self.shape.num_layers, "kv_heads": self.shape.num_kv_heads,
                      "mla": self.shape.is_mla, "context_len": self.shape.context_len},
            "gpu": {"name": self.gpu_name, "count": self.args.gpus_per_node, "interconnect": self.interconnect},
            "parallel": {"tp": self.args.tp_size, "pp": self.args.pp_size, "dp": self.args.dp_size,
                         "attn_dp": self.args.attn_dp_size, "ep": self.args.ep_size, "nnodes": self.args.nnodes},
            "kv_cell_bytes": self.cell.bytes_per_token, "kv_cell_formula": self.cell.formula,
            "kv_tokens": b.kv_tokens, "swa_tokens": b.swa_tokens, "swa": self._swa_dict(),
            "mamba": self._mamba_dict(),
            "weights_bytes_per_rank": b.weights, "weights_source": b.w_source,
            "weights_estimated": self.weights_estimated, "blocks_launch": self.blocks_launch,
            "weights_total_bytes": self.weights_info.total_bytes,
            "mem_fraction_static": {"value": b.mem_fraction_static, "source": b.mfs_source},
            "sglang_defaults": None if self.resolved is None else dict(describe(self.resolved)),
            "min_mem_fraction_static": round(b.min_mem_fraction_static, 4),
            "max_context_tokens": min(b.context_len, b.kv_tokens), "context_capped": self.context_capped(),
            "max_running_requests": b.max_running_requests,
            "terms": {
                "gpu_total": b.gpu_total, "driver_reserved": b.driver_reserved, "cuda_context": b.cuda_context,
                "other_processes": b.other_processes, "nccl_init": b.nccl_init,
                "custom_allreduce": b.custom_allreduce, "pre_weights_free": b.pre_weights_free,
                "weights": b.weights, "static_limit": b.static_limit, "mm_reserve": b.mm_reserve,
                "mamba_state": b.mamba_state,
                "kv_budget": b.kv_budget, "kv_pool": b.kv_pool, "slack": b.slack,
                "req_to_token": b.req_to_token, "decode_graphs": b.decode_graphs,
                "prefill_graphs": b.prefill_graphs, "activations": b.activations, "nccl_late": b.nccl_late,
                "symm_mem": b.symm_mem, "runtime_need": b.runtime_need, "runtime_free": b.runtime_free,
                "overhead_before_nccl": b.overhead, "draft_weights": b.draft_weights,
                "draft_graphs": b.draft_graphs, "deepep_buffers": b.deepep, "lora_buffers": b.lora,
                "weights_load_peak": b.weights_peak,
            },
            "uncertainty": {"pre_weights_free": b.p_pm, "weights": b.w_pm, "kv_budget": b.kv_pm,
                            "kv_tokens": b.kv_tokens_pm, "slack": b.slack_pm, "runtime_need": b.need_pm,
                            "runtime_margin": b.margin_pm},
            "term_sources": dict(b.term_sources),
            "nccl": {"formula": self.nccl.formula, "coll_channels": self.nccl.coll_channels,
                     "p2p_channels": self.nccl.p2p_channels, "per_communicator": self.nccl.per_comm_bytes,
                     "process_fixed": self.nccl.process_fixed_bytes},
            "profile_env": dict(sorted(self.profile_env.items())),
            "sglang_error": self.result.sglang_error, "fix": self.result.fix,
            "explanation": list(self.result.sentences),
        }


def _interconnect(facts: HostFacts) -> tuple[str, bool]:
    """("nvswitch"|"nvlink"|"pcie", whether P2P is possible)."""
    if facts.nvswitch:
        return "nvswitch", True
    if facts.all_pairs_nvlink or any(g.nvlink_active for g in facts.gpus):
        return "nvlink", True
    p2p = bool(facts.links) and all(lk.p2p_read == "ok" for lk in facts.links)
    probes = facts.probes.get("catalogue", {}) if isinstance(facts.probes, dict) else {}
    if not facts.links and isinstance(probes, dict):
        p2p = bool(probes.get("pcie_p2p", True))
    return "pcie", p2p


def _other_processes(facts: HostFacts, n: int) -> int:
    """Memory someone else holds on the busiest of the first ``n`` GPUs.

    NVML's "used" on an idle GPU already includes the driver's own reservation (about 615 MiB on an H200: the
    captured idle H200s show total - free = 615 MiB), which the budget subtracts separately as the driver reserve;
    only what is used beyond it, or what NVML attributes to processes, belongs to other processes.
    """
    from sglwrap.memory.budget import DRIVER_RESERVED_BYTES

    worst = 0
    for g in facts.gpus[:n]:
        procs = sum(p.used_bytes or 0 for p in g.processes)
        beyond = 0
        if g.memory_free_bytes is not None:
            beyond = max(0, g.memory_total_bytes - g.memory_free_bytes - DRIVER_RESERVED_BYTES)
        worst = max(worst, procs, beyond)
    return worst


def plan(facts: HostFacts, profile_env: Mapping[str, str], sglang_argv: Sequence[str] | SglangCmdline, *,
         sglang_version: str | None = None, profile_sglang: Mapping[str, object] | None = None,
         observed: Observed | None = None, search_fix: bool = True) -> MemoryPlan:
    """Predict the budget of ``python -m sglang.launch_server <sglang_argv>`` on ``facts``' GPUs with the
    profile's environment. Pure apart from reading the model's config.json (and index) from disk."""
    from sglwrap.errors import UsageError

    if isinstance(sglang_argv, SglangCmdline):
        cmd = sglang_argv
        sglang_version = sglang_version or cmd.version  # a SglangCmdline knows its release
    else:  # read once here; every term and the re-planned fixes take this one reading
        cmd = cmdline_for(sglang_argv, sglang_version)
    args = parse_server_args(cmd, version=sglang_version, profile_sglang=profile_sglang)
    if args.gpus_per_node > facts.gpu_count:
        nodes = f" per node over --nnodes {args.nnodes}" if args.nnodes > 1 else ""
        raise UsageError(f"--tp-size {args.tp_size} x --pp-size {args.pp_size} needs {args.gpus_per_node} GPUs"
                         f"{nodes}; the host has {facts.gpu_count} ({facts.source})")
    shape = load_shape(args.model_path)
    gpus = facts.gpus[: args.gpus_per_node]  # one node's: every rank is planned alike
    gpu_total = min(g.memory_total_bytes for g in facts.gpus)  # SGLang: min over visible GPUs
    interconnect, p2p = _interconnect(facts)
    env = {k: str(v) for k, v in profile_env.items()}
    settings = NcclSettings.from_env(env, p2p_possible=p2p)
    nccl = comm_cost(settings, ranks=args.tp_size, interconnect=interconnect)
    profile_mfs = None
    if profile_sglang and "mem_fraction_static" in profile_sglang:
        profile_mfs = float(profile_sglang["mem_fraction_static"])  # type: ignore[arg-type]
    resolved = _resolved(args, shape, facts, gpu_total, profile_mfs, sglang_version)
    extra = read_extra(cmd)
    algo = spec_algorithm(args.speculative_algorithm)
    draft = draft_model(shape, algo, args.speculative_draft_model_path, args.tp_size) if algo else None
    hybrid_swa = shape.swa is not None and not args.disable_hybrid_swa_memory  # model_config.py:1215-1218
    swa_ratio = (args.swa_full_tokens_ratio or DEFAULT_SWA_FULL_TOKENS_RATIO) if hybrid_swa else None
    from sglwrap.versions import at_least

    # the draft's layers join the target's cell from 0.5.14 (pool_configurator.py eagle_draft_num_layers); before,
    # the draft worker sized its own pool afterwards and the target's pool held the target's layers only
    draft_in_cell = draft is not None and (sglang_version is None or at_least(sglang_version, "0.5.14"))
    cell = cell_bytes(shape, attn_tp=args.attn_tp_size, pp=args.pp_size, kv_cache_dtype=args.kv_cache_dtype,
                      draft_layers=draft.kv_layers if draft and draft_in_cell else 0, swa_ratio=swa_ratio,
                      mamba_ssm_dtype=args.mamba_ssm_dtype, env=env)
    online = args.quantization if args.quantization and shape.quant_method is None else None
    weights = weights_for(as_loaded_by(shape, sglang_version), tp=args.tp_size, attn_tp=args.attn_tp_size,
                          pp=args.pp_size, online_quant=online,
                          sharding=sharding_for(shape, extra, args.tp_size, args.attn_tp_size))
    offload_gb = args.given.get("cpu_offload_gb")
    if isinstance(offload_gb, int | float) and offload_gb > 0:
        from sglwrap.memory.offload import with_offload

        weights = with_offload(weights, shape, float(offload_gb), tp=args.tp_size, pp=args.pp_size)
    terms = _terms(facts, interconnect, shape, args, resolved, weights, draft, extra, env, sglang_version)
    budget = compute(shape=shape, args=args, resolved=resolved, cell=cell, weights=weights, gpu_total=gpu_total,
                     other_processes=_other_processes(facts, len(gpus)), nccl=nccl, p2p=p2p,
                     observed=observed or Observed(), terms=terms)
    notes = list(budget.notes)
    if shape.unmodelled_hybrid:
        notes.append(f"{shape.architecture} is a linear-attention hybrid whose state pool this accountant does not "
                     f"model: every layer is sized as full attention and no state pool is reserved (the KV token "
                     f"count is off).")
    if _is_rocm(facts):
        notes.append("AMD/ROCm GPUs are not modelled: the overhead, NCCL (RCCL) and graph terms are NVIDIA fits; "
                     "feed the logged free memory back with --avail-before-weights-gib / --weights-gib.")
    if notes != list(budget.notes):
        from sglwrap.record import replace

        budget = replace(budget, notes=tuple(notes))
    from sglwrap.sglang.flags import release_flag, setting_flag

    # the spelling the release's own parser takes (its flag table), never a copy of the rename here
    graph_flag = setting_flag("cuda_graph_max_bs", cmd.table) or release_flag("cuda_graph_max_bs", cmd.version)
    fix = None
    if search_fix:
        from sglwrap.memory.explain import classify

        if classify(budget) not in ("fits", "fits_tight"):
            fix = _replanned_fix(facts, profile_env, cmd, sglang_version, profile_sglang, observed, budget,
                                 args, graph_flag, classify(budget))
    verdict = explain(budget, version=sglang_version, tp=args.tp_size, graph_flag=graph_flag,
                      swa_fix=_swa_ratio_fix(cell, budget, args) if budget.swa_error else None, fix=fix)
    return MemoryPlan(shape, args, cell, weights, nccl, budget, verdict, sglang_version, facts.gpus[0].name,
                      interconnect, env, resolved)


def _is_rocm(facts: HostFacts) -> bool:
    name = facts.gpus[0].name.upper() if facts.gpus else ""
    return "AMD" in name or "INSTINCT" in name or "RADEON" in name


def _resolved(args: ServerArgs, shape: ModelShape, facts: HostFacts, gpu_total: int, profile_mfs: float | None,
              version: str | None) -> Resolved:
    """SGLang's defaults for the plan's release (``sglwrap.sglang.resolved``; the newest known release when none is named)."""
    g = facts.gpus[0] if facts.gpus else None
    return resolve(args, shape, gpu_total / (1 << 20), profile_mfs=profile_mfs, version=version,
                   capability=tuple(g.compute_capability) if g and g.compute_capability else None,  # type: ignore[arg-type]
                   gpu_name=g.name if g else None, gpu_count=args.gpus)


def _terms(facts: HostFacts, interconnect: str, shape: ModelShape, args: ServerArgs, resolved: Resolved,
           weights: Weights, draft: Draft | None, extra: Extra, env: Mapping[str, str],
           version: str | None) -> Terms:
    """The fitted and modelled terms of this launch (``fits``, ``extras``)."""
    from sglwrap.memory import fits
    from sglwrap.versions import at_least

    cc = facts.gpus[0].compute_capability if facts.gpus else None
    n_sizes = len(resolved.decode_graph_sizes) if resolved.decode_graph else 0
    graphs = fits.decode_graphs(n_sizes)
    params_based = weights.source.startswith("params")
    return Terms(
        overhead=fits.overhead(cc, min(g.memory_total_bytes for g in facts.gpus) if facts.gpus else None,
                              facts.gpus[0].name if facts.gpus else None), nccl_init=fits.nccl_fixed(interconnect), decode_graphs=graphs,
        weights_extra=fits.weights_extra(), weights_rel_pm=_weights_rel_pm(shape, params_based),
        draft_weights=draft.weights if draft else fits.exact(0, "no draft model"),
        draft_in_weights=version is None or at_least(version, "0.5.14"),
        draft_graphs=draft_graphs(graphs, draft.algorithm, capture=resolved.decode_graph_sizes,
                                  draft_tokens=args.speculative_num_draft_tokens
                                  or default_draft_tokens(version, shape.architecture),
                                  vocab=shape.vocab_size, shape=shape, version=version,
                                  context_len=args.context_length or shape.context_len, tp=args.tp_size) if draft
        else fits.exact(0, "no draft model"),
        deepep=deepep_buffers(shape, extra, max(args.ep_size, args.tp_size), env),
        lora=lora_buffers(shape, extra, args.tp_size, args.attn_tp_size, version))


def _weights_rel_pm(shape: ModelShape, params_based: bool) -> float:
    """Relative ± of W: 1% from a checkpoint index; from parameters 3% (bf16: the corpus' residuals after the
    non-parameter fit are under 1%), 10% for a quantised checkpoint (scales and packing are not in the config)."""
    if not params_based:
        return 0.01
    return 0.10 if shape.quant_method else 0.03


def _replanned_fix(facts: HostFacts, profile_env: Mapping[str, str], cmd: SglangCmdline, version: str | None,
                   profile_sglang: Mapping[str, object] | None, observed: Observed | None, b: Budget,
                   args: ServerArgs, graph_flag: str, kind: str) -> str | None:
    """The first single change that re-plans to ``fits`` on this host, said with the re-planned numbers; None
    when no candidate does. Candidates stay in each flag's range: 0 < f < 1, TP within the host's GPUs."""
    from sglwrap.errors import SglwrapError

    f = b.mem_fraction_static
    cands: list[tuple[str, str]] = []  # each appended to the user's args: SGLang's parser keeps the last value
    if kind in ("kv_pool_oom", "weights_dont_fit"):
        start = int(max(b.min_mem_fraction_static, f) * 100) + 1
        cands += [("--mem-fraction-static", f"{x / 100:.2f}") for x in range(start, 96)]
        if b.lora and kind == "kv_pool_oom":  # the LoRA pool scales with the adapter slots (mem_pool.py)
            slots = read_extra(cmd).max_loras_per_batch  # the slots the pool was sized with (default 8 there)
            while slots > 1:
                slots //= 2
                cands.append(("--max-loras-per-batch", str(slots)))
        if args.kv_cache_dtype in ("auto", "bfloat16", "float16") and kind == "kv_pool_oom" and b.kv_budget > 0:
            cands.append(("--kv-cache-dtype", "fp8_e4m3"))
        tp2 = args.tp_size * 2
        if tp2 * args.pp_size <= facts.gpu_count:
            cands.append(("--tp-size", str(tp2)))
    elif kind == "graph_oom_risk":
        bs = args.cuda_graph_max_bs or 512
        while bs > 8:
            bs //= 2
            cands.append((graph_flag, str(bs)))
        cps = args.chunked_prefill_size or 8192
        while cps > 1024:
            cps //= 2
            cands.append(("--chunked-prefill-size", str(cps)))
        low = int(b.min_mem_fraction_static * 100) + 1
        cands += [("--mem-fraction-static", f"{x / 100:.2f}") for x in range(int(f * 100) - 1, low, -1)]
    for flag, value in cands:
        try:
            trial = cmd.with_args([flag, value])
            p = plan(facts, profile_env, trial, sglang_version=version, profile_sglang=profile_sglang,
                     observed=observed, search_fix=False)
        except SglwrapError:
            continue
        if p.verdict == "fits":
            margin = p.budget.slack - p.budget.runtime_need
            return (f"{flag} {value} (re-planned on this host: fits, {p.budget.kv_tokens:,} KV tokens, "
                    f"{margin / (1 << 30):.2f} GiB left at runtime)")
    return None


def _swa_ratio_fix(cell: Cell, budget: Budget, args: ServerArgs) -> str | None:
    """The smallest --swa-full-tokens-ratio (steps of 0.05) whose SWA pool passes SGLang's window check."""

    from sglwrap.memory.budget import _swa_pool

    sc = cell.swa
    if sc is None:
        return None
    for step in range(int(sc.ratio * 20) + 1, 21):
        trial = replace(cell, swa=replace(sc, ratio=step / 20))
        if _swa_pool(trial, budget.kv_budget, args).error is None:
            return f"--swa-full-tokens-ratio {step / 20:g} (the SWA pool must exceed the window + one page)"
    return None
