"""Checks of the software stack against the driver and the GPUs: cuda-driver, torch-arch, flashinfer-cubin."""

from __future__ import annotations

from sglwrap.host.stackview import parse_version
from sglwrap.preflight.model import Context, Status, Verdict


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
    floor = "580" if rt[0] >= 13 else "525"
    if drv[0] < rt[0]:
        return Verdict(cid, Status.BLOCK, f"{facts}: torch will fail with 'The NVIDIA driver on your system is "
                       "too old'", f"install an NVIDIA driver >= {floor}, or a torch built for CUDA {drv[0]}.x")
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
    if st.torch is None or st.torch_arch_list is None:
        return Verdict(cid, Status.SKIP, "torch is not installed for the target interpreter")
    if not ctx.facts.gpus:
        return Verdict(cid, Status.SKIP, "no GPU to compare against")
    missing = sorted({g.sm for g in ctx.facts.gpus if not _arch_ok(g.compute_capability, st.torch_arch_list)})
    have = " ".join(st.torch_arch_list) or "none"
    src = st.origin.get("torch", "")
    if missing:
        return Verdict(cid, Status.BLOCK,
                       f"torch {st.torch} has no kernels for {', '.join(missing)} (its arch list: {have}; {src}): "
                       "'no kernel image is available for execution on the device'",
                       "install a torch built for CUDA >= 12.8, whose wheels carry sm_120 "
                       "(e.g. pip install torch --index-url https://download.pytorch.org/whl/cu128)")
    sms = ", ".join(sorted({g.sm for g in ctx.facts.gpus}))
    return Verdict(cid, Status.PASS, f"torch {st.torch} covers {sms} (arch list: {have}; {src})")


def _base(v: str) -> str:
    return v.split("+", 1)[0]


def check_flashinfer_cubin(ctx: Context) -> Verdict:
    """flashinfer-cubin / flashinfer-jit-cache must match flashinfer-python, else kernels are fetched at run time."""
    cid, pk = "flashinfer-cubin", ctx.stack.packages
    fi = pk.get("flashinfer-python")
    if fi is None:
        return Verdict(cid, Status.SKIP, "flashinfer-python is not installed")
    bad = [f"{name} {pk[name]}" for name in ("flashinfer-cubin", "flashinfer-jit-cache")
           if name in pk and _base(pk[name]) != _base(fi)]
    if bad:
        return Verdict(cid, Status.WARN,
                       f"{' and '.join(bad)} do not match flashinfer-python {fi}: FlashInfer ignores them (with a "
                       "warning) and compiles or downloads kernels at run time into ~/.cache/flashinfer, which fails "
                       "offline (flashinfer/jit/env.py:79-135)",
                       f"pip install flashinfer-cubin=={_base(fi)} (and flashinfer-jit-cache of the same version), "
                       "or pre-warm ~/.cache/flashinfer on a connected host")
    present = [n for n in ("flashinfer-cubin", "flashinfer-jit-cache") if n in pk]
    if not present:
        return Verdict(cid, Status.PASS, f"flashinfer-python {fi} without prebuilt cubins: kernels are compiled or "
                       "downloaded on first use (needs nvcc or network)")
    return Verdict(cid, Status.PASS, f"{', '.join(present)} match flashinfer-python {fi}")
