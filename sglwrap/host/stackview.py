"""One typed view of the stack for the checks: probed facts where a probe ran, else known tables by version.

Each derived fact records where it came from ("probe" or a table with its source), so a check's reason can say
whether it read the installed package or assumed from a version (``--assume-stack``).
"""

from __future__ import annotations

import re
from typing import Any

from sglwrap.host.facts import HostFacts
from sglwrap.record import Record, field

Version = tuple[int, ...]


def parse_version(text: str | None) -> Version | None:
    """``"2.9.1+cu128"`` -> (2, 9, 1); None when there is no leading number."""
    from sglwrap.versions import release

    return release(text)


def at_least(text: str | None, floor: str) -> bool:
    """``sglwrap.versions.at_least`` (imported when a table is consulted)."""
    from sglwrap.versions import at_least as _at_least

    return _at_least(text, floor)


def before(text: str | None, floor: str) -> bool:
    """``sglwrap.versions.before``."""
    from sglwrap.versions import before as _before

    return _before(text, floor)


def local_tag(text: str | None) -> str | None:
    """The ``+cuXXX`` local tag of a torch version, e.g. ``cu128``."""
    if not text or "+" not in text:
        return None
    return text.split("+", 1)[1]


def cuda_of_tag(tag: str | None) -> str | None:
    """``cu128`` -> ``12.8``, ``cu130`` -> ``13.0``; None for cpu/rocm tags."""
    m = re.fullmatch(r"cu(\d+)(\d)", tag or "")
    return f"{m.group(1)}.{m.group(2)}" if m else None


# Default CUDA of the plain PyPI torch wheel (no +cu tag) by torch minor (pytorch RELEASE.md support matrices).
_TORCH_DEFAULT_CUDA: tuple[tuple[Version, str], ...] = (
    ((2, 11), "13.0"),  # measured: torch 2.11.0 on the 2x H200 box reports 13.0 (shared/data/host_h200x2.json)
    ((2, 9), "12.8"),
    ((2, 7), "12.6"),
    ((2, 5), "12.4"),
    ((0,), "12.1"),
)


def torch_default_cuda(version: Version) -> str:
    """CUDA of the default PyPI torch build for ``version``."""
    return next(cuda for floor, cuda in _TORCH_DEFAULT_CUDA if version >= floor)


def torch_arch_table(cuda: str | None) -> tuple[str, ...]:
    """SASS in PyPI torch builds by CUDA (pytorch#182849 RELEASE.md): <=12.6 stops at Hopper; 12.8+ has sm_120."""
    from sglwrap.versions import at_least

    if parse_version(cuda) is None:
        return ()
    if at_least(cuda, "12.8"):
        return ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120")
    return ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90")


# Highest CUDA each driver branch supports (NVIDIA CUDA toolkit release notes, table 3).
_DRIVER_CUDA: tuple[tuple[int, str], ...] = (
    (580, "13.0"), (575, "12.9"), (570, "12.8"), (560, "12.6"), (555, "12.5"), (550, "12.4"),
    (545, "12.3"), (535, "12.2"), (530, "12.1"), (525, "12.0"), (520, "11.8"), (450, "11.0"),
)


def driver_cuda(driver: str | None) -> str | None:
    """The newest CUDA a driver version supports, from its branch (``580.95.05`` -> ``13.0``)."""
    v = parse_version(driver)
    if v is None:
        return None
    return next((cuda for branch, cuda in _DRIVER_CUDA if v[0] >= branch), None)


class StackView(Record):
    """What the checks need to know about the software stack, each fact with its origin."""

    packages: dict[str, str]
    torch: str | None
    torch_cuda: str | None
    torch_arch_list: tuple[str, ...] | None
    torch_cpp_arches: tuple[str, ...] | None
    nccl: str | None
    sglang: str | None
    flashinfer: str | None
    fi_trtllm_comm_majors: tuple[int, ...] | None
    fi_mnnvl_majors: tuple[int, ...] | None
    fi_pcie_ipc: bool | None
    sglang_fusion_majors: tuple[int, ...] | None
    sglang_symm_majors: tuple[int, ...] | None
    sglang_symm_world_sizes: tuple[int, ...] | None
    driver_cuda: str | None
    origin: dict[str, str] = field(default_factory=dict)

    @property
    def sglang_version(self) -> Version | None:
        return parse_version(self.sglang)

    @property
    def flashinfer_version(self) -> Version | None:
        return parse_version(self.flashinfer)


def stack_view(facts: HostFacts) -> StackView:
    """Combine ``facts.packages`` and ``facts.probes["stack"]`` into a StackView, filling gaps from tables."""
    pk = dict(facts.packages)
    probe: dict[str, Any] = facts.probes.get("stack") or {}
    origin: dict[str, str] = {}
    t = _torch_part(pk, probe.get("torch") or {}, facts.probes.get("torch_arch_override"), origin)
    fi = _flashinfer_part(pk.get("flashinfer-python"), probe.get("flashinfer") or {}, origin)
    sg = _sglang_part(pk.get("sglang"), probe.get("sglang") or {}, origin)
    if facts.cuda_driver_version:
        drv: str | None = f"{facts.cuda_driver_version // 1000}.{facts.cuda_driver_version % 1000 // 10}"
        origin["driver_cuda"] = "NVML cuda_driver_version"
    else:
        drv = driver_cuda(facts.driver_version)
        origin["driver_cuda"] = "driver branch table"
    nccl = (pk.get("nccl") or facts.binaries.get("nccl") or (probe.get("torch") or {}).get("nccl")
            or pk.get("nvidia-nccl-cu13") or pk.get("nvidia-nccl-cu12"))
    return StackView(packages=pk, nccl=nccl, sglang=pk.get("sglang"), flashinfer=pk.get("flashinfer-python"),
                     driver_cuda=drv, origin=origin, **t, **fi, **sg)


def _torch_part(pk: dict[str, str], probe: dict[str, Any], override: Any, origin: dict[str, str]) -> dict[str, Any]:
    ver = pk.get("torch")
    if probe.get("version") and "error" not in probe:
        origin["torch"] = "probe (the installed torch)"
        arches = tuple(override) if override else tuple(probe.get("arch_list") or ())
        cpp = probe.get("cpp_extension_arches")
        return {"torch": probe["version"], "torch_cuda": probe.get("cuda"), "torch_arch_list": arches,
                "torch_cpp_arches": tuple(cpp) if cpp else None}
    v = parse_version(ver)
    if v is None:
        return {"torch": None, "torch_cuda": None, "torch_arch_list": None, "torch_cpp_arches": None}
    cuda = cuda_of_tag(local_tag(ver)) or torch_default_cuda(v)
    origin["torch"] = f"table for torch {ver} (CUDA {cuda})"
    arches = tuple(override) if override else torch_arch_table(cuda)
    if override:
        origin["torch"] += ", arch list given"
    # torch.utils.cpp_extension supported_arches gained 12.0 in pytorch#145436, first released in 2.7.
    cpp = ("8.0", "8.6", "8.9", "9.0", "9.0a", "10.0", "10.0a") + (("12.0", "12.0a") if at_least(ver, "2.7") else ())
    return {"torch": ver, "torch_cuda": cuda, "torch_arch_list": arches, "torch_cpp_arches": cpp}


def _flashinfer_part(ver: str | None, probe: dict[str, Any], origin: dict[str, str]) -> dict[str, Any]:
    if probe.get("found"):
        origin["flashinfer"] = "probe (read flashinfer/jit/comm.py)"
        return {
            "fi_trtllm_comm_majors": _majors(probe.get("gen_trtllm_comm_module")),
            "fi_mnnvl_majors": _majors(probe.get("gen_trtllm_mnnvl_comm_module")),
            "fi_pcie_ipc": bool(probe.get("pcie_ipc_api")),
        }
    v = parse_version(ver)
    if v is None:
        return {"fi_trtllm_comm_majors": None, "fi_mnnvl_majors": None, "fi_pcie_ipc": None}
    origin["flashinfer"] = f"table for flashinfer-python {ver}"
    # trtllm comm: [9, 10] in v0.4.0..v0.6.16; 12 added by PR #3903, first tag v0.6.17 (research-preflight §3).
    trtllm = (9, 10, 12) if at_least(ver, "0.6.17") else (9, 10)
    # PcieIpcAllReduceWorkspace: after tag v0.6.18, exported in 0.7.2 (flashinfer/comm/__init__.py:38).
    pcie = True if at_least(ver, "0.7.2") else (False if before(ver, "0.6.19") else None)
    return {"fi_trtllm_comm_majors": trtllm, "fi_mnnvl_majors": (9, 10), "fi_pcie_ipc": pcie}


def _majors(value: Any) -> tuple[int, ...] | None:
    return tuple(int(x) for x in value) if isinstance(value, list) else None


def _sglang_part(ver: str | None, probe: dict[str, Any], origin: dict[str, str]) -> dict[str, Any]:
    if probe:
        origin["sglang"] = "probe (read the installed SGLang's source)"
        fusion = (9, 10) if probe.get("fusion_requires_sm90_sm10x") else None
        majors = probe.get("symm_mem_majors")
        sizes = probe.get("symm_mem_world_sizes")
        return {"sglang_fusion_majors": fusion, "sglang_symm_majors": tuple(majors) if majors else None,
                "sglang_symm_world_sizes": tuple(sizes) if sizes else None}
    v = parse_version(ver)
    if v is None:
        return {"sglang_fusion_majors": None, "sglang_symm_majors": None, "sglang_symm_world_sizes": None}
    origin["sglang"] = f"table for sglang {ver}"
    # 0.5.23: _resolve_backend raises off SM90/SM10x (srt/layers/flashinfer_comm_fusion.py:46-50); not verified
    # for older releases, where FlashInfer's own JIT gate decides.
    fusion = (9, 10) if at_least(ver, "0.5.23") else None
    # TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES (srt/distributed/device_communicators/all_reduce_utils.py:3-16).
    return {"sglang_fusion_majors": fusion, "sglang_symm_majors": (9, 10), "sglang_symm_world_sizes": (2, 4, 6, 8)}
