"""The `memory` check: the accountant's verdict as one preflight line (issue 4: preflight and launch call it)."""

from __future__ import annotations

from typing import Any

from sglwrap.errors import ArgValueError, SglwrapError
from sglwrap.preflight.model import Context, Status, Verdict

_BLOCKING = ("kv_pool_oom", "weights_dont_fit")


def _why_not_planned(ctx: Context) -> str | None:
    """Why the accountant does not run for this launch (the check skips), or None."""
    if ctx.args.model_path is None:
        return "no --model-path given: nothing to budget"
    if not ctx.facts.gpus:
        return "no GPUs in the facts (pass --assume HW to plan for other GPUs)"
    device = ctx.args.device
    if device not in (None, "cuda"):
        return f"--device {device}: the accountant models CUDA GPUs only"
    return None


def plan_memory(ctx: Context) -> Any:
    """The accountant's plan for this launch, the SglwrapError it raised, or None when it does not run: made once
    by ``run_preflight`` before the checks (it reads the model's config and checkpoint index)."""
    if _why_not_planned(ctx) is not None:
        return None
    from sglwrap import memory

    env = {k: v for k, v in ctx.environ.items() if k.startswith("NCCL_")}
    profile_sglang = None
    if ctx.profile is not None:
        for name, setting in ctx.profile.env.items():
            if setting.force or name not in env:
                env[name] = setting.value
        profile_sglang = dict(ctx.profile.sglang)
    try:
        return memory.plan(ctx.facts, env, ctx.args, profile_sglang=profile_sglang)
    except SglwrapError as e:
        return e


def check_memory(ctx: Context) -> Verdict:
    """Predict SGLang's budget for these args on these GPUs; an OOM before serving blocks (warns with --force)."""
    why = _why_not_planned(ctx)
    if why is not None:
        return Verdict("memory", Status.SKIP, why)
    plan = ctx.memory_plan
    if isinstance(plan, ArgValueError):  # the user's own value: SGLang cannot start with it, nothing left to plan
        return Verdict("memory", Status.BLOCK, f"SGLang cannot run with {plan.message}",
                       "give that flag a value in the range named")
    if isinstance(plan, SglwrapError):
        return Verdict("memory", Status.SKIP, f"cannot plan memory: {plan.message}")
    res = plan.result
    doc = plan.to_dict()
    mfs = doc["mem_fraction_static"]
    facts_used = (f"{doc['kv_tokens']:,} KV tokens of {doc['kv_cell_bytes']:,} B at --mem-fraction-static "
                  f"{mfs['value']} ({mfs['source']}); weights {doc['weights_bytes_per_rank'] / 2**30:.1f} GiB/rank")
    if plan.verdict in _BLOCKING:
        status = Status.WARN if ctx.force or not plan.blocks_launch else Status.BLOCK
        estimated = (" (the checkpoint's size is estimated from its config: no index or safetensors headers "
                     "found, so this warns instead of blocking)") if plan.weights_estimated else ""
        return Verdict("memory", status, f"{plan.verdict}: SGLang would fail with: {res.sglang_error}{estimated}",
                       res.fix or "", detail=doc)
    if plan.verdict == "graph_oom_risk":
        return Verdict("memory", Status.WARN, f"graph_oom_risk: {facts_used}", res.fix or "", detail=doc)
    if plan.verdict == "fits_tight":  # the slack is within the terms' uncertainty: may still fail, say so
        why = f" (SGLang would fail with: {res.sglang_error})" if res.sglang_error else ""
        return Verdict("memory", Status.WARN, f"fits_tight: the slack is within the model's uncertainty{why}; "
                       f"{facts_used}", res.fix or "", detail=doc)
    return Verdict("memory", Status.PASS, f"fits: {facts_used}", detail=doc)
