"""Known GPUs for ``--assume``: plan for a machine you do not have.

Memory is the total the driver reports (``nvidia-smi --query-gpu=memory.total``), which is less than the
marketing capacity. Each entry names its source. "Usual interconnect" is how the common servers of that GPU
are built (HGX boards with NVSwitch, PCIe cards without NVLink); a real machine may differ — capture its
HostFacts with ``python3 -m sglwrap.host.capture --out host.json`` and pass the file to ``--assume`` instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from sglwrap.errors import UsageError
from sglwrap.host.facts import GpuFacts, HostFacts, LinkFacts, load_facts

MIB = 1024 * 1024


@dataclass(frozen=True)
class CatalogueGpu:
    """One GPU model: what NVML would report and how its servers are usually wired."""

    key: str
    nvml_name: str
    memory_mib: int
    compute_capability: tuple[int, int]
    interconnect: str  # "nvswitch" (all-to-all NVLink, multicast), "pcie" (no NVLink)
    nvlinks_per_gpu: int  # active NVLinks per GPU on the usual board (0 on PCIe)
    pcie_p2p: bool  # whether the driver allows PCIe peer-to-peer on this card
    source: str


_CAT: tuple[CatalogueGpu, ...] = (
    CatalogueGpu("L4", "NVIDIA L4", 23034, (8, 9), "pcie", 0, True,
                 "nvidia-smi memory.total in public L4 reports; PCIe card, no NVLink"),
    CatalogueGpu("L40S", "NVIDIA L40S", 46068, (8, 9), "pcie", 0, True,
                 "nvidia-smi memory.total in public L40S reports; PCIe card, no NVLink"),
    CatalogueGpu("RTX-3090", "NVIDIA GeForce RTX 3090", 24576, (8, 6), "pcie", 0, False,
                 "nvidia-smi memory.total in public reports; GeForce: PCIe P2P disabled by the driver"),
    CatalogueGpu("RTX-4090", "NVIDIA GeForce RTX 4090", 24564, (8, 9), "pcie", 0, False,
                 "nvidia-smi memory.total in public reports; GeForce: PCIe P2P disabled by the driver"),
    CatalogueGpu("RTX-5080", "NVIDIA GeForce RTX 5080", 16303, (12, 0), "pcie", 0, False,
                 "nvidia-smi memory.total in public reports; SM120; GeForce: PCIe P2P disabled"),
    CatalogueGpu("RTX-5090", "NVIDIA GeForce RTX 5090", 32607, (12, 0), "pcie", 0, False,
                 "nvidia-smi memory.total in public reports; SM120; GeForce: PCIe P2P disabled"),
    CatalogueGpu("RTX-PRO-6000", "NVIDIA RTX PRO 6000 Blackwell Server Edition", 97887, (12, 0), "pcie", 0, True,
                 "nvidia-smi memory.total in public reports (96 GB GDDR7); SM120; PCIe only (the reference story's box)"),
    CatalogueGpu("A100-40G", "NVIDIA A100-SXM4-40GB", 40960, (8, 0), "nvswitch", 12, True,
                 "nvidia-smi memory.total on A100-SXM4-40GB; HGX A100 with NVSwitch, 12 NVLinks per GPU"),
    CatalogueGpu("A100-80G", "NVIDIA A100-SXM4-80GB", 81920, (8, 0), "nvswitch", 12, True,
                 "nvidia-smi memory.total on A100-SXM4-80GB; HGX A100 with NVSwitch, 12 NVLinks per GPU"),
    CatalogueGpu("H100", "NVIDIA H100 80GB HBM3", 81559, (9, 0), "nvswitch", 18, True,
                 "nvidia-smi memory.total on H100 SXM5; HGX H100 with NVSwitch, 18 NVLinks per GPU"),
    CatalogueGpu("H20", "NVIDIA H20", 97871, (9, 0), "nvswitch", 18, True,
                 "nvidia-smi memory.total in public H20 (96 GB) reports; HGX board with NVSwitch"),
    CatalogueGpu("H200", "NVIDIA H200", 143771, (9, 0), "nvswitch", 18, True,
                 "measured: nvidia-smi 143771 MiB, driver 580.159.04 (shared/data/host_h200x2.json); "
                 "8-GPU HGX H200 boards use NVSwitch, 18 NVLinks per GPU"),
    CatalogueGpu("B200", "NVIDIA B200", 183359, (10, 0), "nvswitch", 18, True,
                 "nvidia-smi memory.total in public B200 reports; HGX B200 with NVSwitch, 18 NVLink5 per GPU"),
)

CATALOGUE: dict[str, CatalogueGpu] = {g.key.upper(): g for g in _CAT}

_ASSUME_RE = re.compile(r"^(\d+)\s*[xX]\s*([A-Za-z0-9][A-Za-z0-9._-]*)$")


def catalogue_names() -> list[str]:
    """The GPU names ``--assume`` accepts, in catalogue order."""
    return [g.key for g in _CAT]


def facts_for(count: int, gpu: CatalogueGpu) -> HostFacts:
    """HostFacts for ``count`` GPUs of one catalogue model, wired the usual way."""
    gpus = tuple(
        GpuFacts(
            index=i,
            name=gpu.nvml_name,
            compute_capability=gpu.compute_capability,
            memory_total_bytes=gpu.memory_mib * MIB,
            memory_free_bytes=None,
            uuid=None,
            nvlink_active=gpu.nvlinks_per_gpu if count > 1 else 0,
        )
        for i in range(count)
    )
    links = []
    nvlink = gpu.interconnect == "nvswitch"
    # On an NVSwitch board every pair shows NV<links per GPU> in nvidia-smi; measured on a 2x H200 slice of an HGX
    # (tests/fixtures/hostfacts/h200x2-capture.json): NV18, each link's far end an NVSwitch.
    per_pair = gpu.nvlinks_per_gpu if nvlink else 0
    for i in range(count):
        for j in range(i + 1, count):
            p2p = "ok" if (nvlink or gpu.pcie_p2p) else "not_supported"
            links.append(LinkFacts(
                a=i, b=j, nvlink_count=per_pair,
                p2p_read=p2p, p2p_write=p2p,
                p2p_nvlink="ok" if nvlink else "not_supported",
                common_ancestor=None if nvlink else "NODE",
            ))
    return HostFacts(
        source=f"catalogue:{count}x{gpu.key}",
        gpus=gpus,
        links=tuple(links),
        nvswitch=nvlink and count > 1,
        provenance=gpu.source,
        notes=(f"assumed from the built-in catalogue ({gpu.interconnect}); no GPU was probed",),
    )


def resolve_assume(spec: str) -> HostFacts:
    """Turn an ``--assume`` value (``8xH200`` or a HostFacts JSON path) into HostFacts."""
    m = _ASSUME_RE.match(spec.strip())
    if m is None:
        path = Path(spec).expanduser()
        if path.exists() or spec.endswith(".json") or "/" in spec:
            return load_facts(path)
        if spec.strip().upper() in CATALOGUE:
            raise UsageError(f"--assume {spec!r}: how many? Give the GPU count too, e.g. "
                             f"8x{CATALOGUE[spec.strip().upper()].key}")
        raise UsageError(
            f"--assume {spec!r}: expected <count>x<GPU> (e.g. 8xRTX-PRO-6000, 2xH200) or the path of a "
            f"HostFacts JSON file; known GPUs: {', '.join(catalogue_names())}"
        )
    count, name = int(m.group(1)), m.group(2)
    if count < 1:
        raise UsageError(f"--assume {spec!r}: the GPU count must be at least 1")
    gpu = CATALOGUE.get(name.upper())
    if gpu is None:
        import difflib

        close = difflib.get_close_matches(name.upper(), list(CATALOGUE), n=1, cutoff=0.6)
        hint = f" Did you mean {CATALOGUE[close[0]].key!r}?" if close else ""
        raise UsageError(
            f"--assume {spec!r}: unknown GPU {name!r}.{hint} Known GPUs: {', '.join(catalogue_names())}"
        )
    return facts_for(count, gpu)
