"""Steps whose rule is the same text across many releases; each takes the citation of the range that calls it."""

from __future__ import annotations

from sglwrap.sglang.rules._base import Ctx


def custom_all_reduce(ctx: Ctx, where: str) -> None:
    """Custom all-reduce is on for TP > 1 unless ``--disable-custom-all-reduce`` (every release; ``where`` cites it).

    Whether it really runs (P2P / NVLink, world size <= 8) is decided at load time: noted, not modelled here.
    """
    if ctx.tp > 1 and not ctx.flag("disable_custom_all_reduce"):
        ctx.enable("custom_all_reduce")
        ctx.note(f"custom_all_reduce: requested by default for tp > 1; it still checks P2P/NVLink at load ({where})")


def decode_graph_flags(ctx: Ctx, *, torch_native_disables: bool, per_phase_flags: bool, where: str) -> bool:
    """Whether decode CUDA graphs are captured: off with ``--disable-cuda-graph`` (all releases), with the torch_native
    attention backend (0.4.0+), and with the per-phase switches (0.5.14+)."""
    off = ctx.flag("disable_cuda_graph")
    if torch_native_disables and ctx.str_("attention_backend") in ("torch_native", "flex_attention"):
        off = True
        ctx.note(f"decode CUDA graphs: off with attention backend {ctx.str_('attention_backend')} ({where})")
    if per_phase_flags and (ctx.flag("disable_decode_cuda_graph")
                            or ctx.str_("cuda_graph_backend_decode") == "disabled"):
        off = True
    return not off


def page_size(ctx: Ctx, backend: str | None, *, where: str, trtllm: bool,
              mha_pages: tuple[int, ...] = (16, 32, 64)) -> None:
    """``--page-size`` with the backends that force it: flashmla 64 (0.4.6+), cutlass_mla 128 (0.4.9+),
    trtllm_mla 64 unless 32/64 and trtllm_mha 64 unless in ``mha_pages`` (0.5.1+, ``trtllm``; 0.5.23 allows 128).
    """
    ps = ctx.int_("page_size", 1)
    src = "user" if ctx.has("page_size") else ctx.cite(where)
    decode = ctx.str_("decode_attention_backend")
    if backend == "flashmla" or decode == "flashmla":
        ps, src = 64, ctx.cite(where)
    elif backend == "cutlass_mla" or decode == "cutlass_mla":
        ps, src = 128, ctx.cite(where)
    elif trtllm and (backend == "trtllm_mla" or decode == "trtllm_mla") and ps not in (32, 64):
        ps, src = 64, ctx.cite(where)
    elif trtllm and (backend == "trtllm_mha" or decode == "trtllm_mha") and ps not in mha_pages:
        ps, src = 64, ctx.cite(where)
    ctx.put("page_size", ps, src)


def spec_max_running_requests(ctx: Ctx, algos: tuple[str, ...], where: str) -> None:
    """``--max-running-requests`` defaults to 48 under EAGLE-family speculative decoding (0.4.6+; ``algos``
    per range)."""
    if ctx.has("max_running_requests"):
        ctx.put("max_running_requests", int(ctx.given["max_running_requests"]), "user")  # type: ignore[call-overload]
    elif ctx.spec in algos:
        ctx.put("max_running_requests", 48, ctx.cite(where))
    else:
        ctx.put("max_running_requests", None, ctx.cite(where))
        ctx.note("max_running_requests: None here; SGLang derives it from the KV pool size at load")
