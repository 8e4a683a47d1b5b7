"""Communication features: flashinfer-fusion, symm-mem, custom-allreduce, ep-a2a, pcie-ipc-allreduce.

Each replicates the decision SGLang 0.5.23 takes at run time (file:line in the reasons), so the answer comes
before any weights load.
"""

from __future__ import annotations

from sglwrap.preflight.features import unsupported, wanted
from sglwrap.preflight.model import Context, Status, Verdict

FUSION_FLAGS = ("--enable-flashinfer-allreduce-fusion", "--flashinfer-allreduce-fusion-backend")


def _fi(version: str | None) -> str:
    """FlashInfer's version for a message: never "None"."""
    return f"flashinfer-python {version}" if version else "flashinfer-python (not installed)"


def _majors(ctx: Context) -> list[int]:
    return sorted({g.compute_capability[0] for g in ctx.facts.gpus})


def check_flashinfer_fusion(ctx: Context) -> Verdict:
    """FlashInfer all-reduce + RMSNorm fusion for this compute capability, FlashInfer and SGLang."""
    cid, st = "flashinfer-fusion", ctx.stack
    want, flag = wanted(ctx, "flashinfer_allreduce_fusion", *FUSION_FLAGS)
    if flag == "--flashinfer-allreduce-fusion-backend" and ctx.args.get("flashinfer_allreduce_fusion_backend") == "none":
        want, flag = False, None
    if not want:
        return Verdict(cid, Status.PASS, "not requested (SGLang auto-enables it only on SM90/SM100 with tp > 1, "
                       "srt/arg_groups/overrides.py:987-1001)")
    if not ctx.facts.gpus:
        return Verdict(cid, Status.SKIP, "no GPU facts")
    majors = _majors(ctx)
    backend = ctx.args.get("flashinfer_allreduce_fusion_backend") or "auto"
    sg_gate, fi_gate = st.sglang_fusion_majors, st.fi_trtllm_comm_majors
    if backend == "mnnvl":
        fi_gate = st.fi_mnnvl_majors
    sms = "/".join(f"SM{m}x" for m in majors)
    if sg_gate is not None and any(m not in sg_gate for m in majors):
        why = (f"SGLang {st.sglang} refuses it on {sms}: 'FlashInfer allreduce fusion requires SM90 or SM10X "
               "NVIDIA GPUs.' (srt/layers/flashinfer_comm_fusion.py:46-50)")
        fix = "no SGLang path fuses the all-reduce on this GPU; launch without it (NCCL or the custom all-reduce)"
        return unsupported(ctx, cid, "flashinfer_allreduce_fusion", flag, why, fix)
    if fi_gate is not None and any(m not in fi_gate for m in majors):
        why = (f"{_fi(st.flashinfer)} builds its TRT-LLM comm module only for majors {list(fi_gate)}: "
               f"the JIT fails with 'No supported CUDA architectures found for major versions {list(fi_gate)}.' "
               f"on {sms} ({st.origin.get('flashinfer', '')})")
        fix = ("flashinfer-python >= 0.6.17 adds SM12x to trtllm_allreduce (PR #3903); upgrade it, or launch "
               "without the fusion")
        return unsupported(ctx, cid, "flashinfer_allreduce_fusion", flag, why, fix)
    if ctx.args.tp < 2:
        return Verdict(cid, Status.SKIP, "tp=1: there is no all-reduce to fuse")
    return Verdict(cid, Status.PASS, f"{sms} is in SGLang's and {_fi(st.flashinfer)}'s tables "
                   f"(majors {list(sg_gate or fi_gate or [])}); backend {backend}")


def check_symm_mem(ctx: Context) -> Verdict:
    """--enable-torch-symm-mem (SGLang's arch table + multicast) and --enable-symm-mem (torch's cpp_extension
    arch table, and it forces NCCL_NVLS_ENABLE=1, which needs NVSwitch multicast)."""
    verdicts = [v for v in (_torch_symm(ctx), _nccl_symm(ctx)) if v is not None]
    if not verdicts:
        return Verdict("symm-mem", Status.PASS, "neither torch nor NCCL symmetric memory requested")
    from sglwrap.preflight.model import SEVERITY

    worst = max(verdicts, key=lambda v: SEVERITY[v.status])
    return Verdict("symm-mem", worst.status, "; ".join(v.reason for v in verdicts),
                   "; ".join(v.fix for v in verdicts if v.fix), tuple(c for v in verdicts for c in v.changes))


def _multicast_problem(ctx: Context) -> str | None:
    if ctx.env("TORCH_SYMM_MEM_DISABLE_MULTICAST") not in (None, "", "0"):
        return "TORCH_SYMM_MEM_DISABLE_MULTICAST is set, so there is no multicast"
    captured = (ctx.facts.probes.get("env") or {}).get("TORCH_SYMM_MEM_DISABLE_MULTICAST")
    if captured not in (None, "", "0"):
        return "the captured host sets TORCH_SYMM_MEM_DISABLE_MULTICAST=1 (multicast is off there)"
    if not ctx.facts.nvswitch:
        link = "NVLink without NVSwitch" if ctx.facts.all_pairs_nvlink else "PCIe, no NVLink"
        return f"no NVSwitch ({link}): no multicast objects"
    return None


def _torch_symm(ctx: Context) -> Verdict | None:
    want, flag = wanted(ctx, "torch_symm_mem", "--enable-torch-symm-mem")
    if not want:
        return None
    st, cid = ctx.stack, "symm-mem"
    majors = _majors(ctx)
    table, sizes = st.sglang_symm_majors, st.sglang_symm_world_sizes
    fix = "launch without --enable-torch-symm-mem (NCCL or the custom all-reduce carry the all-reduce)"
    if table is not None and any(m not in table for m in majors):
        why = (f"SGLang's torch symm-mem table has CC majors {list(table)} only, not {majors} "
               "(TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES, all_reduce_utils.py:3-16): it logs 'Device capability "
               f"{majors[-1]} not supported' and stays off (torch_symm_mem.py:80-88)")
        return unsupported(ctx, cid, "torch_symm_mem", flag, why, fix)
    if sizes is not None and ctx.world not in sizes:
        why = f"world size {ctx.world} is not in SGLang's table {list(sizes)} (torch_symm_mem.py:89-95)"
        return unsupported(ctx, cid, "torch_symm_mem", flag, why, fix)
    mc = _multicast_problem(ctx)
    if mc is not None:
        why = (f"{mc}; after rendezvous multicast_ptr == 0 and SGLang disables it "
               "(torch_symm_mem.py:113-121)")
        return unsupported(ctx, cid, "torch_symm_mem", flag, why, fix)
    return Verdict(cid, Status.PASS, f"torch symm-mem: CC majors {majors} in SGLang's table, world size "
                   f"{ctx.world}, NVSwitch multicast present")


def _nccl_symm(ctx: Context) -> Verdict | None:
    want, flag = wanted(ctx, "symm_mem", "--enable-symm-mem")
    if not want:
        return None
    st, cid = ctx.stack, "symm-mem"
    fix = "launch without --enable-symm-mem"
    from sglwrap.versions import before

    if before(st.torch, "2.8"):
        return unsupported(ctx, cid, "symm_mem", flag, f"torch {st.torch} < 2.8: 'get_nccl_mem_pool' asserts "
                           "torch>=2.8 (pynccl_allocator.py:266-269)", fix)
    ccs = sorted({f"{g.compute_capability[0]}.{g.compute_capability[1]}" for g in ctx.facts.gpus})
    if st.torch_cpp_arches is not None:
        bad = [c for c in ccs if c not in st.torch_cpp_arches]
        if bad:
            why = (f"torch {st.torch}'s cpp_extension arch table lacks {bad}: load_inline raises 'Unknown CUDA "
                   "arch ... or GPU not supported' (pynccl_allocator.py:287-295)")
            return unsupported(ctx, cid, "symm_mem", flag, why, "install torch >= 2.7; " + fix)
    if not ctx.facts.nvswitch:
        why = ("it forces NCCL_NVLS_ENABLE=1 (srt/entrypoints/engine.py:1908-1915) and NCCL then sets up NVLS "
               "without checking multicast (nvls.cc:270-277), but this host has no NVSwitch")
        return unsupported(ctx, cid, "symm_mem", flag, why, fix)
    return Verdict(cid, Status.PASS, f"NCCL symm-mem: torch {st.torch}, CC {ccs} in cpp_extension's table, NVSwitch")


def check_custom_allreduce(ctx: Context) -> Verdict:
    """SGLang's custom all-reduce: off by itself above 2 PCIe GPUs; at 2 PCIe GPUs NCCL was 2x faster."""
    cid, n = "custom-allreduce", ctx.world
    mode = ctx.mode("custom_all_reduce")
    if bool(ctx.args.get("disable_custom_all_reduce")) or mode == "off":
        by = "--disable-custom-all-reduce" if bool(ctx.args.get("disable_custom_all_reduce")) else "the profile"
        return Verdict(cid, Status.PASS, f"off ({by}); NCCL carries the all-reduce")
    if n < 2:
        return Verdict(cid, Status.SKIP, "tp=1: no all-reduce")
    per_node = -(-ctx.args.gpus_needed // max(1, ctx.args.nnodes))
    if ctx.args.nnodes > 1 and n > per_node:
        return Verdict(cid, Status.PASS, f"tp={n} spans {ctx.args.nnodes} nodes ({per_node} GPUs per node): SGLang "
                       "turns custom all-reduce off for a group across nodes (custom_all_reduce_utils.py:462); "
                       "NCCL carries the all-reduce")
    if ctx.facts.gpu_count < n:
        return Verdict(cid, Status.SKIP, f"tp={n} but {ctx.facts.gpu_count} GPU(s) known: see gpu-count")
    if n not in (2, 4, 6, 8):
        return Verdict(cid, Status.PASS, f"world size {n} is not in (2, 4, 6, 8): SGLang does not use it "
                       "(custom_all_reduce.py:41)")
    if ctx.facts.nvlink_among(n):
        return Verdict(cid, Status.PASS, f"NVLink between all {n} GPUs (NVML NVLINK P2P status ok): "
                       "custom all-reduce runs")
    if n > 2:
        return Verdict(cid, Status.PASS, f"{n} GPUs without full NVLink: SGLang disables it itself "
                       "('not supported on more than two PCIe-only GPUs', custom_all_reduce_utils.py:492-498)",
                       "add --disable-custom-all-reduce to silence SGLang's warning")
    lk = ctx.facts.link(0, 1)
    if lk is not None and (lk.p2p_read != "ok" or lk.p2p_write != "ok"):
        return Verdict(cid, Status.PASS, f"2 GPUs without P2P (read {lk.p2p_read}, write {lk.p2p_write}): SGLang's "
                       "P2P test fails and it falls back to NCCL (custom_all_reduce_utils.py:504-510)")
    path = lk.common_ancestor if lk is not None and lk.common_ancestor else "PCIe"
    why = (f"2 GPUs on PCIe ({path}, no NVLink): SGLang runs its v1 custom all-reduce here "
           "(custom_all_reduce.py:272), which was 2x slower than NCCL at TP=2 in the reference story")
    fix = "launch with --disable-custom-all-reduce (measure both with sglwrap bench-comm)"
    if mode == "require":
        return Verdict(cid, Status.WARN, f"profile requires it; {why}", fix)
    if mode == "default":  # the profile does not name it: advise, do not rewrite the launch
        return Verdict(cid, Status.WARN, why, fix + "; or set features.custom_all_reduce: auto in the profile to let "
                       "preflight turn it off")
    from sglwrap.preflight.model import FeatureChange

    return Verdict(cid, Status.DOWNGRADE, f"custom_all_reduce set off: {why}", fix,
                   (FeatureChange("custom_all_reduce", "off", why),))


def check_ep_a2a(ctx: Context) -> Verdict:
    """Expert-parallel all-to-all: the constraints SGLang asserts only once the server starts."""
    cid, a = "ep-a2a", ctx.args
    backend = a.get("moe_a2a_backend")
    if backend in (None, "none"):
        if any(a.is_given(i.dest) for i in a.table.unique() if "--flashinfer-a2a-dispatch-type" in i.options):
            return Verdict(cid, Status.BLOCK, "--flashinfer-a2a-dispatch-type without --moe-a2a-backend flashinfer: "
                           "SGLang raises ValueError (moe_hook.py:307-313)", "add --moe-a2a-backend flashinfer")
        return Verdict(cid, Status.PASS, "no expert-parallel all-to-all backend (--moe-a2a-backend none)")
    if backend == "flashinfer":
        return _flashinfer_a2a(ctx)
    if backend.startswith("deepep") and not ctx.facts.nvlink_among(min(a.tp, ctx.facts.gpu_count)):
        return Verdict(cid, Status.WARN, f"--moe-a2a-backend {backend} on GPUs without full NVLink: DeepEP's "
                       "intranode kernels move tokens over NVLink", "use --moe-a2a-backend none (NCCL) on PCIe")
    return Verdict(cid, Status.PASS, f"--moe-a2a-backend {backend}: no static constraint known to sglwrap")


def _flashinfer_a2a(ctx: Context) -> Verdict:
    cid, a = "ep-a2a", ctx.args
    if not (a.attn_dp > 1 and a.attn_dp == a.tp):
        flag = "--attn-dp-size"
        if ctx.flags is not None and "--attn-dp-size" not in ctx.flags.flags:
            flag = "--enable-dp-attention --dp-size"
        return Verdict(cid, Status.BLOCK,
                       f"--moe-a2a-backend flashinfer with tp={a.tp} and attention-DP size {a.attn_dp}: SGLang asserts "
                       "'Flashinfer MoE A2A requires --attn-dp-size equal to --tp-size' (moe_hook.py:475-487)",
                       f"add {flag} {a.tp}, or use --moe-a2a-backend none")
    cps = a.get("chunked_prefill_size")
    try:
        cps = int(cps) if cps is not None else None
    except (TypeError, ValueError):  # a human-readable size ("8k") is positive
        cps = None
    if isinstance(cps, int) and cps <= 0:
        return Verdict(cid, Status.BLOCK, f"--moe-a2a-backend flashinfer needs chunked prefill, got "
                       f"--chunked-prefill-size {cps} (validate_flashinfer_a2a_token_budget, moe_hook.py:749-777)",
                       "set --chunked-prefill-size to a positive value")
    return Verdict(cid, Status.WARN,
                   f"flashinfer A2A with tp={a.tp}, attention-DP {a.attn_dp}: topology accepted; its per-rank "
                   "workspace (moe_a2a_get_workspace_size_per_rank) comes out of the same GPU memory as the KV cache",
                   "leave headroom (lower --mem-fraction-static) or cap "
                   "SGLANG_FLASHINFER_NUM_MAX_DISPATCH_TOKENS_PER_RANK")


PCIE_IPC_ENV = "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"
_PCIE_IPC_WORLD_SIZES = (2, 4, 8)  # srt/distributed/device_communicators/pcie_ipc_ar.py:77


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "y")


def check_pcie_ipc_allreduce(ctx: Context) -> Verdict:
    """FlashInfer's PCIe-IPC all-reduce (SGLang 0.5.23 opt-in ``SGLANG_ENABLE_PCIE_IPC_ALLREDUCE``): SGLang quietly
    keeps NCCL when its conditions fail (pcie_ipc_ar.py:77-113, 224-230), so say so before launch."""
    cid = "pcie-ipc-allreduce"
    user = _truthy(ctx.environ.get(PCIE_IPC_ENV))
    want = user or _truthy(ctx.env(PCIE_IPC_ENV)) or ctx.mode("pcie_ipc_allreduce") in ("require", "prefer")
    if not want:
        return Verdict(cid, Status.PASS, f"not requested ({PCIE_IPC_ENV} unset; opt-in in SGLang 0.5.23)")
    flag = f"{PCIE_IPC_ENV}=1" if user else None
    fix = "leave it off: NCCL (or the custom all-reduce) carries the all-reduce"
    if ctx.flags is not None and ctx.flags.env and PCIE_IPC_ENV not in ctx.flags.env:
        why = f"SGLang {ctx.flags.version} has no {PCIE_IPC_ENV} (it is ignored there)"
        return unsupported(ctx, cid, "pcie_ipc_allreduce", flag, why, "SGLang 0.5.23 has it; " + fix)
    if ctx.stack.fi_pcie_ipc is False:
        why = (f"{_fi(ctx.stack.flashinfer)} lacks PcieIpcAllReduceWorkspace, so SGLang falls back to "
               "NCCL (pcie_ipc_ar.py:224-230)")
        return unsupported(ctx, cid, "pcie_ipc_allreduce", flag, why, "flashinfer-python 0.7.2 exports it; " + fix)
    if ctx.world not in _PCIE_IPC_WORLD_SIZES:
        why = f"tp={ctx.world}: its kernels build IPC channels for world sizes {list(_PCIE_IPC_WORLD_SIZES)} only"
        return unsupported(ctx, cid, "pcie_ipc_allreduce", flag, why, fix)
    if bool(ctx.args.get("enable_deterministic_inference")):
        why = "deterministic inference turns it off (pcie_ipc_ar.py:97-104)"
        return unsupported(ctx, cid, "pcie_ipc_allreduce", flag, why, fix)
    if str(ctx.args.get("dtype") or "auto") in ("float16", "half", "float32", "float"):
        why = f"--dtype {ctx.args.get('dtype')}: the kernels are tuned for bfloat16 only"
        return Verdict(cid, Status.WARN, why, "use --dtype bfloat16 or leave PCIe-IPC off")
    if ctx.facts.nvlink_among(ctx.world) and not bool(ctx.args.get("disable_custom_all_reduce")):
        return Verdict(cid, Status.WARN, "the GPUs are joined by NVLink: SGLang tries its custom all-reduce first "
                       "(parallel_state.py:966-975), so PCIe-IPC will rarely run", "meant for PCIe-only boxes")
    return Verdict(cid, Status.PASS, f"tp={ctx.world} on PCIe, {_fi(ctx.stack.flashinfer)} has the "
                   "PCIe-IPC workspace: SGLang uses it for decode-sized bf16 all-reduces")


# Measured on 2x H200 over NVLink (docs/benchmarks.md, "What the repeats show"): what a PCIe profile costs there.
_NVLINK_COST = {
    "pcie-ring": "on 2x H200 over NVLink it lost all 5 paired runs to the default (score 1.14, a steady 14% loss)",
    "fewchan": "on 2x H200 over NVLink it lost all 5 paired runs (score 1.61): 1.8x slower at 256 KiB, 3.4x at 1 MiB "
               "and 16x at 64 MiB, for 528 MiB less NCCL memory per GPU",
}


def check_profile_fit(ctx: Context) -> Verdict:
    """A profile whose description says it is for PCIe boxes, launched on NVLink/NVSwitch GPUs: warn with what it
    was measured to cost there (docs/benchmarks.md holds the measurements)."""
    cid, prof = "profile-fit", ctx.profile
    if prof is None:
        return Verdict(cid, Status.SKIP, "no profile")
    text = f"{prof.description} {' '.join(prof.evidence)}"
    meant_for_pcie = "pcie" in text.lower() and ("pcie" in prof.name.lower() or "PCIe box" in text
                                                  or "PCIe-only" in text or "on PCIe" in text)
    n = max(ctx.args.tp, 1)
    if not meant_for_pcie or n < 2:
        return Verdict(cid, Status.PASS, f"profile {prof.name} makes no interconnect assumption that conflicts here")
    link = "NVSwitch" if ctx.facts.nvswitch else ("NVLink" if ctx.facts.nvlink_among(n) else None)
    if link is None:
        return Verdict(cid, Status.PASS, f"profile {prof.name} is meant for PCIe and these {n} GPUs are on PCIe")
    cost = _NVLINK_COST.get(prof.name, "it was not measured to help there")
    return Verdict(cid, Status.WARN, f"profile {prof.name} is described as a PCIe profile but these {n} GPUs are on "
                   f"{link}: {cost} (measured with sglwrap bench-comm)", "use --profile baseline on NVLink/NVSwitch hosts")

