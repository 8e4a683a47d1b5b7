"""SGLang 0.4.8 - 0.5.2: ``--mem-fraction-static`` = (gpu - reserve) / gpu with a reserve per GPU-memory bucket.

Ranges:

- 0.4.7.post1 <= v < 0.4.9   server_args.py:274-338 (the same reserve, chunked prefill and max bs text as 0.4.9; no VLM
                        factor in ServerArgs: the ModelRunner x 0.90), cuda_graph_runner.py:138-187
- 0.4.9  <= v < 0.4.9.post3  server_args.py:280-352 (reserve, chunked prefill, graph max bs),
                        cuda_graph_runner.py:138-181; 0.4.9.post3-post6 take 0.4.10's rules (ViT-size VLM factor)
- 0.4.10 <= v < 0.5.2   server_args.py:286-357 (0.4.10; 0.5.1 :354-425 same text), VLM factor :1946-1986,
                        cuda_graph_runner.py:138-188 (0.5.1/0.5.2 :165-215 same text)
- 0.5.2  <= v < 0.5.3   server_args.py:452-506: STANDALONE speculative decoding reserves 6 GiB instead of 2 GiB;
                        :634-635: DP attention is switched off when dp_size == 1
"""

from __future__ import annotations

from sglwrap.versions import Version

from sglwrap.sglang.rules._base import GIB, Ctx, Range, filter_capture, vlm_factor
from sglwrap.sglang.rules.common import custom_all_reduce, decode_graph_flags, page_size, spec_max_running_requests

# 0.4.9 server_args.py:294-311: GPU-memory bucket (upper bound, GiB, exclusive) -> reserve = a + b * tp * pp (GiB)
# (a, b); the last bucket is a flat 32 GiB.
RESERVE_0_4_9: dict[float | None, tuple[float, float]] = {
    20: (2.8, 1 / 10),     # T4, 4080
    35: (2.8, 1 / 10),     # A10, L40, 4090, 5090
    90: (9.5, 1 / 2),      # H100, A100
    100: (12.0, 1 / 2),    # H20
    160: (12.0, 1 / 2),    # H200
    None: (32.0, 0.0),     # B200, MI300
}

# 0.4.9 server_args.py:332-343: chunked prefill by GPU memory (upper bound GiB, exclusive); unknown GPU -> 4096
CHUNKED_0_4_9: dict[float | None, int] = {35: 2048, 160: 8192, None: 16384}


def _reserve_mib(ctx: Ctx, gpu_mem: float, *, standalone_6g: bool) -> float:
    parallel = ctx.tp * ctx.pp
    for bound, (a, b) in RESERVE_0_4_9.items():
        if bound is None or gpu_mem < bound * GIB:
            reserved = (a + b * parallel) * 1024
            break
    if ctx.spec is not None:  # 0.4.9 server_args.py:313-315; 0.5.2 :487-492 (STANDALONE 6 GiB)
        reserved += (6 if standalone_6g and ctx.spec == "STANDALONE" else 2) * 1024
    if ctx.flag("enable_dp_attention"):  # 0.4.9 :316-317; before 0.5.2's dp_size == 1 switch-off (:634-635)
        reserved += 4 * 1024
    return reserved


def runner_sizes(ctx: Ctx, gpu_mem: float | None, max_bs: int | None, *,
                 big: tuple[float, float] = (90 * 1024, 160 * 1000)) -> list[int]:
    """The runner's ``get_batch_sizes_to_capture`` list before the request-pool cap (0.4.8 cuda_graph_runner.py:
    138-187, 0.4.9 :138-181, 0.4.10 :138-188, 0.5.1/0.5.2 :165-215): sizes to 160 (a sparser list under speculative
    decoding), +160..256 above ``big[0]`` MiB, +256..512 above ``big[1]`` MiB (0.4.7 :129-177: 96 GiB and 180 GB),
    then cut at max_bs and extended to it by 16."""
    if ctx.has("cuda_graph_bs"):
        sizes = [int(b) for b in ctx.given["cuda_graph_bs"]]  # type: ignore[attr-defined]
    else:
        if ctx.spec is None:
            sizes = (list(range(1, 33)) + list(range(48, 161, 16)) if ctx.flag("disable_cuda_graph_padding")
                     else [1, 2, 4, 8] + list(range(16, 161, 8)))
        else:
            sizes = list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, 64, 8)) + list(range(80, 161, 16))
        if gpu_mem is not None and gpu_mem > big[0]:
            sizes += list(range(160, 257, 8))
        if gpu_mem is not None and gpu_mem > big[1]:
            sizes += list(range(256, 513, 16))
    if ctx.flag("enable_two_batch_overlap"):
        sizes = [s for s in sizes if s % 2 == 0]
    if max_bs:
        sizes = [s for s in sizes if s <= max_bs]
        if not sizes or max(sizes) < max_bs:
            sizes += list(range(max(sizes) if sizes else 16, max_bs + 1, 16))
    return sizes


def _resolve(ctx: Ctx, *, r0410: bool, r052: bool, r048: bool = False) -> None:
    if r052:
        mfs_where, cps_where, bs_where = "server_args.py:452-506", "server_args.py:509-519", "server_args.py:521-528"
    elif r0410:
        mfs_where, cps_where, bs_where = "server_args.py:286-335", "server_args.py:338-348", "server_args.py:350-357"
    elif r048:
        mfs_where, cps_where, bs_where = "server_args.py:274-315", "server_args.py:318-328", "server_args.py:331-338"
    else:
        mfs_where, cps_where, bs_where = "server_args.py:280-329", "server_args.py:332-343", "server_args.py:345-352"
    gpu_mem = ctx.gpu_mem
    # ---- mem_fraction_static
    if ctx.has("mem_fraction_static"):
        ctx.put("mem_fraction_static", float(ctx.given["mem_fraction_static"]), "user")  # type: ignore[arg-type]
        ctx.values["mem_fraction_static_source"] = "user"
        ctx.put("reserved_mib", None, "user")
    else:
        if gpu_mem is not None:
            reserved: float | None = _reserve_mib(ctx, gpu_mem, standalone_6g=r052)
            frac = round((gpu_mem - reserved) / gpu_mem, 3)  # type: ignore[operator]
        else:
            reserved, frac = None, 0.88
            ctx.note(f"GPU memory unknown: SGLang's fallback mem_fraction_static 0.88 ({ctx.version} {mfs_where})")
        if ctx.is_multimodal and r048:
            ctx.note("multimodal: 0.4.8's ServerArgs leaves the fraction alone; the ModelRunner scales it "
                     "(sglwrap.memory.defaults.runner_multimodal_factor)")
        elif ctx.is_multimodal:
            if r0410:
                frac *= vlm_factor(ctx.model)
                ctx.note("multimodal: mem_fraction_static x 0.95 x ViT-size factor (adjust_mem_fraction_for_vlm)")
            else:
                frac *= 0.90
                ctx.note("multimodal: mem_fraction_static x 0.90 (0.4.9 server_args.py:325-329)")
        ctx.put("mem_fraction_static", frac, ctx.cite(mfs_where))
        ctx.values["mem_fraction_static_source"] = "default"
        ctx.put("reserved_mib", reserved, ctx.cite(mfs_where))
    # ---- chunked prefill
    if gpu_mem is None:
        cps_default = 4096
    else:
        cps_default = next(v for b, v in CHUNKED_0_4_9.items() if b is None or gpu_mem < b * GIB)
    cps = int(ctx.take("chunked_prefill_size", cps_default, ctx.cite(cps_where)))  # type: ignore[call-overload]
    dp_attn_on = ctx.flag("enable_dp_attention") and (not r052 or ctx.dp > 1)
    if dp_attn_on:
        where = "server_args.py:634-645" if r052 else ("server_args.py:417-425" if r0410 else "server_args.py:403-410")
        cps //= max(1, ctx.dp)
        ctx.put("chunked_prefill_size", cps, ctx.cite(where))
        ctx.enable("dp_attention_side_effects")
        ctx.note(f"DP attention: chunked prefill divided by dp_size, +4 GiB reserve ({where})")
    elif ctx.flag("enable_dp_attention"):
        ctx.note("--enable-dp-attention with dp_size 1 is switched off (0.5.2 server_args.py:634-635)")
    # ---- decode graphs: a max bs only below 35 GiB; otherwise the runner's list decides
    user_bs = ctx.given.get("cuda_graph_max_bs")
    small = gpu_mem is not None and gpu_mem < 35 * GIB
    max_bs: int | None = (int(user_bs) if user_bs is not None  # type: ignore[call-overload]
                          else ((8 if ctx.tp < 4 else 80) if small else None))
    runner = "cuda_graph_runner.py:165-215" if ctx.version.startswith("0.5") else (
        "cuda_graph_runner.py:138-188" if r0410 else
        ("cuda_graph_runner.py:138-187" if r048 else "cuda_graph_runner.py:138-181"))
    sizes = runner_sizes(ctx, gpu_mem, max_bs)
    if r0410 and dp_attn_on:
        ctx.note(f"DP attention: the runner keeps only batch sizes divisible by the attention-TP size ({runner})")
    capture = filter_capture(sizes, ctx, max_bs, runner)
    on = decode_graph_flags(ctx, torch_native_disables=True, per_phase_flags=False, where="server_args.py")
    ctx.put("decode_cuda_graph", on, ctx.cite(runner))
    ctx.put("cuda_graph_max_bs", (max(capture) if capture else 0) if on else 0,
            "user" if user_bs is not None else ctx.cite(f"{bs_where}, {runner}"))
    ctx.put("cuda_graph_bs", tuple(capture) if on else (), ctx.cite(runner))
    ctx.put("prefill_cuda_graph", False, ctx.cite("(no prefill graphs before 0.5.4)"))
    ctx.put("prefill_graph_sizes", (), ctx.cite("(no prefill graphs before 0.5.4)"))
    spec_max_running_requests(ctx, ("EAGLE", "EAGLE3", "STANDALONE") if r052 else ("EAGLE", "EAGLE3"),
                              "server_args.py:723-730" if r052
                              else ("server_args.py:494-496" if r0410 else
                                    ("server_args.py:449-451" if r048 else "server_args.py:465-467")))
    backend = ctx.str_("attention_backend")
    page_size(ctx, backend, where="server_args.py (flashmla/cutlass_mla page size)",
              trtllm=Version(ctx.version) >= Version("0.5"))
    if backend is None:
        ctx.put("attention_backend", None, ctx.cite("model_runner.py model_specific_adjustment"))
        ctx.note("attention_backend: decided in ModelRunner.model_specific_adjustment at load (fa3 on Hopper, "
                 "flashinfer or triton otherwise, per model)")
    else:
        ctx.put("attention_backend", backend, "user")
    custom_all_reduce(ctx, "server_args.py disable_custom_all_reduce")


def resolve_0_4_8(ctx: Ctx) -> None:
    """0.4.8: 0.4.9's bucket reserve, chunked prefill and runner list already (server_args.py:274-338,
    cuda_graph_runner.py:138-187); the multimodal reduction is still the ModelRunner's, not ServerArgs'."""
    _resolve(ctx, r0410=False, r052=False, r048=True)


def resolve_0_4_9(ctx: Ctx) -> None:
    """0.4.9: bucket reserve (2.8 + tp*pp/10 GiB below 35 GiB, 9.5 + tp*pp/2 below 90 GiB, ...); VLM x 0.90."""
    _resolve(ctx, r0410=False, r052=False)


def resolve_0_4_10(ctx: Ctx) -> None:
    """0.4.10 - 0.5.1: as 0.4.9, with the ViT-size VLM factor."""
    _resolve(ctx, r0410=True, r052=False)


def resolve_0_5_2(ctx: Ctx) -> None:
    """0.5.2: as 0.4.10, STANDALONE reserves 6 GiB, DP attention off at dp_size 1."""
    _resolve(ctx, r0410=True, r052=True)


RANGES = (
    # 0.4.7.post1 already has 0.4.8's reserve text (checked by tests/fixtures/sglang_defaults/0.4.7.post1.json)
    Range("0.4.7.post1", "0.4.7.post1-0.4.8: server_args.py:274-338 (0.4.8), cuda_graph_runner.py:138-187",
          resolve_0_4_8),
    Range("0.4.9", "0.4.9-0.4.9.post2: server_args.py:280-352, cuda_graph_runner.py:138-181", resolve_0_4_9),
    # 0.4.9.post3 added adjust_mem_fraction_for_vlm (the ViT-size factor of 0.4.10)
    Range("0.4.9.post3", "0.4.9.post3-0.4.9.post6: as 0.4.10 (adjust_mem_fraction_for_vlm)", resolve_0_4_10),
    Range("0.4.10", "0.4.10-0.5.1: server_args.py:286-357 (0.4.10), cuda_graph_runner.py:138-188", resolve_0_4_10),
    Range("0.5.2", "0.5.2: server_args.py:452-528, cuda_graph_runner.py:165-215", resolve_0_5_2),
)
