"""Verdict, the error SGLang would print, sentences with numbers, and the single change that fixes it."""

from __future__ import annotations

from sglwrap.memory.budget import GIB, Budget
from sglwrap.record import Record

VERDICTS = ("fits", "fits_tight", "graph_oom_risk", "kv_pool_oom", "weights_dont_fit")
SURE_FAILURES = ("kv_pool_oom", "weights_dont_fit")


def gib(n: float) -> str:
    """Bytes as GiB with two decimals (SGLang's logs print GiB as 'GB')."""
    return f"{n / GIB:.2f} GiB"


class Verdict(Record):
    """What will happen, what SGLang would say, and the one change that avoids it."""

    kind: str
    sglang_error: str | None
    fix: str | None
    sentences: tuple[str, ...]


def sglang_error(kind: str, b: Budget, version: str | None) -> str | None:
    """The text this SGLang version prints for the predicted failure (0.5.23 texts verified in its source)."""
    from sglwrap.versions import at_least, newest_known

    new = at_least(version or newest_known(), "0.5.23")  # None: the newest known release
    f = b.mem_fraction_static
    if kind == "weights_dont_fit":
        return "torch.OutOfMemoryError: CUDA out of memory (while loading weights)"
    if kind in ("kv_pool_oom", "fits_tight") and lora_oom(b):
        # the LoRA manager allocates its pool before any KV sizing (model_runner.py init_lora_manager): a pool
        # larger than what the weights leave fails there, in torch, not in SGLang's budget checks
        return (f"torch.OutOfMemoryError: CUDA out of memory (allocating the LoRA memory pool, {gib(b.lora)} per "
                f"rank, after {gib(b.weights)} of weights in {gib(b.pre_weights_free)})")
    if kind == "fits_tight" and b.mamba_error:
        return b.mamba_error  # within the ±: what SGLang would print if the unknown terms are at their worst
    if kind == "kv_pool_oom":
        if b.mamba_error:  # kv_cache_configurator.py:3040 runs before the no-memory check (:3043-3057)
            return b.mamba_error
        if b.kv_budget > 0 and b.swa_error:
            return b.swa_error  # pool_configurator.py:210-216, raised before "Not enough memory" could be
        if b.kv_budget <= 0 and new:
            minimum = 1 - (b.pre_weights_free - b.weights - b.lora) / b.pre_weights_free
            return (f"ValueError: Loaded weights leave no GPU memory for the KV cache under "
                    f"--mem-fraction-static={f}. Raise --mem-fraction-static above {b.sglang_suggested_mfs:.3f} "
                    f"(minimum viable = 1 - available/pre = {minimum:.4f}). If using speculative decoding, "
                    f"draft weights are now counted.")
        msg = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
        return msg + (f" Current value: mem_fraction_static={f}" if new else "")
    if kind == "graph_oom_risk":
        return "torch.OutOfMemoryError during CUDA graph capture (SGLang: 'Capture cuda graph failed' ... " \
               "'set --mem-fraction-static to a smaller value')"
    return None


def lora_oom(b: Budget) -> bool:
    """Whether the LoRA pool (allocated after the weights, before the KV pool) exceeds what the weights leave of P."""
    return b.lora > 0 and b.weights + b.lora > b.pre_weights_free


def classify(b: Budget) -> str:
    """The verdict, with each term's ± from its fit: a failure only when the numbers are sure of it.

    weights_dont_fit (W - ±W >= P + ±P, W at its loading peak: online quantisation loads 16 bits first) > kv_pool_oom (KV budget + its ± still <= 0, or SGLang's SWA / mamba
    checks reject the pool) > graph_oom_risk (runtime need exceeds the slack by more than the ± of both) >
    fits_tight (the pool or the runtime slack is within its ± of running out) > fits.
    """
    w = max(b.weights, b.weights_peak)
    if w - b.w_pm * w / max(1, b.weights) >= b.pre_weights_free + b.p_pm:
        return "weights_dont_fit"
    if b.swa_error or (b.mamba_error and b.mamba_error_sure):
        return "kv_pool_oom"
    if b.mamba_error:  # the state pool fails at the nominal budget but not at the top of its ±
        return "fits_tight"
    if b.kv_budget <= 0 or b.kv_tokens <= 0:
        return "kv_pool_oom" if b.kv_budget + b.kv_pm <= 0 else "fits_tight"
    margin = b.slack - b.runtime_need
    if margin < -b.margin_pm:
        return "graph_oom_risk"
    if margin <= b.margin_pm or b.kv_budget <= b.kv_pm:
        return "fits_tight"
    return "fits"


def fallback_fix(kind: str, b: Budget, graph_flag: str) -> str | None:
    """The change to try when no re-planned candidate reached ``fits`` (said as such)."""
    if kind == "weights_dont_fit":
        if b.weights_peak > b.weights:
            return (f"the weights peak at {gib(b.weights_peak)}/rank while loading ({gib(b.weights)}/rank once "
                    f"quantised), more than all free memory ({gib(b.pre_weights_free)}): online quantisation loads the "
                    f"16-bit checkpoint first; use a checkpoint already quantised (an FP8 release loads at its own "
                    f"size), or more GPUs")
        return (f"the weights ({gib(b.weights)}/rank) exceed all free memory ({gib(b.pre_weights_free)}): no flag "
                f"on this host makes them fit; use a smaller or more quantised checkpoint, or more GPUs")
    if kind == "kv_pool_oom":
        return (f"no single change within the host's GPUs and the flags' ranges makes it fit (the pool needs "
                f"--mem-fraction-static >= {b.min_mem_fraction_static:.3f}, which must stay below 1 and leave "
                f"room for graphs and activations)")
    if kind == "graph_oom_risk":
        return (f"no single change re-planned to fits; lower {graph_flag} or --chunked-prefill-size, or lower "
                f"--mem-fraction-static towards {b.min_mem_fraction_static:.3f}")
    return None


def _mamba_sentence(b: Budget) -> str:
    """How the mamba / linear-attention state pool was sized (kv_cache_configurator.py:3229-3409)."""
    m = b.mamba
    assert m is not None
    head = (f"Before the KV pool SGLang reserves the linear-attention state: {m.per_request_bytes / (1 << 20):.2f} "
            f"MiB per request slot")
    if m.budget_bytes is not None and m.rest_before <= 0:
        head += (f"; nothing is left for it: P*f - W{' - LoRA buffers' if b.lora else ''} = {gib(m.rest_before)}, "
                 f"so --mamba-full-memory-ratio {m.ratio:g} ({m.ratio_source}) gives it no slot")
    elif m.budget_bytes is not None:
        head += (f"; --mamba-full-memory-ratio {m.ratio:g} ({m.ratio_source}) gives it {gib(m.budget_bytes)} of "
                 f"the {gib(m.rest_before)} left after weights, {m.slots:,} slots")
    else:
        head += f"; {m.slots:,} slots from {m.slots_source}"
    if m.error is None:
        head += (f" ({m.slots + 1:,} with the padding slot: {gib(m.state_bytes - m.spec_reserve_bytes)}"
                 + (f", plus {gib(m.spec_reserve_bytes)} of speculative intermediate state"
                    if m.spec_reserve_bytes else "")
                 + f"), at most {m.slots_per_request} slots per running request")
    return head + "."


def explain(b: Budget, *, version: str | None, tp: int, graph_flag: str, swa_fix: str | None = None,
            fix: str | None = None) -> Verdict:
    """The verdict and the sentences that explain it, each with its numbers (``fix``: a change the planner
    re-planned to ``fits``; ``swa_fix``: the smallest --swa-full-tokens-ratio that clears SGLang's SWA check)."""
    kind = classify(b)
    s = [
        f"Before weights each rank has P = {gib(b.pre_weights_free)} free ({b.p_source}): "
        f"{gib(b.gpu_total)} total - {gib(b.driver_reserved + b.cuda_context)} driver + CUDA context - "
        f"{gib(b.nccl_init)} NCCL at init - {gib(b.other_processes)} other processes.",
        f"--mem-fraction-static {b.mem_fraction_static:.3f} ({b.mfs_source}) gives a static limit P*f = "
        f"{gib(b.static_limit)}; weights take W = {gib(b.weights)} ({b.w_source}).",
    ]
    if b.weights_peak > b.weights:
        s.append(f"Loading peaks at {gib(b.weights_peak)}/rank: online quantisation creates every linear in 16 bits "
                 f"and quantises it only after all weights are loaded; the peak must fit in P.")
    if b.lora:
        unknown = b.lora_pm >= b.lora
        s.append(f"LoRA buffers take {gib(b.lora)}"
                 + (f" ± {gib(b.lora_pm)} (the adapters' rank is not known: pass --max-lora-rank, or keep their "
                    f"adapter_config.json where sglwrap can read it)" if unknown else
                    f" ± {gib(b.lora_pm)}" if b.lora_pm else "")
                 + " after the weights, before the KV pool is sized (out of P*f)"
                 + (f"; that is more than the weights leave of P ({gib(b.pre_weights_free - b.weights)}): torch "
                    f"{'would fail' if unknown else 'fails'} allocating them, before any pool is sized."
                    if lora_oom(b) else "."))
    if b.mamba is not None:
        s.append(_mamba_sentence(b))
        if lora_oom(b):
            pass  # SGLang never gets to the state pool
        elif b.mamba_error and b.mamba_error_sure:
            s.append(f"SGLang stops there: {b.mamba_error.removeprefix('RuntimeError: ')}")
        elif b.mamba_error:
            s.append(f"At the nominal budget SGLang would stop there, but the KV budget's ± ({gib(b.kv_pm)}) "
                     f"covers the shortfall: {b.mamba_error.removeprefix('RuntimeError: ')}")
    if b.kv_budget > 0 and b.swa_tokens is not None and b.swa_tokens == b.kv_tokens and b.swa_cell == b.cell_bytes:
        s.append(f"The KV pool gets P*f - W = {gib(b.kv_budget)}; every attention layer is sliding-window, so "
                 f"SGLang builds one SWA pool of {b.kv_tokens:,} tokens of {b.cell_bytes:,} B (page {b.page_size}).")
    elif b.kv_budget > 0 and b.swa_tokens is not None:
        s.append(f"The KV pool gets P*f - W = {gib(b.kv_budget)}, split by SGLang's hybrid SWA rule: "
                 f"{b.kv_budget:,} B // {b.swa_cell:,.1f} B per full token (full layers {b.cell_bytes:,} B + "
                 f"ratio x SWA layers) = {b.kv_tokens:,} full-attention tokens and {b.swa_tokens:,} "
                 f"sliding-window tokens (page {b.page_size}).")
        if b.swa_error:
            s.append(f"SGLang rejects that pool: {b.swa_error.removeprefix('ValueError: ')}")
    elif b.kv_budget > 0 and b.mamba is not None and not b.mamba_error:
        s.append(f"The KV pool gets the rest, {gib(b.kv_budget)} = {b.kv_tokens:,} tokens of {b.cell_bytes:,} B "
                 f"each (full-attention layers only, page {b.page_size}).")
    elif b.kv_budget > 0:
        s.append(f"The KV pool gets P*f - W = {gib(b.kv_budget)} = {b.kv_tokens:,} tokens of "
                 f"{b.cell_bytes:,} B each (page {b.page_size}).")
    else:
        over = "the weights alone exceed P" if b.weights >= b.pre_weights_free else \
            "the weights and the LoRA buffers exceed P" if b.lora else "the weights leave less than a page of P"
        s.append(f"P*f - W{' - LoRA buffers' if b.lora else ''} = {gib(b.kv_budget)}: nothing is left for the KV cache"
                 + (f"; the smallest --mem-fraction-static that holds one page is {b.min_mem_fraction_static:.3f}."
                    if b.min_mem_fraction_static < 1 else
                    f"; no --mem-fraction-static below 1 holds one page ({over})."))
    s.append(f"After the pool, the runtime slack P*(1-f) = {gib(b.slack)} must hold req_to_token "
             f"{gib(b.req_to_token)}, decode graphs {gib(b.decode_graphs)}, prefill graphs {gib(b.prefill_graphs)}, "
             f"activations {gib(b.activations)} and a lazily created NCCL communicator {gib(b.nccl_late)} "
             f"({gib(b.runtime_need)} in all, {gib(b.runtime_free)} left).")
    if b.mem_fraction_static < 1:
        s.append(f"Each extra GiB of NCCL memory before the baseline costs the KV pool "
                 f"{b.mem_fraction_static:.2f} GiB (it shrinks P); one allocated after the baseline but before KV "
                 f"sizing costs a full GiB; one after KV sizing only eats the slack.")
    s.extend(b.notes)
    if b.kv_budget > 0 or b.p_pm:
        s.append(f"Uncertainty (each term's fit, combined as root-sum-square): P ± {gib(b.p_pm)}, W ± "
                 f"{gib(b.w_pm)}, KV budget ± {gib(b.kv_pm)} (± {b.kv_tokens_pm:,} tokens), runtime margin "
                 f"{gib(b.slack - b.runtime_need)} ± {gib(b.margin_pm)}.")
    extras = [(b.draft_weights, "the speculative draft model's weights"), (b.draft_graphs, "draft CUDA graphs"),
              (b.deepep, "DeepEP/NVSHMEM buffers (created at the first MoE dispatch)"), (b.lora, "LoRA buffers")]
    for value, what in extras:
        if value:
            s.append(f"Counted: {what} {gib(value)}.")
    if kind == "fits_tight":
        s.append("Tight: the margin is within the uncertainty of the prediction; feed the real free memory back "
                 "(--avail-before-weights-gib / --weights-gib, or sglwrap diagnose) before relying on it.")
    chosen = swa_fix if (kind == "kv_pool_oom" and b.kv_budget > 0 and b.swa_error and swa_fix) else fix
    if chosen is None and kind not in ("fits", "fits_tight"):
        chosen = fallback_fix(kind, b, graph_flag)
    return Verdict(kind, sglang_error(kind, b, version), chosen, tuple(s))
