"""SGLang 0.5.3 - 0.5.23: chunked prefill and decode-graph max bs from a GPU-memory table, then
``--mem-fraction-static`` = (gpu - reserve) / gpu with the reserve summed term by term.

``ServerArgs._handle_gpu_memory_settings`` (0.5.3 - 0.5.18) and ``srt/arg_groups/memory_hook.py``
``handle_gpu_memory_settings`` (0.5.19+).  One :class:`Terms` per release range says which variant of each term
that range has; :data:`RANGES` lists the ranges with the lines each was read from.
"""

from __future__ import annotations

from sglwrap.record import Record, replace
from sglwrap.versions import Version

from sglwrap.sglang.rules._base import Ctx, Range, bucket, filter_capture, vlm_factor
from sglwrap.sglang.rules.common import custom_all_reduce, decode_graph_flags, page_size

# GPU memory (upper bound in GiB, exclusive; None = the rest) -> (chunked_prefill_size, max_bs at tp < 4,
# max_bs at tp >= 4).  CUDA rows only (the NPU rows of 0.5.4-0.5.6 are left out).
# 0.5.3 server_args.py:566-635
BUCKETS_0_5_3: dict[float | None, tuple[int, int, int]] = {
    20: (2048, 8, 8), 35: (2048, 16, 80), 60: (4096, 32, 160), 90: (8192, 256, 512), 160: (8192, 256, 512),
    None: (16384, 512, 512),
}
# 0.5.5 server_args.py:707-717: the 20-35 GiB row gets max bs 24 at tp < 4
BUCKETS_0_5_5: dict[float | None, tuple[int, int, int]] = {**BUCKETS_0_5_3, 35: (2048, 24, 80)}
# 0.5.20 memory_hook.py:101-117 (unchanged in 0.5.23 memory_hook.py:101-117): 20-35 GiB row 4096 / 48 / 160
BUCKETS_0_5_20: dict[float | None, tuple[int, int, int]] = {**BUCKETS_0_5_3, 35: (4096, 48, 160)}


class Terms(Record):
    """Which variant of each rule a release range has (field comments name the first release with the variant)."""

    first: str
    where: str                   # file:lines of the GPU-memory function in that release
    buckets: dict[float | None, tuple[int, int, int]]
    decode_gen: str              # "0.5.3" | "0.5.5" | "0.5.10" (appends max_bs)
    prefill: str                 # "none" | "optin" (0.5.4-0.5.9) | "piecewise" (0.5.10; speculative decoding
                                 # disables it) | "piecewise11" (0.5.11-0.5.13) | "tc" (0.5.14)
                                 # | "bcg15" (0.5.15-0.5.16) | "bcg17" | "bcg18" | "bcg19" (0.5.19+: pp>1 off)
    prefill_gen: str             # "0.5.4" | "0.5.8" | "0.5.9"
    prefill_max: str             # "4096" (0.5.4-0.5.6 field default) | "chunked" (0.5.7) | "chunked_mla2048" (0.5.8+)
                                 # | "chunked_mla8192" (0.5.23)
    prefill_reserve: str         # "none" | "quarter" (0.5.6) | "eighth" (0.5.7) | "count8" (0.5.8) | "count8_mla"
    spec_reserve_gib: tuple[int, int] | None  # (STANDALONE, other non-NGRAM); None from 0.5.14
    fallback_mfs: float          # mem_fraction_static with no GPU (0.88; 0.95 from 0.5.20)
    decode_term_needs_graph: bool  # 0.5.15+: the max_bs*2 term only with decode graphs on
    cap_by_max_running: bool     # 0.5.22+: default decode max bs <= --max-running-requests
    context_clamp: bool          # 0.5.13-0.5.16: prefill graph max <= --context-length
    attn_default: str            # where the default attention backend is chosen: "runtime" (ModelRunner, 0.5.3-0.5.4),
                                 # "fa3arch" (server args, fa3 only for listed archs, 0.5.5-0.5.6), "fa3arch_trtllm"
                                 # (+ trtllm_mha on SM100, 0.5.7), "fa3arch_trtllm_unguarded" (0.5.6.post1/post2:
                                 # trtllm_mha on SM100 and SM12x, an unset spec topk too), "generic" (0.5.8+)
    trtllm_mha_pages: tuple[int, ...] = (16, 32, 64)


def _decode_sizes(gen: str, max_bs: int, spec: bool, no_padding: bool) -> list[int]:
    """``_generate_cuda_graph_batch_sizes`` (0.5.3 :685-713, 0.5.5 :831-859, 0.5.10 :1344-1375;
    0.5.14 ``_generate_decode_cuda_graph_batch_sizes`` :3331-3362; 0.5.23 cuda_graph_hook.py:500-532)."""
    if no_padding:
        sizes = list(range(1, max_bs + 1))
    elif not spec:
        sizes = ([1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16))
                 + list(range(512, max_bs + 1, 32)))
    else:
        upper = 64 if gen == "0.5.3" else 65
        sizes = (list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, upper, 4)) + list(range(72, 257, 8))
                 + list(range(272, max_bs + 1, 16)))
    sizes = [s for s in sizes if s <= max_bs]
    if gen == "0.5.10" and max_bs not in sizes:
        sizes.append(max_bs)
    return sizes


def _prefill_sizes(gen: str, max_tokens: int) -> list[int]:
    """``_generate_piecewise_cuda_graph_tokens`` (0.5.4 :841-858, 0.5.8 :1069-1087, 0.5.9 :1109-1127) /
    ``generate_prefill_cuda_graph_batch_sizes`` (0.5.14 :3384-3401, 0.5.23 cuda_graph_hook.py:480-497)."""
    head = list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
    if gen == "0.5.4":
        sizes = head + list(range(640, 4096 + 1, 128)) + list(range(4352, max_tokens + 1, 256))
    elif gen == "0.5.8":
        sizes = head + list(range(640, 1024 + 1, 64)) + list(range(1280, 4096 + 1, 256)) + list(
            range(4608, max_tokens + 1, 512))
    else:
        sizes = head + list(range(576, 1024 + 1, 64)) + list(range(1280, 4096 + 1, 256)) + list(
            range(4608, max_tokens + 1, 512))
    return [s for s in sizes if s <= max_tokens]


_MM_0_5_17 = frozenset({"Cohere2VisionForConditionalGeneration", "KimiK25ForConditionalGeneration",
                        "MiniMaxM3SparseForCausalLM", "MiniMaxM3SparseForConditionalGeneration",
                        "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"})
_MM_0_5_18 = _MM_0_5_17 | {"InternS2MobiusForConditionalGeneration", "KimiK3ForConditionalGeneration",
                           "MuseGlimmerForConditionalGeneration"}
_MM_0_5_19 = _MM_0_5_18 | {"PaddleOCRVLForConditionalGeneration"}
_MM_0_5_20 = _MM_0_5_19 | {"Glm5NextForConditionalGeneration"}
_MM_0_5_22 = _MM_0_5_20 | {"Qwen4ExpForConditionalGeneration"}
_MM_0_5_23 = _MM_0_5_22 | {"MuseSparkForConditionalGeneration"}
# Multimodal architectures that keep prefill CUDA graphs (configs/model_config.py: the union of
# multimodal_piecewise_cuda_graph_supported_model_archs and multimodal_breakable_cuda_graph_supported_model_archs
# while both are consulted, 0.5.17 :1839-1855 ... 0.5.21 :2295-2320; the breakable list alone from 0.5.22 :2388-2402,
# 0.5.23 :2501-2516).  Keyed by the first release with that set.
MULTIMODAL_PREFILL_GRAPH_ARCHS: dict[str, frozenset[str]] = {
    "0.5.17": _MM_0_5_17, "0.5.18": _MM_0_5_18, "0.5.19": _MM_0_5_19, "0.5.20": _MM_0_5_20,
    "0.5.22": _MM_0_5_22, "0.5.23": _MM_0_5_23,
}


def _mm_allowed(ctx: Ctx) -> bool:
    v = Version(ctx.version)
    allowed: frozenset[str] = frozenset()
    for first, archs in MULTIMODAL_PREFILL_GRAPH_ARCHS.items():
        if Version(first) <= v:
            allowed = archs
    return any(a in allowed for a in (ctx.model.architectures if ctx.model else ()))


def _prefill_enabled(ctx: Ctx, t: Terms, attn_dp: int) -> tuple[bool, str]:
    """Whether prefill (piecewise / breakable) graphs are captured, and why not."""
    user_off = ctx.flag("disable_cuda_graph")
    if t.prefill == "none":
        return False, "no prefill graphs before 0.5.4"
    # 0.5.4-0.5.13: --disable-cuda-graph leaves piecewise prefill graphs alone (0.5.4 model_runner.py:2165-2173,
    # 0.5.10 :2464-2472 check only the piecewise flags); from 0.5.14 it disables both phases (_parse_cuda_graph_config)
    if t.prefill == "optin":
        return (ctx.flag("enable_piecewise_cuda_graph"),
                "opt-in with --enable-piecewise-cuda-graph (0.5.4-0.5.9)")
    if t.prefill in ("piecewise", "piecewise11"):
        if ctx.flag("disable_piecewise_cuda_graph"):
            return False, "--disable-piecewise-cuda-graph"
        if ctx.flag("enforce_piecewise_cuda_graph"):
            return True, "--enforce-piecewise-cuda-graph"
    else:
        if user_off or ctx.flag("disable_prefill_cuda_graph") or ctx.str_("cuda_graph_backend_prefill") == "disabled":
            return False, "prefill CUDA graph disabled by flag"
        if ctx.str_("cuda_graph_backend_prefill") is not None:
            return True, "--cuda-graph-backend-prefill set explicitly (skips the auto-disable rules)"
    rules: list[tuple[str, bool]] = []
    lora = ctx.flag("enable_lora") or ctx.has("lora_paths")
    a2a = ctx.str_("moe_a2a_backend") not in (None, "none")
    if t.prefill in ("piecewise", "piecewise11", "tc"):
        # 0.5.10 server_args.py:1078-1139 (rule 2: speculative decoding); 0.5.11 :1194-1261 (no speculative rule);
        # 0.5.14 _disable_tc_piecewise_cudagraph_if_incompatible
        rules = [("speculative decoding", t.prefill == "piecewise" and ctx.spec is not None),
                 ("DP attention", attn_dp > 1), ("torch compile", ctx.flag("enable_torch_compile")),
                 ("pipeline parallelism", ctx.pp > 1), ("MoE A2A backend", a2a), ("LoRA", lora),
                 ("multimodal model", ctx.is_multimodal), ("GGUF", ctx.str_("quantization") == "gguf"),
                 ("symmetric memory", ctx.flag("enable_symm_mem")),
                 ("hierarchical cache", ctx.flag("enable_hierarchical_cache")),
                 ("deterministic inference", ctx.flag("enable_deterministic_inference"))]
    elif t.prefill == "bcg15":  # 0.5.15/0.5.16 _disable_breakable_cudagraph_if_incompatible
        rules = [("MLA attention", ctx.is_mla), ("LoRA", lora), ("MoE A2A backend", a2a),
                 ("DP attention", attn_dp > 1), ("multimodal model", ctx.is_multimodal)]
    elif t.prefill == "bcg17":  # 0.5.17 server_args.py _disable_breakable_cudagraph_if_incompatible
        if ctx.is_multimodal and _mm_allowed(ctx):
            ctx.note("prefill CUDA graph: 0.5.17-0.5.21 switch multimodal archs on the piecewise list to tc_piecewise,"
                     " whose rules then apply (0.5.17 server_args.py:4350-4360); modelled with the breakable rules")
        rules = [("MLA attention (non-DSA)", ctx.is_mla), ("two-batch overlap", ctx.flag("enable_two_batch_overlap")),
                 ("multimodal model", ctx.is_multimodal and not _mm_allowed(ctx))]
    else:  # bcg18 / bcg19: 0.5.18 server_args.py; 0.5.23 cuda_graph_hook.py:136-255
        if t.prefill == "bcg19" and ctx.pp > 1:
            return False, ("pipeline parallelism: breakable prefill graphs are opt-in "
                           "(0.5.23 cuda_graph_hook.py:146-162)")
        rules = [("two-batch overlap", ctx.flag("enable_two_batch_overlap")),
                 ("multimodal model", ctx.is_multimodal and not _mm_allowed(ctx))]
    for name, hit in rules:
        if hit:
            return False, f"auto-disabled: {name}"
    if ctx.model is None and t.prefill in ("piecewise", "piecewise11", "tc"):
        ctx.note("prefill CUDA graph: the model-architecture blacklist was not checked (no model traits given)")
    return True, "default on"


# 0.5.5 utils/common.py:2650-2667 ``is_fa3_default_architecture`` (fa3 on Hopper only for these, 0.5.5-0.5.7)
FA3_DEFAULT_ARCHS_0_5_5 = frozenset({
    "Qwen2ForCausalLM", "Llama4ForConditionalGeneration", "LlamaForCausalLM", "Olmo2ForCausalLM",
    "Gemma2ForCausalLM", "Gemma3ForConditionalGeneration", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM",
    "Glm4MoeForCausalLM", "Glm4vMoeForConditionalGeneration", "Step3VLForConditionalGeneration"})


def _attention_default(ctx: Ctx, t: Terms) -> str | None:
    """The default attention backend: 0.5.5 server_args.py:1130-1175 (fa3 for listed archs), 0.5.7 :1511-1565
    (+ trtllm_mha on SM100), 0.5.8+ (no arch list), ``_get_default_attn_backend`` (0.5.12 server_args.py:2579-2646;
    0.5.23 model_override_base.py:277-340)."""
    cap = ctx.capability
    if cap is None:
        ctx.note("attention_backend: GPU capability unknown; SGLang picks at start (fa3 on Hopper, trtllm_mha on "
                 "SM100, flashinfer otherwise)")
        return None
    topk = ctx.given.get("speculative_eagle_topk")
    ps = ctx.int_("page_size", 1)
    no_spec_or_topk1 = topk is None or (int(topk) == 1 and ps == 1)  # type: ignore[call-overload]
    hopper = cap == (9, 0)
    sm100 = cap[0] == 10
    if hopper:
        ctx.note("attention_backend: fa3 on Hopper assumes CUDA >= 12.3 (is_hopper_with_cuda_12_3)")
    if ctx.is_mla:
        return "fa3" if hopper else ("flashinfer" if sm100 else "triton")
    fa3_ok = t.attn_default == "generic" or (ctx.arch in FA3_DEFAULT_ARCHS_0_5_5)
    if t.attn_default != "generic" and ctx.arch is None and hopper:
        ctx.note("attention_backend: fa3 on Hopper only for SGLang's FA3-default architectures; model unknown")
    if hopper and no_spec_or_topk1 and fa3_ok:
        return "fa3"
    # 0.5.6.post1/post2 test is_blackwell() (CC 10.x and 12.x) and take an unset --speculative-eagle-topk for 1
    # (0.5.6.post2 server_args.py:1374-1383); 0.5.7 tests is_sm100_supported() and skips an unset topk under
    # speculative decoding (PR 15127, 0.5.7 server_args.py:1533-1542)
    unguarded = t.attn_default == "fa3arch_trtllm_unguarded"
    blackwell = cap[0] in (10, 12) if unguarded else sm100
    if t.attn_default != "fa3arch" and blackwell and no_spec_or_topk1 and (unguarded or ctx.spec is None
                                                                            or topk is not None):
        return "trtllm_mha"
    ctx.note("attention_backend: flashinfer assumes FlashInfer installed and a model without attention sinks "
             "(else triton)")
    return "flashinfer"


# Architectures that get FlashInfer all-reduce fusion by default, with the release that lists them.
# 0.5.7 server_args.py (model-specific adjustments): on SM90/SM100, tp > 1 from 0.5.10, single node, no DP attn, no A2A
FUSION_ARCHS_0_5_7 = frozenset({"DeepseekV3ForCausalLM", "GptOssForCausalLM", "Glm4MoeForCausalLM",
                                "Qwen3MoeForCausalLM"})
# 0.5.9 server_args.py:1680-1697
FUSION_ARCHS_0_5_9 = FUSION_ARCHS_0_5_7 | {"Glm4MoeLiteForCausalLM", "KimiK25ForConditionalGeneration"}
# 0.5.13 server_args.py:2627-2651
FUSION_ARCHS_0_5_13 = FUSION_ARCHS_0_5_9 | {"DeepseekV32ForCausalLM", "GlmMoeDsaForCausalLM",
                                            "MistralLarge3ForCausalLM", "Qwen3NextForCausalLM",
                                            "InternS2PreviewForConditionalGeneration"}
# 0.5.23 arg_groups/overrides.py:928-951
FUSION_ARCHS_0_5_23 = FUSION_ARCHS_0_5_13 | {
    "DeepseekV4ForCausalLM", "Qwen3VLMoeForConditionalGeneration", "Qwen4ExpForConditionalGeneration",
    "Qwen3_5MoeForConditionalGeneration", "Qwen3_5ForConditionalGeneration", "NemotronHForCausalLM",
    "NemotronHPuzzleForCausalLM", "NemotronH_Omni_Reasoning_V3"}


def _auto_paths(ctx: Ctx, t: Terms, attn_dp: int) -> None:
    v = Version(ctx.version)
    arch, cap = ctx.arch, ctx.capability
    sm90_100 = cap is not None and (cap == (9, 0) or cap[0] == 10)
    if v >= Version("0.5.7") and arch is not None and cap is not None:
        archs = (FUSION_ARCHS_0_5_23 if v >= Version("0.5.16") else FUSION_ARCHS_0_5_13 if v >= Version("0.5.12")
                 else FUSION_ARCHS_0_5_9 if v >= Version("0.5.9") else FUSION_ARCHS_0_5_7)
        if (arch in archs and sm90_100 and attn_dp == 1 and ctx.int_("nnodes", 1) == 1
                and ctx.str_("moe_a2a_backend") in (None, "none") and (v < Version("0.5.10") or ctx.tp > 1)
                and not (ctx.gpu and ctx.gpu.name and "H20" in ctx.gpu.name and "H200" not in ctx.gpu.name)):
            ctx.enable("flashinfer_allreduce_fusion")
            list_src = "0.5.23 overrides.py:928-1003 list, applied to 0.5.16+" if v >= Version("0.5.16") else t.where
            ctx.note(f"flashinfer_allreduce_fusion: auto-enabled for this architecture on SM90/SM100 ({list_src})")
    elif v < Version("0.5.7") and arch == "GptOssForCausalLM" and cap is not None and cap[0] == 10 and attn_dp == 1:
        ctx.enable("flashinfer_allreduce_fusion")  # 0.5.3 server_args.py:748-752 (GptOss on SM100)
    if ctx.flag("enable_symm_mem"):
        ctx.note("symm_mem: --enable-symm-mem preallocates 4 GiB unless SGLANG_SYMM_MEM_PREALLOC_GB_SIZE is set "
                 "(0.5.9+ GPU-memory settings)")
    if attn_dp > 1:
        ctx.enable("dp_attention_side_effects")


def _resolve_terms(ctx: Ctx, t: Terms) -> None:
    v = Version(ctx.version)
    attn_dp = ctx.attn_dp(needs_dp_gt_1=True)
    if ctx.flag("enable_dp_attention") and attn_dp == 1:
        ctx.note("--enable-dp-attention with dp_size 1 is switched off (_handle_data_parallelism)")
    where = ctx.cite(t.where)
    cps, max_bs, bs_src, sizes = _decode_defaults(ctx, t, where)
    decode_on = decode_graph_flags(ctx, torch_native_disables=True, per_phase_flags=v >= Version("0.5.14"),
                                   where=t.where)
    pre_on, pmax, pre_sizes = _prefill_graphs(ctx, t, attn_dp, cps)
    _mem_fraction(ctx, t, where, cps=cps, max_bs=max_bs, decode_on=decode_on, attn_dp=attn_dp,
                  pre_term=_prefill_reserve(ctx, t, pre_on, pmax, pre_sizes))
    if v >= Version("0.5.16"):
        ctx.note("mem_fraction_static: SGLANG_ENABLE_POST_CAPTURE_KV_SIZING=1 (off by default) replaces the graph/"
                 "activation reserve with 512 MiB (1536 from 0.5.18) + tp*pp/8 GiB; not modelled")
    # ---- DP attention divides chunked prefill after the memory settings (_handle_data_parallelism)
    if attn_dp > 1 and cps > 0:
        ctx.put("chunked_prefill_size", cps // attn_dp,
                ctx.cite("parallel_hook.py _handle_data_parallelism" if v >= Version("0.5.19")
                         else "server_args.py _handle_data_parallelism"))
        ctx.note(f"DP attention: chunked prefill {cps} divided by {attn_dp} per rank after the memory settings")
    # ---- decode graphs
    capture = filter_capture(sizes, ctx, max_bs, "cuda_graph_runner.py get_batch_sizes_to_capture")
    ctx.put("decode_cuda_graph", decode_on, where)
    ctx.put("cuda_graph_max_bs", max_bs if decode_on else 0, bs_src)
    ctx.put("cuda_graph_bs", tuple(capture) if decode_on else (), bs_src)
    ctx.put("prefill_cuda_graph", pre_on, where)
    ctx.put("prefill_graph_sizes", tuple(pre_sizes) if pre_on else (), where)
    _max_running_requests(ctx, where)
    backend = _attention_backend(ctx, t, where)
    page_size(ctx, backend, where="_handle_attention_backend_compatibility", trtllm=True,
              mha_pages=t.trtllm_mha_pages)
    _auto_paths(ctx, t, attn_dp)
    custom_all_reduce(ctx, "disable_custom_all_reduce")


def _decode_defaults(ctx: Ctx, t: Terms, where: str) -> tuple[int, int, str, list[int]]:
    """Chunked prefill and the decode graph sizes, from the GPU-memory table unless given:
    ``(chunked_prefill_size, max_bs, max_bs source, batch sizes)``."""
    gpu_mem = ctx.gpu_mem
    if gpu_mem is not None:
        cps_d, bs_lo, bs_hi = bucket(t.buckets, gpu_mem)
        bs_d = bs_lo if ctx.tp < 4 else bs_hi
    else:
        cps_d, bs_d = 4096, 160
        ctx.note(f"GPU memory unknown: SGLang's fallbacks chunked prefill 4096, graph max bs 160, mem fraction "
                 f"{t.fallback_mfs} ({where})")
    cps = int(ctx.take("chunked_prefill_size", cps_d, where))  # type: ignore[call-overload]
    user_bs = ctx.given.get("cuda_graph_max_bs")
    max_bs = int(user_bs) if user_bs is not None else bs_d  # type: ignore[call-overload]
    bs_src = "user" if user_bs is not None else where
    mrr = ctx.given.get("max_running_requests")
    if (t.cap_by_max_running and user_bs is None and mrr is not None
            and max_bs > int(mrr)):  # type: ignore[call-overload]
        max_bs = int(mrr)  # type: ignore[call-overload]
        bs_src = ctx.cite("memory_hook.py:182-188")
    if ctx.has("cuda_graph_bs"):
        sizes = sorted(int(b) for b in ctx.given["cuda_graph_bs"])  # type: ignore[attr-defined]
        max_bs, bs_src = max(sizes), "user"
    else:
        sizes = _decode_sizes(t.decode_gen, max_bs, ctx.spec is not None, ctx.flag("disable_cuda_graph_padding"))
    return cps, max_bs, bs_src, sizes


def _prefill_graphs(ctx: Ctx, t: Terms, attn_dp: int, cps: int) -> tuple[bool, int, list[int]]:
    """Prefill CUDA graphs: ``(on, largest size, sizes)``; a note says why they are off."""
    pre_on, why = _prefill_enabled(ctx, t, attn_dp)
    pre_sizes: list[int] = []
    pmax = 0
    if t.prefill != "none":
        pmax = _prefill_max(ctx, t, cps)
        pre_sizes = _prefill_sizes(t.prefill_gen, pmax)
    if not pre_on and t.prefill != "none":
        ctx.note(f"prefill CUDA graph off: {why}")
    return pre_on, pmax, pre_sizes


def _prefill_max(ctx: Ctx, t: Terms, cps: int) -> int:
    """The largest prefill graph size: given, fixed at 4096, or chunked prefill with the release's clamps."""
    v = Version(ctx.version)
    if ctx.has("cuda_graph_max_bs_prefill") or ctx.has("piecewise_cuda_graph_max_tokens"):
        pmax = ctx.int_("cuda_graph_max_bs_prefill", ctx.int_("piecewise_cuda_graph_max_tokens", 0))
    elif t.prefill_max == "4096":
        pmax = 4096
    else:
        pmax = cps
        if ctx.is_mla and t.prefill_max == "chunked_mla2048":
            pmax = 2048
        elif ctx.is_mla and t.prefill_max == "chunked_mla8192":
            pmax = min(8192, cps)
        if v >= Version("0.5.10") and ctx.has("max_total_tokens"):
            pmax = min(pmax, ctx.int_("max_total_tokens", pmax))
        if v >= Version("0.5.10") and "llama-2" in str(ctx.given.get("model_path", "")).lower():
            pmax = min(pmax, 4096)
    if t.context_clamp and ctx.has("context_length"):
        pmax = min(pmax, ctx.int_("context_length", pmax))
    return pmax


def _prefill_reserve(ctx: Ctx, t: Terms, pre_on: bool, pmax: int, pre_sizes: list[int]) -> float:
    """MiB the release reserves for prefill graphs (0 when they are off)."""
    if not pre_on:
        return 0.0
    if t.prefill_reserve == "quarter":  # 0.5.6 server_args.py:855-857
        return float(pmax // 4)
    if t.prefill_reserve == "eighth":  # 0.5.7 server_args.py:943-945
        return float(pmax // 8)
    if t.prefill_reserve == "count8":
        return len(pre_sizes) * 8.0
    if t.prefill_reserve == "count8_mla":
        return 1.5 * 1024 if ctx.is_mla else len(pre_sizes) * 8.0
    return 0.0


def _mem_fraction(ctx: Ctx, t: Terms, where: str, *, cps: int, max_bs: int, decode_on: bool, attn_dp: int,
                  pre_term: float) -> None:
    """mem_fraction_static (and the reserve behind it): the user's, else the release's terms."""
    v = Version(ctx.version)
    gpu_mem = ctx.gpu_mem
    if ctx.has("mem_fraction_static"):
        ctx.put("mem_fraction_static", float(ctx.given["mem_fraction_static"]), "user")  # type: ignore[arg-type]
        ctx.values["mem_fraction_static_source"] = "user"
        ctx.put("reserved_mib", None, "user")
        return
    reserved = _reserved_mib(ctx, t, cps=cps, max_bs=max_bs, decode_on=decode_on, attn_dp=attn_dp,
                             pre_term=pre_term)
    if gpu_mem is not None:
        frac = round((gpu_mem - reserved) / gpu_mem, 3)
    else:
        frac = t.fallback_mfs
    if ctx.is_multimodal and not (v >= Version("0.5.9") and (ctx.flag("language_only")
                                                             or ctx.flag("language_model_only"))):
        frac *= vlm_factor(ctx.model)
        ctx.note("multimodal: mem_fraction_static x 0.95 x ViT-size factor (adjust_mem_fraction_for_vlm)")
    ctx.put("mem_fraction_static", frac, where)
    ctx.values["mem_fraction_static_source"] = "default"
    ctx.put("reserved_mib", reserved if gpu_mem is not None else None, where)


def _reserved_mib(ctx: Ctx, t: Terms, *, cps: int, max_bs: int, decode_on: bool, attn_dp: int,
                  pre_term: float) -> float:
    """The MiB the release keeps out of mem_fraction_static: activations, graphs, TP/PP, DP attention, draft."""
    v = Version(ctx.version)
    gpu_mem = ctx.gpu_mem
    activation = max(cps, 2048) if cps > 0 else max(ctx.int_("max_prefill_tokens", 16384), 2048)
    reserved = 512 + activation * 1.5
    if decode_on or not t.decode_term_needs_graph:
        reserved += max_bs * 2
    reserved += ctx.tp * ctx.pp / 8 * 1024
    if attn_dp > 1:
        reserved += max_bs * attn_dp * 3
        if max_bs > 300:
            reserved += max_bs * attn_dp * 1.5
    early_pre = t.prefill_reserve in ("count8", "count8_mla")  # 0.5.8+: before the 10 GiB floor
    if early_pre:
        reserved += pre_term
    if gpu_mem is not None and gpu_mem > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    if t.spec_reserve_gib is not None and ctx.spec is not None and ctx.spec != "NGRAM":
        reserved += (t.spec_reserve_gib[0] if ctx.spec == "STANDALONE" else t.spec_reserve_gib[1]) * 1024
    if not early_pre:
        reserved += pre_term
    if v >= Version("0.5.15") and decode_on and ctx.str_("moe_a2a_backend") == "deepep":
        reserved += 2 * 1024
    return reserved


def _max_running_requests(ctx: Ctx, where: str) -> None:
    """The user's max_running_requests, else 48 with speculative decoding, else None (sized at load)."""
    mrr = ctx.given.get("max_running_requests")
    if mrr is not None:
        ctx.put("max_running_requests", int(mrr), "user")  # type: ignore[call-overload]
    elif ctx.spec in ("EAGLE", "EAGLE3", "STANDALONE", "NGRAM", "DFLASH"):
        ctx.put("max_running_requests", 48, ctx.cite("_handle_speculative_decoding (max_running_requests 48)"))
    else:
        ctx.put("max_running_requests", None, where)
        ctx.note("max_running_requests: None here; SGLang derives it from the KV pool size at load")


def _attention_backend(ctx: Ctx, t: Terms, where: str) -> str | None:
    """The attention backend: the user's, GptOss's per-GPU choice, the release's generic default, or decided at
    load (None)."""
    v = Version(ctx.version)
    backend = ctx.str_("attention_backend")
    if backend is not None:
        ctx.put("attention_backend", backend, "user")
    elif ctx.arch == "GptOssForCausalLM" and ctx.capability is not None:
        cap = ctx.capability
        backend = "trtllm_mha" if cap[0] == 10 else ("fa3" if cap == (9, 0) else "triton")
        ctx.put("attention_backend", backend, ctx.cite("model-specific adjustments (GptOssForCausalLM)"))
    elif t.attn_default != "runtime":
        backend = _attention_default(ctx, t)
        ctx.put("attention_backend", backend,
                ctx.cite("model_override_base.py:277-340" if v >= Version("0.5.19")
                         else "server_args.py _get_default_attn_backend"))
        ctx.note("attention_backend: SGLang's generic default; per-model overrides are not modelled")
    else:
        ctx.put("attention_backend", None, ctx.cite("model_runner.py model_specific_adjustment"))
        ctx.note("attention_backend: decided in ModelRunner at load (fa3 on Hopper, flashinfer or triton otherwise)")
    return backend


def _range(first: str, label: str, terms: Terms) -> Range:
    return Range(first, label, lambda ctx: _resolve_terms(ctx, terms))


_BASE = Terms(first="0.5.3", where="server_args.py:542-713", buckets=BUCKETS_0_5_3, decode_gen="0.5.3",
              prefill="none", prefill_gen="0.5.4", prefill_max="4096", prefill_reserve="none",
              spec_reserve_gib=(6, 2), fallback_mfs=0.88, decode_term_needs_graph=False, cap_by_max_running=False,
              context_clamp=False, attn_default="runtime")


def _t(first: str, where: str, **changes: object) -> Terms:
    from sglwrap.record import replace
    return replace(_BASE, first=first, where=where, **changes)  # type: ignore[arg-type]


T_0_5_3 = _BASE
T_0_5_4 = _t("0.5.4", "server_args.py:643-858", prefill="optin")                       # piecewise opt-in
T_0_5_5 = _t("0.5.5", "server_args.py:665-878,1130-1175", prefill="optin", buckets=BUCKETS_0_5_5, decode_gen="0.5.5",
             attn_default="fa3arch")
T_0_5_6 = _t("0.5.6", "server_args.py:701-918,1280-1325", prefill="optin", buckets=BUCKETS_0_5_5,
             decode_gen="0.5.5", prefill_reserve="quarter", attn_default="fa3arch")  # reserve :855-857
T_0_5_7 = _t("0.5.7", "server_args.py:803-1006,1511-1565", prefill="optin", buckets=BUCKETS_0_5_5,
             decode_gen="0.5.5", prefill_max="chunked", prefill_reserve="eighth",  # :900-903, :943-945
             attn_default="fa3arch_trtllm")
T_0_5_8 = _t("0.5.8", "server_args.py:879-1087", prefill="optin", buckets=BUCKETS_0_5_5, decode_gen="0.5.5",
             prefill_gen="0.5.8", prefill_max="chunked_mla2048", prefill_reserve="count8", attn_default="generic")
T_0_5_9 = _t("0.5.9", "server_args.py:911-1127", prefill="optin", buckets=BUCKETS_0_5_5, decode_gen="0.5.5",
             prefill_gen="0.5.9", prefill_max="chunked_mla2048", prefill_reserve="count8", attn_default="generic")
T_0_5_10 = _t("0.5.10", "server_args.py:1078-1139,1141-1415", prefill="piecewise", buckets=BUCKETS_0_5_5,
              decode_gen="0.5.10", prefill_gen="0.5.9", prefill_max="chunked_mla2048", prefill_reserve="count8_mla",
              spec_reserve_gib=(6, 4), attn_default="generic")
T_0_5_11 = _t("0.5.11", "server_args.py:1194-1261,1294-1568", prefill="piecewise11", buckets=BUCKETS_0_5_5,
              decode_gen="0.5.10", prefill_gen="0.5.9", prefill_max="chunked_mla2048", prefill_reserve="count8_mla",
              spec_reserve_gib=(6, 4), attn_default="generic")
T_0_5_12 = _t("0.5.12", "server_args.py:1401-1675,2579-2646", prefill="piecewise11", buckets=BUCKETS_0_5_5,
              decode_gen="0.5.10", prefill_gen="0.5.9", prefill_max="chunked_mla2048", prefill_reserve="count8_mla",
              spec_reserve_gib=(6, 4), attn_default="generic")
T_0_5_13 = _t("0.5.13", "server_args.py:1444-1726", prefill="piecewise11", buckets=BUCKETS_0_5_5,
              decode_gen="0.5.10", prefill_gen="0.5.9", prefill_max="chunked_mla2048", prefill_reserve="count8_mla",
              spec_reserve_gib=(6, 4), attn_default="generic", context_clamp=True)
T_0_5_14 = _t("0.5.14", "server_args.py:2915-3401", prefill="tc", buckets=BUCKETS_0_5_5, decode_gen="0.5.10",
              prefill_gen="0.5.9", prefill_max="chunked_mla2048", prefill_reserve="count8_mla",
              spec_reserve_gib=None, attn_default="generic", context_clamp=True)
T_0_5_15 = _t("0.5.15", "server_args.py:3469-3776", prefill="bcg15", buckets=BUCKETS_0_5_5, decode_gen="0.5.10",
              prefill_gen="0.5.9", prefill_max="chunked_mla2048", prefill_reserve="count8_mla",
              spec_reserve_gib=None, attn_default="generic", context_clamp=True, decode_term_needs_graph=True)
T_0_5_17 = _t("0.5.17", "server_args.py:4607-5007", prefill="bcg17", buckets=BUCKETS_0_5_5, decode_gen="0.5.10",
              prefill_gen="0.5.9", prefill_max="chunked_mla2048", prefill_reserve="count8_mla",
              spec_reserve_gib=None, attn_default="generic", decode_term_needs_graph=True)
T_0_5_18 = _t("0.5.18", "server_args.py:4802-5203", prefill="bcg18", buckets=BUCKETS_0_5_5, decode_gen="0.5.10",
              prefill_gen="0.5.9", prefill_max="chunked_mla2048", prefill_reserve="count8_mla",
              spec_reserve_gib=None, attn_default="generic", decode_term_needs_graph=True)
T_0_5_19 = _t("0.5.19", "arg_groups/memory_hook.py:26-350", prefill="bcg19", buckets=BUCKETS_0_5_5,
              decode_gen="0.5.10", prefill_gen="0.5.9", prefill_max="chunked_mla2048",
              prefill_reserve="count8_mla", spec_reserve_gib=None, attn_default="generic", decode_term_needs_graph=True)
T_0_5_20 = _t("0.5.20", "arg_groups/memory_hook.py:47-409", prefill="bcg19", buckets=BUCKETS_0_5_20,
              decode_gen="0.5.10", prefill_gen="0.5.9", prefill_max="chunked_mla2048",
              prefill_reserve="count8_mla", spec_reserve_gib=None, attn_default="generic", decode_term_needs_graph=True,
              fallback_mfs=0.95)
T_0_5_22 = _t("0.5.22", "arg_groups/memory_hook.py:47-418", prefill="bcg19", buckets=BUCKETS_0_5_20,
              decode_gen="0.5.10", prefill_gen="0.5.9", prefill_max="chunked_mla2048",
              prefill_reserve="count8_mla", spec_reserve_gib=None, attn_default="generic", decode_term_needs_graph=True,
              fallback_mfs=0.95, cap_by_max_running=True)
T_0_5_23 = _t("0.5.23", "arg_groups/memory_hook.py:47-414", prefill="bcg19", buckets=BUCKETS_0_5_20,
              decode_gen="0.5.10", prefill_gen="0.5.9", prefill_max="chunked_mla8192",
              prefill_reserve="count8_mla", spec_reserve_gib=None, attn_default="generic", decode_term_needs_graph=True,
              fallback_mfs=0.95, cap_by_max_running=True, trtllm_mha_pages=(16, 32, 64, 128))

# Post releases that carried the next release's defaults (found by ``python -m sglwrap.sglang.check_defaults``:
# tests/fixtures/sglang_defaults/0.5.4.post2.json, 0.5.6.post1.json agree with these rules on every grid case;
# 0.5.4.post1 matches neither 0.5.4 nor 0.5.5 and keeps 0.5.4's rules).  The cited lines are the later release's.
# 0.5.6.post1/post2 carry 0.5.7's backend default without its PR 15127 guard and with is_blackwell() (CC 10 and 12)
# for is_sm100_supported(): the grid's RTX PRO 6000 cases refuse ("TRTLLM MHA backend is only supported on Blackwell
# GPUs (SM100)"), the B200 ones set the topk.
T_0_5_6_POST1 = replace(T_0_5_7, attn_default="fa3arch_trtllm_unguarded")
_POST_BACKPORTS = (("0.5.4.post2", T_0_5_5), ("0.5.6.post1", T_0_5_6_POST1))

RANGES = tuple(sorted(
    [_range(t.first, f"{t.first}: {t.where}", t) for t in (
        T_0_5_3, T_0_5_4, T_0_5_5, T_0_5_6, T_0_5_7, T_0_5_8, T_0_5_9, T_0_5_10, T_0_5_11, T_0_5_12, T_0_5_13,
        T_0_5_14, T_0_5_15, T_0_5_17, T_0_5_18, T_0_5_19, T_0_5_20, T_0_5_22, T_0_5_23)]
    + [_range(post, f"{post}: {t.first}'s rules ({t.where})", t) for post, t in _POST_BACKPORTS],
    key=lambda rg: Version(rg.first)))
