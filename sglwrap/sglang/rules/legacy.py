"""SGLang 0.2.15 - 0.4.7: ``--mem-fraction-static`` from a TP-size ladder (no reserve formula).

Ranges (each starts at a release read in full; releases in between take the rules of the range they fall in):

- 0.2.15 <= v < 0.3.5.post2   server_args.py:98-127 (0.2.15 and 0.3.0 are byte-identical), model_runner.py:485-511
- 0.3.5.post2 <= v < 0.3.6   0.2.15's ladder, 0.3.6's < 25000 MiB rule (server_args.py:157-174)
- 0.3.6  <= v < 0.4.0   server_args.py:140-205, cuda_graph_runner.py:119-129
- 0.4.0  <= v < 0.4.1   server_args.py:141-219, cuda_graph_runner.py:128-138
- 0.4.1  <= v < 0.4.3.post3   0.4.3 server_args.py:173-284, cuda_graph_runner.py:109-135 (0.4.1 already has the
                        tp >= 4 graph max bs 80 below 25000 MiB; 0.4.1/0.4.2 checked against their ServerArgs)
- 0.4.3.post3 <= v < 0.4.4.post1   0.4.4 server_args.py:182-284 (EAGLE keeps chunked prefill),
                        cuda_graph_runner.py:109-141
- 0.4.4.post1 <= v < 0.4.4.post4   as 0.4.4, DP attention divides chunked prefill by dp_size
- 0.4.4.post4 <= v < 0.4.5.post3   0.4.5 server_args.py:198-333 (DP attention / dp_size), cuda_graph_runner.py:112-143
- 0.4.5.post3 <= v < 0.4.6   0.4.6's rules; the runner extends to 256 above 81920 MiB at any DP size
- 0.4.6  <= v < 0.4.6.post2   server_args.py:200-388, cuda_graph_runner.py:119-155, model_runner.py:234-265
- 0.4.6.post2 <= v < 0.4.7   above 96 GiB min(f + 48 GiB (1 - f) / gpu, (gpu - 18 GiB) / gpu); the runner's
                        0.4.6 lists extended to 256 above 96 GiB (checked against post2 and post5's ServerArgs)
- 0.4.7  <= v < 0.4.7.post1   server_args.py:253-356 (big-GPU fraction, x 0.95 with speculative decoding),
                        cuda_graph_runner.py:129-177 (0.4.8's list with 96 GiB / 180 GB steps)
"""

from __future__ import annotations

from sglwrap.sglang.rules._base import Ctx, Range, filter_capture, tp_fraction
from sglwrap.sglang.rules.bucket_reserve import runner_sizes
from sglwrap.sglang.rules.common import custom_all_reduce, decode_graph_flags, page_size, spec_max_running_requests

# 0.2.15 server_args.py:109-119 (0.3.0 identical)
TP_LADDER_0_2_15 = {16: 0.79, 8: 0.83, 4: 0.85, 2: 0.87, 1: 0.88}
# 0.3.6 server_args.py:156-166
TP_LADDER_0_3_6 = {16: 0.79, 8: 0.82, 4: 0.85, 2: 0.87, 1: 0.88}
# 0.4.0 server_args.py:158-168 (unchanged in 0.4.3 server_args.py:195-205 and 0.4.6 server_args.py:224-235)
TP_LADDER_0_4_0 = {16: 0.79, 8: 0.81, 4: 0.85, 2: 0.87, 1: 0.88}


def _mfs(ctx: Ctx, default: float, where: str) -> None:
    if ctx.has("mem_fraction_static"):
        ctx.put("mem_fraction_static", float(ctx.given["mem_fraction_static"]), "user")  # type: ignore[arg-type]
        ctx.values["mem_fraction_static_source"] = "user"
    else:
        ctx.put("mem_fraction_static", default, ctx.cite(where))
        ctx.values["mem_fraction_static_source"] = "default"
    ctx.put("reserved_mib", None, ctx.cite(where))


def _no_prefill_graph(ctx: Ctx, where: str) -> None:
    ctx.put("prefill_cuda_graph", False, ctx.cite(where))
    ctx.put("prefill_graph_sizes", (), ctx.cite(where))


def _decode(ctx: Ctx, on: bool, max_bs: int, sizes: list[int], where: str) -> None:
    src = "user" if ctx.has("cuda_graph_max_bs") or ctx.has("cuda_graph_bs") else ctx.cite(where)
    ctx.put("decode_cuda_graph", on, ctx.cite(where))
    ctx.put("cuda_graph_max_bs", max_bs if on else 0, src)
    ctx.put("cuda_graph_bs", tuple(sizes) if on else (), src)


def _gpu_mem_or_note(ctx: Ctx, where: str) -> float | None:
    if ctx.gpu_mem is None:
        ctx.note(f"GPU memory unknown: this release reads nvidia-smi unconditionally; rules applied as for a GPU "
                 f">= 25000 MiB ({where})")
    return ctx.gpu_mem


# ---- 0.2.15 <= v < 0.3.6 ----------------------------------------------------------------------------------------
def resolve_0_2_15(ctx: Ctx) -> None:
    """0.2.15 / 0.3.0: TP ladder; chunked prefill 8192 (<= 0 disables); graphs for bs [1,2,4,8..160]."""
    _mfs(ctx, tp_fraction(TP_LADDER_0_2_15, ctx.tp), "server_args.py:109-119")
    cps = ctx.int_("chunked_prefill_size", 8192)  # dataclass default 8192, server_args.py:54
    ctx.put("chunked_prefill_size", cps if cps > 0 else -1,
            "user" if ctx.has("chunked_prefill_size") else ctx.cite("server_args.py:54,105-107"))
    # model_runner.py:387-400: an MLA model with --enable-mla runs Triton MLA and sets disable_flashinfer
    mla_triton = ctx.is_mla and ctx.flag("enable_mla")
    if mla_triton:
        ctx.note("MLA with --enable-mla: flashinfer and therefore decode CUDA graphs are off (model_runner.py:387-400,"
                 " 493-495)")
    # model_runner.py:493-502: graphs off with --disable-cuda-graph or --disable-flashinfer; fixed batch list
    on = not (ctx.flag("disable_cuda_graph") or ctx.flag("disable_flashinfer") or mla_triton)
    if ctx.flag("disable_cuda_graph_padding"):
        sizes = list(range(1, 32)) + [64, 128]
    else:
        sizes = [1, 2, 4] + [i * 8 for i in range(1, 21)]
    if ctx.has("cuda_graph_max_bs"):
        ctx.note("--cuda-graph-max-bs does not exist before 0.3.x; the capture list is fixed (model_runner.py:499-502)")
    _decode(ctx, on, max(sizes), sizes,
            "model_runner.py:493-502")
    _no_prefill_graph(ctx, "model_runner.py:485-511")
    ctx.put("max_running_requests", ctx.given.get("max_running_requests"),
            "user" if ctx.has("max_running_requests") else ctx.cite("server_args.py:51"))
    ctx.put("page_size", 1, ctx.cite("(no paged KV option in this release)"))
    backend = "triton" if ctx.flag("disable_flashinfer") or mla_triton else "flashinfer"
    ctx.put("attention_backend", backend, ctx.cite("model_runner.py:387-400,423-430"))
    ctx.note("attention_backend: flashinfer assumed installed (--disable-flashinfer or Triton MLA: triton; "
             "model_runner.py:423-430)")
    custom_all_reduce(ctx, "model_runner.py:132")


# ---- 0.3.6 <= v < 0.4.0 -----------------------------------------------------------------------------------------
def resolve_0_3_5_post2(ctx: Ctx) -> None:
    """0.3.5.post2: 0.2.15's ladder (0.83 at TP 8, server_args.py:157-165) with 0.3.6's small-GPU rule (:169-174:
    < 25000 MiB quarters chunked prefill, graph max bs 4) and --cuda-graph-max-bs (:132, default 160)."""
    _resolve_0_3_6(ctx, TP_LADDER_0_2_15, "server_args.py:157-165")


def resolve_0_3_6(ctx: Ctx) -> None:
    """0.3.6: ladder (0.82 at TP 8); < 25000 MiB quarters chunked prefill and forces graph max bs 4."""
    _resolve_0_3_6(ctx, TP_LADDER_0_3_6, "server_args.py:156-166")


def _resolve_0_3_6(ctx: Ctx, ladder: dict[int, float], ladder_where: str) -> None:
    _mfs(ctx, tp_fraction(ladder, ctx.tp), ladder_where)
    gpu_mem = _gpu_mem_or_note(ctx, "server_args.py:169-172")
    cps = ctx.int_("chunked_prefill_size", 8192)  # server_args.py:63
    cps_src = "user" if ctx.has("chunked_prefill_size") else ctx.cite("server_args.py:63")
    max_bs = ctx.int_("cuda_graph_max_bs", 160)  # server_args.py:132
    bs_src = "user" if ctx.has("cuda_graph_max_bs") else ctx.cite("server_args.py:132")
    if cps <= 0:
        cps = -1  # server_args.py:148-150: disabled (None)
    if gpu_mem is not None and gpu_mem < 25000:  # server_args.py:173-176: also rewrites the user's values
        if cps > 0:
            cps //= 4
        cps_src = max_bs_src = ctx.cite("server_args.py:173-176")
        max_bs, bs_src = 4, max_bs_src
        if cps == -1:
            ctx.note("chunked prefill disabled on a < 25000 MiB GPU: 0.3.6 computes None //= 4 and fails at start "
                     "(server_args.py:148-150,174)")
    attn_dp = ctx.attn_dp(needs_dp_gt_1=False)
    if ctx.flag("enable_dp_attention"):  # server_args.py:189-199: dp_size = tp_size, halves chunk, max bs <= 96
        attn_dp = ctx.tp
        if cps > 0:
            cps //= 2
        cps_src = ctx.cite("server_args.py:189-199")
        max_bs, bs_src = min(max_bs, 96), ctx.cite("server_args.py:189-199")
        ctx.enable("dp_attention_side_effects")
        ctx.note(f"DP attention: dp_size set to tp_size ({attn_dp}), chunked prefill halved, graph max bs <= 96, "
                 "schedule_conservativeness x0.3, overlap schedule off (server_args.py:189-199)")
    ctx.put("chunked_prefill_size", cps, cps_src)
    on = decode_graph_flags(ctx, torch_native_disables=False, per_phase_flags=False, where="server_args.py")
    sizes = [1, 2, 4] + [i * 8 for i in range(1, 21)]
    if ctx.flag("disable_cuda_graph_padding"):
        sizes = list(range(1, 32)) + [64, 128]
    capture = filter_capture(sizes, ctx, max_bs, "cuda_graph_runner.py:124-129", add_pool=())
    ctx.put("decode_cuda_graph", on, ctx.cite("cuda_graph_runner.py:119-129"))
    ctx.put("cuda_graph_max_bs", max_bs if on else 0, bs_src)
    ctx.put("cuda_graph_bs", tuple(capture) if on else (), ctx.cite("cuda_graph_runner.py:119-129"))
    _no_prefill_graph(ctx, "cuda_graph_runner.py")
    ctx.put("max_running_requests", ctx.given.get("max_running_requests"),
            "user" if ctx.has("max_running_requests") else ctx.cite("server_args.py"))
    ctx.put("page_size", 1, ctx.cite("(no paged KV option in this release)"))
    ctx.take("attention_backend", "flashinfer", ctx.cite("server_args.py:178-186"))
    ctx.note("attention_backend: flashinfer assumed installed; without it triton (server_args.py:178-181)")
    custom_all_reduce(ctx, "server_args.py disable_custom_all_reduce")


# ---- 0.4.0 <= v < 0.4.3 and 0.4.3 <= v < 0.4.6 -----------------------------------------------------------------
def _resolve_0_4_early(ctx: Ctx, *, r043: bool, minor: int = 3, dp_div: bool = False) -> None:
    """0.4.0-0.4.5; ``minor`` 4 / 5 select 0.4.4 / 0.4.5's speculative and DP-attention variants."""
    lines = "server_args.py:195-224" if r043 else "server_args.py:158-183"
    _mfs(ctx, tp_fraction(TP_LADDER_0_4_0, ctx.tp), "server_args.py:195-205" if r043 else "server_args.py:158-168")
    gpu_mem = ctx.gpu_mem
    small = gpu_mem is not None and gpu_mem < 25_000
    if gpu_mem is None and not r043:
        _gpu_mem_or_note(ctx, "server_args.py:152-156")
    cps = ctx.take("chunked_prefill_size", 2048 if small else 8192, ctx.cite(lines))
    if r043:
        default_bs = (8 if ctx.tp < 4 else 80) if small else 160
    else:
        default_bs = 8 if small else 160
    max_bs = int(ctx.take("cuda_graph_max_bs", default_bs, ctx.cite(lines)))  # type: ignore[call-overload]
    cps = int(cps)  # type: ignore[call-overload]
    if ctx.flag("enable_dp_attention"):
        where = ("server_args.py:297-307" if minor >= 5 else "server_args.py:253-262") if r043 \
            else "server_args.py:201-214"
        # 0.4.5 :304 (and 0.4.4.post1, ``dp_div``) divide by dp_size; before, halved
        cps = cps // max(1, ctx.dp) if minor >= 5 or dp_div else cps // 2
        if not r043:
            max_bs = min(max_bs, 96)
        ctx.put("chunked_prefill_size", cps, ctx.cite(where))
        ctx.enable("dp_attention_side_effects")
        ctx.note(f"DP attention: dp_size set to tp_size, chunked prefill halved"
                 f"{'' if r043 else ', graph max bs <= 96, overlap schedule off'} ({where})")
    padding_off = ctx.flag("disable_cuda_graph_padding")
    if minor == 4 and ctx.spec == "EAGLE":  # 0.4.4 server_args.py:280-284: padding off, chunked prefill kept
        padding_off = True
    elif r043 and minor == 3 and ctx.spec == "EAGLE":  # server_args.py:265-272
        ctx.put("chunked_prefill_size", -1, ctx.cite("server_args.py:265-272"))
        padding_off = True
        ctx.note("EAGLE: chunked prefill, radix cache and overlap schedule off (server_args.py:265-272)")
    on = decode_graph_flags(ctx, torch_native_disables=True, per_phase_flags=False, where=lines)
    if r043 and ctx.has("cuda_graph_bs"):
        sizes = [int(b) for b in ctx.given["cuda_graph_bs"]]  # type: ignore[attr-defined]
    elif minor == 4 and ctx.spec is not None:  # 0.4.4 cuda_graph_runner.py:114-120
        sizes = list(range(1, 33))
    elif minor == 5 and ctx.spec is not None:  # 0.4.5 cuda_graph_runner.py:117-125
        sizes = list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, 161, 16))
    elif padding_off and minor == 5:
        # 0.4.5 cuda_graph_runner.py:119: list + range raises TypeError at startup
        ctx.note("--disable-cuda-graph-padding: 0.4.5 adds a list and a range and fails at startup "
                 "(cuda_graph_runner.py:119)")
        sizes = list(range(1, 33)) + list(range(40, 161, 16))
    elif padding_off:
        sizes = list(range(1, 33 if r043 else 32)) + ([64, 96, 128, 160] if minor == 4 else [64, 128])
    elif minor == 5:
        sizes = [1, 2, 4, 8] + list(range(16, 161, 8))  # 0.4.5 cuda_graph_runner.py:120-121
    else:
        sizes = [1, 2, 4] + [i * 8 for i in range(1, 21)]
    where = "cuda_graph_runner.py:109-135" if r043 else "cuda_graph_runner.py:128-138"
    capture = filter_capture(sizes, ctx, max_bs, where, add_pool=(-1, 0) if r043 else ())
    ctx.put("decode_cuda_graph", on, ctx.cite(where))
    # the largest size captured (as 0.4.6+ report it); the configured max_bs only bounds the list
    ctx.values["cuda_graph_max_bs"] = (max(capture) if capture else 0) if on else 0
    ctx.put("cuda_graph_bs", tuple(capture) if on else (), ctx.cite(where))
    _no_prefill_graph(ctx, where)
    if minor >= 4 and not ctx.has("max_running_requests") and ctx.spec in ("EAGLE", "EAGLE3"):
        # 0.4.4 server_args.py:280-282 (EAGLE: 32); 0.4.5 :327-333 (EAGLE/EAGLE3: 48)
        ctx.put("max_running_requests", 32 if minor == 4 else 48,
                ctx.cite("server_args.py:280-282" if minor == 4 else "server_args.py:327-333"))
    else:
        ctx.put("max_running_requests", ctx.given.get("max_running_requests"),
                "user" if ctx.has("max_running_requests") else ctx.cite("server_args.py"))
    ctx.put("page_size", ctx.int_("page_size", 1) if minor >= 5 else 1,
            ctx.cite("server_args.py page_size" if minor >= 5 else "(no paged KV option in this release)"))
    ctx.take("attention_backend", "flashinfer",
             ctx.cite("server_args.py:230-237" if r043 else "server_args.py:185-190"))
    ctx.note("attention_backend: flashinfer assumed installed; without it triton")
    custom_all_reduce(ctx, "server_args.py disable_custom_all_reduce")


def resolve_0_4_0(ctx: Ctx) -> None:
    """0.4.0: ladder (0.81 at TP 8); chunked 2048 / graph max bs 8 below 25000 MiB, else 8192 / 160."""
    _resolve_0_4_early(ctx, r043=False)


def resolve_0_4_3(ctx: Ctx) -> None:
    """0.4.3: as 0.4.0, but below 25000 MiB graph max bs 8 at TP < 4 and 80 at TP >= 4; EAGLE disables chunking."""
    _resolve_0_4_early(ctx, r043=True)


def resolve_0_4_4(ctx: Ctx) -> None:
    """0.4.4: as 0.4.3, but EAGLE keeps chunked prefill (server_args.py:280-284: padding off, 32 requests) and
    the runner captures 1..32 under speculative decoding (cuda_graph_runner.py:109-141)."""
    _resolve_0_4_early(ctx, r043=True, minor=4)


def resolve_0_4_4_post1(ctx: Ctx) -> None:
    """0.4.4.post1-post3: as 0.4.4, but DP attention divides chunked prefill by dp_size (checked against
    0.4.4.post1's ServerArgs; post2/post3 also change the speculative capture list, not modelled)."""
    _resolve_0_4_early(ctx, r043=True, minor=4, dp_div=True)


def resolve_0_4_5(ctx: Ctx) -> None:
    """0.4.5: DP attention divides chunked prefill by dp_size (server_args.py:304), EAGLE/EAGLE3 48 requests
    (:327-333), the runner's 0.4.6 lists without the > 80 GiB extension (cuda_graph_runner.py:112-143)."""
    _resolve_0_4_early(ctx, r043=True, minor=5)


# ---- 0.4.6 <= v < 0.4.9 -----------------------------------------------------------------------------------------
def _mfs_0_4_7(ctx: Ctx, gpu_mem: float | None) -> tuple[float, float | None]:
    """0.4.7 server_args.py:253-283: the TP ladder up to 81920 MiB (0.88 above, and with no GPU); then above
    180 GB 0.79 flat, above 96 GiB min(f + 48 GiB (1 - f) / gpu, (gpu - 18 GiB) / gpu) (20 GiB with speculative
    decoding), otherwise x 0.95 under speculative decoding.  Returns (fraction, reserve MiB or None)."""
    frac = tp_fraction(TP_LADDER_0_4_0, ctx.tp * ctx.pp) if gpu_mem is not None and gpu_mem <= 81920 else 0.88
    if gpu_mem is not None and gpu_mem > 180 * 1000:
        return 0.79, gpu_mem * 0.21
    if gpu_mem is not None and gpu_mem > 96 * 1024:
        reserve = 1024 * (20 if ctx.spec is not None else 18)
        frac = min(frac + 48 * 1024 * (1 - frac) / gpu_mem, (gpu_mem - reserve) / gpu_mem)
        return frac, gpu_mem * (1 - frac)
    if ctx.spec is not None:
        frac *= 0.95
    return frac, None


def resolve_0_4_6(ctx: Ctx) -> None:
    """0.4.6: ladder up to 81920 MiB, above it (gpu - 13 GiB) / gpu; no max bs default above 25000 MiB."""
    _resolve_0_4_6(ctx, r047=False)


def resolve_0_4_5_post3(ctx: Ctx) -> None:
    """0.4.5.post3: 0.4.6's rules, except that the runner extends the list to 256 above 81920 MiB whatever the DP
    size (checked against 0.4.5.post3's ServerArgs and runner, tests/fixtures/sglang_defaults/0.4.5.post3.json)."""
    _resolve_0_4_6(ctx, r047=False, any_dp=True)


def resolve_0_4_6_post2(ctx: Ctx) -> None:
    """0.4.6.post2-post5: above 96 GiB min(f + 48 GiB (1 - f) / gpu, (gpu - 18 GiB) / gpu), 16384 chunked prefill
    with disaggregation (server_args.py), the runner's 0.4.6 lists extended to 256 above 96 GiB whatever the DP
    size (cuda_graph_runner.py get_batch_sizes_to_capture)."""
    _resolve_0_4_6(ctx, r047=False, post2=True)


def resolve_0_4_7(ctx: Ctx) -> None:
    """0.4.7: big-GPU fraction rules and x 0.95 for speculative decoding (server_args.py:253-283), 16384 chunked
    prefill above 180 GB (:286-295), the runner list of 0.4.8+ with 96 GiB / 180 GB steps (cuda_graph_runner.py:
    129-177)."""
    _resolve_0_4_6(ctx, r047=True)


def _resolve_0_4_6(ctx: Ctx, *, r047: bool, post2: bool = False, any_dp: bool = False) -> None:
    gpu_mem = ctx.gpu_mem
    reserved: float | None = None
    if post2:
        frac = tp_fraction(TP_LADDER_0_4_0, ctx.tp * ctx.pp) if gpu_mem is not None and gpu_mem <= 81920 else 0.88
        if gpu_mem is not None and gpu_mem > 96 * 1024:
            frac = min(frac + 48 * 1024 * (1 - frac) / gpu_mem, (gpu_mem - 18 * 1024) / gpu_mem)
            reserved = gpu_mem * (1 - frac)
        if gpu_mem is None:
            ctx.note("GPU memory unknown: 0.4.6.post2-post4 compare None > 96 GiB and fail at start; 0.88 here")
    elif r047:
        frac, reserved = _mfs_0_4_7(ctx, gpu_mem)
        if gpu_mem is None:
            ctx.note("GPU memory unknown: 0.4.7 falls back to mem_fraction_static 0.88 (server_args.py:253-267)")
    elif gpu_mem is None:
        ctx.note("GPU memory unknown: 0.4.6 compares None <= 81920 and fails; the TP ladder is used here "
                 "(server_args.py:222-226)")
        frac = tp_fraction(TP_LADDER_0_4_0, ctx.tp)
    elif gpu_mem <= 81920:
        frac = tp_fraction(TP_LADDER_0_4_0, ctx.tp)
    else:
        frac, reserved = (gpu_mem - 1024 * 13) / gpu_mem, 13 * 1024.0
    _mfs(ctx, frac, "server_args.py:253-283" if r047 else "server_args.py:224-238")
    if reserved is not None and not ctx.has("mem_fraction_static"):
        ctx.values["reserved_mib"] = reserved
    small = gpu_mem is not None and gpu_mem < 25_000
    if r047 or post2:
        big = r047 and gpu_mem is not None and gpu_mem > 180_000
        disagg = ctx.str_("disaggregation_mode") not in (None, "null")
        cps_d = 16384 if big else (2048 if small else (16384 if disagg else 8192))
    else:
        cps_d = 2048 if small else 8192
    cps = int(ctx.take("chunked_prefill_size", cps_d,  # type: ignore[call-overload]
                       ctx.cite("server_args.py:286-295" if r047 else "server_args.py:241-246")))
    if ctx.flag("enable_dp_attention"):  # server_args.py:290-300 (0.4.7 :350-356)
        if ctx.dp <= 1:
            ctx.note("--enable-dp-attention needs --dp-size > 1 in 0.4.6 (an assert, server_args.py:293-295)")
        cps //= max(1, ctx.dp)
        ctx.put("chunked_prefill_size", cps, ctx.cite("server_args.py:290-300"))
        ctx.enable("dp_attention_side_effects")
        ctx.note("DP attention: chunked prefill divided by dp_size, schedule_conservativeness x0.3 "
                 "(server_args.py:290-300)")
    # server_args.py:260-267: only small GPUs get a max bs; otherwise the runner's list decides
    user_bs = ctx.given.get("cuda_graph_max_bs")
    max_bs: int | None = (int(user_bs) if user_bs is not None  # type: ignore[call-overload]
                          else ((8 if ctx.tp < 4 else 80) if small else None))
    if r047:
        sizes = runner_sizes(ctx, gpu_mem, max_bs, big=(96 * 1024, 180 * 1000))
    elif ctx.has("cuda_graph_bs"):
        sizes = [int(b) for b in ctx.given["cuda_graph_bs"]]  # type: ignore[attr-defined]
    else:
        # cuda_graph_runner.py:123-140
        if ctx.spec is None:
            sizes = (list(range(1, 33)) + list(range(40, 161, 16)) if ctx.flag("disable_cuda_graph_padding")
                     else [1, 2, 4, 8] + list(range(16, 161, 8)))
        else:
            sizes = list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, 161, 16))
        if post2 and gpu_mem is not None and gpu_mem > 96 * 1024:
            sizes += list(range(160, 257, 8))
        elif not post2 and gpu_mem is not None and gpu_mem > 81920 and (ctx.dp == 1 or any_dp):
            sizes += list(range(160, 257, 8))
    capture = filter_capture(sizes, ctx, max_bs, "cuda_graph_runner.py:155-170" if r047 else
                             "cuda_graph_runner.py:142-153", add_pool=(0,) if r047 else (-1, 0))
    on = decode_graph_flags(ctx, torch_native_disables=True, per_phase_flags=False, where="server_args.py:279-283")
    where = "cuda_graph_runner.py:129-177" if r047 else "cuda_graph_runner.py:119-155"
    ctx.put("decode_cuda_graph", on, ctx.cite(where))
    ctx.put("cuda_graph_max_bs", (max(capture) if capture else 0) if on else 0,
            "user" if user_bs is not None else ctx.cite("server_args.py:260-267, " + where))
    ctx.put("cuda_graph_bs", tuple(capture) if on else (), ctx.cite(where))
    _no_prefill_graph(ctx, where)
    spec_max_running_requests(ctx, ("EAGLE", "EAGLE3"), "server_args.py:420-422" if r047 else "server_args.py:321-323")
    backend = ctx.str_("attention_backend")
    page_size(ctx, backend, where="server_args.py:253-257", trtllm=False)
    if backend is None:
        if ctx.is_mla and ctx.capability is not None:
            # model_runner.py:258-263: MLA -> fa3 on Hopper (CUDA >= 12.3), else triton
            ctx.put("attention_backend", "fa3" if ctx.capability == (9, 0) else "triton",
                    ctx.cite("model_runner.py:258-263"))
            ctx.note("attention_backend: chosen in ModelRunner at load; fa3 on Hopper assumes CUDA >= 12.3 "
                     "(model_runner.py:258-263)")
        else:
            ctx.put("attention_backend", None, ctx.cite("model_runner.py:234-265"))
            ctx.note("attention_backend: decided in ModelRunner.model_specific_adjustment at load (fa3 on Hopper for "
                     "FA3-default architectures without topk > 1 speculative decoding, else flashinfer or triton; "
                     "model_runner.py:234-265)")
    else:
        ctx.put("attention_backend", backend, "user")
    custom_all_reduce(ctx, "server_args.py disable_custom_all_reduce")


RANGES = (
    Range("0.2.15", "0.2.15-0.3.5: server_args.py:105-119, model_runner.py:493-502", resolve_0_2_15),
    Range("0.3.5.post2", "0.3.5.post2: 0.2.15's ladder with 0.3.6's small-GPU rule (server_args.py:157-174)",
          resolve_0_3_5_post2),
    Range("0.3.6", "0.3.6-0.3.x: server_args.py:156-199, cuda_graph_runner.py:119-129", resolve_0_3_6),
    Range("0.4.0", "0.4.0: server_args.py:158-214, cuda_graph_runner.py:128-138", resolve_0_4_0),
    Range("0.4.1", "0.4.1-0.4.3: server_args.py:195-272 (0.4.3), cuda_graph_runner.py:109-135", resolve_0_4_3),
    # 0.4.3.post3 already has 0.4.4's rules (tests/fixtures/sglang_defaults/0.4.3.post3.json)
    Range("0.4.3.post3", "0.4.3.post3-0.4.4: server_args.py:182-284 (0.4.4), cuda_graph_runner.py:109-141",
          resolve_0_4_4),
    Range("0.4.4.post1", "0.4.4.post1-post3: 0.4.4 with DP attention dividing chunked prefill by dp_size",
          resolve_0_4_4_post1),
    # 0.4.4.post4 already has 0.4.5's rules (tests/fixtures/sglang_defaults/0.4.4.post4.json)
    Range("0.4.4.post4", "0.4.4.post4-0.4.5: server_args.py:198-333 (0.4.5), cuda_graph_runner.py:112-143",
          resolve_0_4_5),
    Range("0.4.5.post3", "0.4.5.post3: 0.4.6's rules, list to 256 above 81920 MiB at any DP size",
          resolve_0_4_5_post3),
    Range("0.4.6", "0.4.6: server_args.py:224-323, cuda_graph_runner.py:119-155", resolve_0_4_6),
    Range("0.4.6.post2", "0.4.6.post2-post5: big-GPU fraction (18 GiB), runner list to 256 above 96 GiB",
          resolve_0_4_6_post2),
    Range("0.4.7", "0.4.7: server_args.py:253-356, cuda_graph_runner.py:129-177", resolve_0_4_7),
)
