"""Checks of the software stack against the driver and the GPUs: cuda-driver, torch-arch, flashinfer-cubin."""

from __future__ import annotations

from sglwrap.host.stackview import parse_version
from sglwrap.preflight.model import Context, Status, Verdict
from sglwrap.record import replace


def check_cuda_driver(ctx: Context) -> Verdict:
    """The driver must support torch's CUDA runtime: CUDA 13 needs a >= 580 driver, CUDA 12 >= 525."""
    cid, st = "cuda-driver", ctx.stack
    if st.torch is None:
        return Verdict(cid, Status.SKIP, "torch is not installed for the target interpreter")
    if st.torch_cuda is None:
        return Verdict(cid, Status.BLOCK, f"torch {st.torch} is a CPU-only build", "install a CUDA build of torch")
    if st.driver_cuda is None:
        return Verdict(cid, Status.SKIP, f"torch {st.torch} uses CUDA {st.torch_cuda}; the driver is unknown "
                       f"({ctx.facts.source})", "pass --assume-stack driver=580.95.05 to check a planned host")
    rt, drv = parse_version(st.torch_cuda) or (0,), parse_version(st.driver_cuda) or (0,)
    facts = (f"torch {st.torch} uses CUDA {st.torch_cuda}; driver {ctx.facts.driver_version or '?'} supports "
             f"CUDA {st.driver_cuda} ({st.origin.get('driver_cuda', '')})")
    api = ctx.facts.binaries.get("cuda_driver_api")
    if isinstance(api, int) and (api // 1000, api % 1000 // 10) > drv[:2]:
        # a forward-compatibility libcuda (cuda-compat) answers cuDriverGetVersion with its own, newer CUDA
        drv = (api // 1000, api % 1000 // 10)
        facts += f"; the libcuda loaded reports CUDA {drv[0]}.{drv[1]} (forward-compatibility package)"
    floor = "580" if rt[0] >= 13 else "525"
    if drv[0] < rt[0]:
        tag = "[driver-too-old-cuda13-torch] " if rt[0] >= 13 else ""
        return Verdict(cid, Status.BLOCK, f"{tag}{facts}: torch will fail with 'The NVIDIA "
                       "driver on your system is too old'",
                       f"install an NVIDIA driver >= {floor}, or a torch built for CUDA {drv[0]}.x")
    if drv[:2] < rt[:2]:
        return Verdict(cid, Status.WARN, f"{facts}: minor-version compatibility only, PTX JIT (FlashInfer, "
                       "Triton) may fail with cudaErrorUnsupportedPtxVersion",
                       f"upgrade the driver to one supporting CUDA {st.torch_cuda}")
    return Verdict(cid, Status.PASS, facts)


def _arch_ok(cc: tuple[int, int], arches: tuple[str, ...]) -> bool:
    """SASS sm_XY runs on the same major with minor >= Y (not the 'a'/'f' variants); PTX compute_XY on any CC >= XY."""
    for a in arches:
        kind, _, num = a.partition("_")
        if not num or not num[:-1].isdigit() and not num.isdigit():
            continue
        suffix = num[-1] if num[-1].isalpha() else ""
        digits = num[:-1] if suffix else num
        major, minor = int(digits[:-1]), int(digits[-1])
        if kind == "sm" and major == cc[0] and minor <= cc[1] and (not suffix or minor == cc[1]):
            return True
        if kind == "compute" and not suffix and (major, minor) <= cc:
            return True
    return False


def check_torch_arch(ctx: Context) -> Verdict:
    """torch must carry SASS or PTX for every GPU's compute capability (sm_120 on RTX PRO 6000 Blackwell)."""
    cid, st = "torch-arch", ctx.stack
    override = ctx.facts.probes.get("torch_arch_override")
    if (st.torch is None or st.torch_arch_list is None) and override:
        st = replace(st, torch=st.torch or "(version not given)", torch_arch_list=tuple(override))
    if st.torch is None or st.torch_arch_list is None:
        return Verdict(cid, Status.SKIP, "torch is not installed for the target interpreter")
    if not ctx.facts.gpus:
        return Verdict(cid, Status.SKIP, "no GPU to compare against")
    missing = sorted({g.sm for g in ctx.facts.gpus if not _arch_ok(g.compute_capability, st.torch_arch_list)})
    have = " ".join(st.torch_arch_list) or "none"
    src = st.origin.get("torch", "")
    if missing:
        return Verdict(cid, Status.BLOCK,
                       f"[torch-missing-arch] torch {st.torch} has no kernels for {', '.join(missing)} (its arch list: "
                       f"{have}; {src}): 'no kernel image is available for execution on the device'",
                       "install a torch built for CUDA >= 12.8, whose wheels carry sm_120 "
                       "(e.g. pip install torch --index-url https://download.pytorch.org/whl/cu128)")
    sms = ", ".join(sorted({g.sm for g in ctx.facts.gpus}))
    return Verdict(cid, Status.PASS, f"torch {st.torch} covers {sms} (arch list: {have}; {src})")


def _base(v: str) -> str:
    return v.split("+", 1)[0]


def check_flashinfer_cubin(ctx: Context) -> Verdict:
    """flashinfer-cubin / flashinfer-jit-cache must match flashinfer-python: before 0.7 FlashInfer raises at import
    (block); 0.7+ ignores the stale package with a warning and fetches kernels at run time (warn). The knowledge-base
    entries flashinfer-*-mismatch-* say which."""
    cid, pk = "flashinfer-cubin", ctx.stack.packages
    fi = pk.get("flashinfer-python")
    if fi is None:
        return Verdict(cid, Status.SKIP, "flashinfer-python is not installed")
    from sglwrap.compat.kb import by_id
    from sglwrap.compat.match import matches

    table = by_id(ctx.knowledge)
    for eid in ("flashinfer-cubin-mismatch-raises", "flashinfer-jit-cache-mismatch-raises",
                "flashinfer-cubin-mismatch-ignored"):
        entry = table.get(eid)
        m = matches(entry, ctx) if entry is not None else None
        if m is None:
            continue
        status = Status.BLOCK if m.entry.severity == "block" else Status.WARN
        pkg = "flashinfer-jit-cache" if "jit-cache" in eid else "flashinfer-cubin"
        fix = f"pip install {pkg}=={_base(fi)} (or uninstall {pkg}); {m.entry.fix}"
        return Verdict(cid, status, f"[{eid}] {m.facts}: {m.entry.consequence}", fix)
    present = [n for n in ("flashinfer-cubin", "flashinfer-jit-cache") if n in pk]
    if not present:
        return Verdict(cid, Status.PASS, f"flashinfer-python {fi} without prebuilt cubins: kernels are compiled or "
                       "downloaded on first use (needs nvcc or network)")
    return Verdict(cid, Status.PASS, f"{', '.join(present)} match flashinfer-python {fi}")


def check_nvml_live(ctx: Context) -> Verdict:
    """A live host whose NVML reports no GPU cannot run SGLang on CUDA: block, unless ``--device`` says otherwise."""
    cid, f = "nvml", ctx.facts
    if f.gpus:
        return Verdict(cid, Status.PASS, f"{f.gpu_count} GPU(s) from {f.source}")
    device = ctx.args.device
    if device not in (None, "cuda"):
        return Verdict(cid, Status.SKIP, f"--device {device}: no NVIDIA GPU needed")
    why = "; ".join(f.notes) or "NVML reported no GPU"
    live = f.source.startswith("nvml")
    host, where = ("this host's", "here") if live else (f"the captured host's ({f.source})", "there")
    return Verdict(cid, Status.BLOCK, f"{host} NVML gives no GPU ({why}): SGLang on CUDA cannot start {where}",
                   "fix the driver/NVML (nvidia-smi must list the GPUs), pass --device cpu for a CPU launch, or plan "
                   "for another machine with --assume 8xH200")


def check_sglang_installed(ctx: Context) -> Verdict:
    """The target interpreter must have SGLang: without it the launch exits at once. Planning with --assume-stack
    sglang=X passes; planning for a catalogue or captured host only warns."""
    cid, st = "sglang-installed", ctx.stack
    assumed = (ctx.facts.probes.get("assume_stack") or {}).get("sglang")
    if assumed:
        left = ctx.facts.probes.get("assume_stack_left_out") or {}
        extra = (f"; the installed {', '.join(f'{k} {v}' for k, v in left.items())} are not part of the plan "
                 "(that release brings its own; name them in --assume-stack to plan with them)") if left else ""
        return Verdict(cid, Status.PASS, f"SGLang {assumed} assumed (--assume-stack){extra}")
    if st.packages.get("sglang"):
        return Verdict(cid, Status.PASS, f"SGLang {st.packages['sglang']} installed for the target interpreter")
    planned = ctx.args.version
    why = (f"SGLang is not installed for the target interpreter (SGLWRAP_PYTHON or this python); the plan uses "
           f"SGLang {planned}'s bundled flag data")
    fix = "pip install sglang into the interpreter that will run it, or point SGLWRAP_PYTHON at one that has it"
    if not ctx.facts.source.startswith("nvml"):  # a catalogue host or a captured/file host: another machine
        return Verdict(cid, Status.WARN, why + " (planning for another machine)", fix)
    return Verdict(cid, Status.BLOCK, why + ": the launch would fail before loading anything", fix)
