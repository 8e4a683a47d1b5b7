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
    interconnect: str  # "nvswitch" (all-to-all NVLink, multicast), "pcie" (no NVLink), "pairs" (NVLink bridges)
    nvlinks_per_gpu: int  # active NVLinks per GPU on the usual board (0 on PCIe)
    pcie_p2p: bool  # whether the driver allows PCIe peer-to-peer on this card
    source: str


_CAT: tuple[CatalogueGpu, ...] = (
    CatalogueGpu("T4", "Tesla T4", 15360, (7, 5), "pcie", 0, True,
                 "nvidia-smi memory.total 15360MiB (modal-labs/modal-client PR 2797); PCIe card, no NVLink"),
    CatalogueGpu("V100", "Tesla V100-SXM2-32GB", 32768, (7, 0), "pcie", 0, True,
                 "32 GB HBM2 datasheet capacity (no public nvidia-smi total found); CC 7.0; modelled without NVLink"),
    CatalogueGpu("A10", "NVIDIA A10", 23028, (8, 6), "pcie", 0, True,
                 "nvidia-smi memory.total 23028MiB (modal-labs/modal-client PR 2797); PCIe card, no NVLink"),
    CatalogueGpu("A10G", "NVIDIA A10G", 23028, (8, 6), "pcie", 0, True,
                 "name from nvidia-smi on AWS (NVIDIA/k8s-device-plugin issue 344); memory taken as the A10's 23028MiB "
                 "(same 24 GB GA102 board; no public A10G total found)"),
    CatalogueGpu("L4", "NVIDIA L4", 23034, (8, 9), "pcie", 0, True,
                 "nvidia-smi memory.total in public L4 reports; PCIe card, no NVLink"),
    CatalogueGpu("L20", "NVIDIA L20", 49152, (8, 9), "pcie", 0, True,
                 "48 GB datasheet capacity (no public nvidia-smi total found); CC 8.9; PCIe card, no NVLink"),
    CatalogueGpu("L40", "NVIDIA L40", 46068, (8, 9), "pcie", 0, True,
                 "48 GB AD102 board; memory taken as the L40S's 46068MiB (modal-client PR 2797); PCIe, no NVLink"),
    CatalogueGpu("L40S", "NVIDIA L40S", 46068, (8, 9), "pcie", 0, True,
                 "nvidia-smi memory.total in public L40S reports; PCIe card, no NVLink"),
    CatalogueGpu("RTX-A6000", "NVIDIA RTX A6000", 49152, (8, 6), "pcie", 0, True,
                 "48 GB datasheet capacity (no public nvidia-smi total found); Ampere CC 8.6; modelled without NVLink bridge"),
    CatalogueGpu("RTX-6000-Ada", "NVIDIA RTX 6000 Ada Generation", 49152, (8, 9), "pcie", 0, True,
                 "48 GB datasheet capacity (no public nvidia-smi total found); CC 8.9; PCIe only"),
    CatalogueGpu("RTX-5880-Ada", "NVIDIA RTX 5880 Ada Generation", 49152, (8, 9), "pcie", 0, True,
                 "48 GB datasheet capacity (no public nvidia-smi total found); CC 8.9 (Ada); PCIe only, peer "
                 "access through the PCIe host bridge (NVIDIA/nccl issue 2079)"),
    CatalogueGpu("RTX-2080", "NVIDIA GeForce RTX 2080", 8192, (7, 5), "pcie", 0, False,
                 "8 GB datasheet capacity (no public nvidia-smi total found); Turing CC 7.5; GeForce: no PCIe P2P"),
    CatalogueGpu("RTX-2080-Ti", "NVIDIA GeForce RTX 2080 Ti", 11264, (7, 5), "pcie", 0, False,
                 "11 GB datasheet capacity (no public nvidia-smi total found); Turing CC 7.5; GeForce: no PCIe P2P"),
    CatalogueGpu("RTX-A4000", "NVIDIA RTX A4000", 16384, (8, 6), "pcie", 0, True,
                 "name from nvidia-smi (RainbowMiner/RainbowMiner issue 1796); 16 GB datasheet capacity; Ampere CC 8.6"),
    CatalogueGpu("RTX-3060", "NVIDIA GeForce RTX 3060", 12288, (8, 6), "pcie", 0, False,
                 "nvidia-smi 12288MiB (geerlingguy/raspberry-pi-pcie-devices issue 790); GeForce: PCIe P2P disabled"),
    CatalogueGpu("RTX-3090", "NVIDIA GeForce RTX 3090", 24576, (8, 6), "pcie", 0, False,
                 "nvidia-smi memory.total in public reports; GeForce: PCIe P2P disabled by the driver"),
    CatalogueGpu("RTX-4090", "NVIDIA GeForce RTX 4090", 24564, (8, 9), "pcie", 0, False,
                 "nvidia-smi 24564MiB (RLinf/RLinf issue 255); GeForce: PCIe P2P disabled by the driver"),
    CatalogueGpu("RTX-5060", "NVIDIA GeForce RTX 5060", 8151, (12, 0), "pcie", 0, False,
                 "8 GB datasheet capacity (8151MiB assumed, no public nvidia-smi total found); SM120; GeForce: PCIe P2P disabled"),
    CatalogueGpu("RTX-5060-Ti", "NVIDIA GeForce RTX 5060 Ti", 16384, (12, 0), "pcie", 0, False,
                 "16 GB datasheet capacity (no public nvidia-smi total found); SM120; GeForce: PCIe P2P disabled"),
    CatalogueGpu("RTX-5070", "NVIDIA GeForce RTX 5070", 12227, (12, 0), "pcie", 0, False,
                 "nvidia-smi 12227MiB (shkhln/libc6-shim issue 14); SM120; GeForce: PCIe P2P disabled"),
    CatalogueGpu("RTX-5080", "NVIDIA GeForce RTX 5080", 16303, (12, 0), "pcie", 0, False,
                 "nvidia-smi memory.total in public reports; SM120; GeForce: PCIe P2P disabled"),
    CatalogueGpu("RTX-5090", "NVIDIA GeForce RTX 5090", 32607, (12, 0), "pcie", 0, False,
                 "nvidia-smi 32607MiB (develsoftware/GMinerRelease issue 938); SM120; GeForce: PCIe P2P disabled"),
    CatalogueGpu("RTX-PRO-6000", "NVIDIA RTX PRO 6000 Blackwell Server Edition", 97887, (12, 0), "pcie", 0, True,
                 "nvidia-smi memory.total in public reports (96 GB GDDR7); SM120; PCIe only (the reference story's box)"),
    CatalogueGpu("A100-40G", "NVIDIA A100-SXM4-40GB", 40960, (8, 0), "nvswitch", 12, True,
                 "nvidia-smi memory.total on A100-SXM4-40GB; HGX A100 with NVSwitch, 12 NVLinks per GPU"),
    CatalogueGpu("A100-80G", "NVIDIA A100-SXM4-80GB", 81920, (8, 0), "nvswitch", 12, True,
                 "nvidia-smi memory.total on A100-SXM4-80GB; HGX A100 with NVSwitch, 12 NVLinks per GPU"),
    CatalogueGpu("A800", "NVIDIA A800-SXM4-80GB", 81920, (8, 0), "nvswitch", 8, True,
                 "A800 is the China variant of the A100 80GB (OpenRLHF/OpenRLHF PR 298): CC 8.0, memory as the A100-80G; "
                 "NVSwitch with fewer NVLinks"),
    CatalogueGpu("H100", "NVIDIA H100 80GB HBM3", 81559, (9, 0), "nvswitch", 18, True,
                 "nvidia-smi 81559MiB on H100 SXM5 (NVIDIA/nccl issue 1264); HGX H100 with NVSwitch, 18 NVLinks per GPU"),
    CatalogueGpu("H100-PCIe", "NVIDIA H100 PCIe", 81559, (9, 0), "pcie", 0, True,
                 "80 GB HBM2e; memory taken as the SXM5's 81559MiB (no public H100 PCIe total found); PCIe card"),
    CatalogueGpu("H100-NVL", "NVIDIA H100 NVL", 96256, (9, 0), "pairs", 12, True,
                 "94 GiB per GPU (akash-network/provider-configs PR 91); PCIe cards joined in pairs by NVLink bridges"),
    CatalogueGpu("H20", "NVIDIA H20", 97871, (9, 0), "nvswitch", 18, True,
                 "nvidia-smi memory.total in public H20 (96 GB) reports; HGX board with NVSwitch"),
    CatalogueGpu("H200", "NVIDIA H200", 143771, (9, 0), "nvswitch", 18, True,
                 "measured: nvidia-smi 143771 MiB, driver 580.159.04 (shared/data/host_h200x2.json); "
                 "8-GPU HGX H200 boards use NVSwitch, 18 NVLinks per GPU"),
    CatalogueGpu("B200", "NVIDIA B200", 183359, (10, 0), "nvswitch", 18, True,
                 "nvidia-smi memory.total in public B200 reports; HGX B200 with NVSwitch, 18 NVLink5 per GPU"),
    CatalogueGpu("B300", "NVIDIA B300", 274658, (10, 3), "nvswitch", 18, True,
                 "288 GB HBM3e datasheet capacity (no public nvidia-smi total found); SM103; HGX B300 with NVSwitch"),
    CatalogueGpu("GB200", "NVIDIA GB200", 188723, (10, 0), "nvswitch", 18, True,
                 "184.3 GiB per GPU and SM100 in flashinfer collect_env output (flashinfer-ai/flashinfer issue 4337); "
                 "NVL72 NVLink domain"),
    CatalogueGpu("GB10", "NVIDIA GB10", 131072, (12, 1), "pcie", 0, False,
                 "DGX Spark: 128 GB unified LPDDR5x (vllm-project/vllm issue 54125), SM121; one GPU per box"),
    CatalogueGpu("AGX-Thor", "NVIDIA Thor", 131072, (11, 0), "pcie", 0, False,
                 "Jetson AGX Thor: 128 GB unified memory (datasheet capacity; the NVML name is assumed), SM110 under "
                 "CUDA 13 (sgl-project/sglang PR 39811); one GPU per module"),
)

# GPUs sglwrap's checks do not cover: --assume says so in one line instead of passing them silently.
_UNSUPPORTED = re.compile(r"^(MI\d+[A-Z]*|RX-?\d+.*|RADEON.*|INSTINCT.*|GAUDI.*|ARC-.*|MAX-\d+)$", re.I)

CATALOGUE: dict[str, CatalogueGpu] = {g.key.upper(): g for g in _CAT}
# Short names people write: "A100" is the 80 GB SXM part unless the memory is given.
_ALIASES = {"A100": "A100-80G", "H100-SXM": "H100", "H200-SXM": "H200"}
CATALOGUE.update({alias: CATALOGUE[key.upper()] for alias, key in _ALIASES.items()})

_ASSUME_RE = re.compile(r"^(\d+)\s*[xX]\s*([A-Za-z0-9][A-Za-z0-9._-]*)$")


def catalogue_names() -> list[str]:
    """The GPU names ``--assume`` accepts, in catalogue order."""
    return [g.key for g in _CAT]


def facts_for(count: int, gpu: CatalogueGpu) -> HostFacts:
    """HostFacts for ``count`` GPUs of one catalogue model, wired the usual way."""
    return facts_for_mix([(count, gpu)])


def _link(i: int, j: int, gi: CatalogueGpu, gj: CatalogueGpu) -> LinkFacts:
    same = gi.key == gj.key
    nvswitch = same and gi.interconnect == "nvswitch"
    paired = same and gi.interconnect == "pairs" and i // 2 == j // 2
    nvlink = nvswitch or paired
    # On an NVSwitch board every pair shows NV<links per GPU> in nvidia-smi; measured on a 2x H200 slice of an HGX
    # (tests/fixtures/hostfacts/h200x2-capture.json): NV18, each link's far end an NVSwitch.
    p2p = "ok" if (nvlink or (gi.pcie_p2p and gj.pcie_p2p)) else "not_supported"
    return LinkFacts(a=i, b=j, nvlink_count=gi.nvlinks_per_gpu if nvlink else 0, p2p_read=p2p, p2p_write=p2p,
                     p2p_nvlink="ok" if nvlink else "not_supported", common_ancestor=None if nvlink else "NODE")


def facts_for_mix(parts: list[tuple[int, CatalogueGpu]]) -> HostFacts:
    """HostFacts for a box of one or more catalogue models (``1xRTX-5090+1xRTX-3090``), in the order given."""
    models: list[CatalogueGpu] = [gpu for count, gpu in parts for _ in range(count)]
    total = len(models)
    gpus = tuple(
        GpuFacts(
            index=i,
            name=gpu.nvml_name,
            compute_capability=gpu.compute_capability,
            memory_total_bytes=gpu.memory_mib * MIB,
            memory_free_bytes=None,
            uuid=None,
            nvlink_active=gpu.nvlinks_per_gpu if total > 1 and gpu.interconnect != "pcie" else 0,
        )
        for i, gpu in enumerate(models)
    )
    links = tuple(_link(i, j, models[i], models[j]) for i in range(total) for j in range(i + 1, total))
    single = len(parts) == 1
    first = parts[0][1]
    spec = "+".join(f"{c}x{g.key}" for c, g in parts)
    wiring = first.interconnect if single else "pcie (mixed box)"
    return HostFacts(
        source=f"catalogue:{spec}",
        gpus=gpus,
        links=links,
        nvswitch=single and first.interconnect == "nvswitch" and total > 1,
        provenance="; ".join(dict.fromkeys(g.source for _, g in parts)),
        notes=(f"assumed from the built-in catalogue ({wiring}); no GPU was probed",),
    )


def _lookup(spec: str, name: str) -> CatalogueGpu:
    gpu = CATALOGUE.get(name.upper())
    if gpu is not None:
        return gpu
    if _UNSUPPORTED.match(name):
        raise UsageError(f"--assume {spec!r}: {name} is not an NVIDIA GPU; AMD/ROCm and other accelerators are not "
                         "supported by sglwrap's checks (they would pass without being checked)")
    import difflib

    close = difflib.get_close_matches(name.upper(), list(CATALOGUE), n=1, cutoff=0.6)
    hint = f" Did you mean {CATALOGUE[close[0]].key!r}?" if close else ""
    raise UsageError(f"--assume {spec!r}: unknown GPU {name!r}.{hint} Known GPUs: {', '.join(catalogue_names())}")


def resolve_assume(spec: str) -> HostFacts:
    """Turn an ``--assume`` value (``8xH200``, a mixed box ``1xRTX-5090+1xRTX-3090``, or a HostFacts JSON path)
    into HostFacts."""
    items = [p.strip() for p in spec.strip().split("+")]
    matches = [_ASSUME_RE.match(p) for p in items]
    if len(items) > 1 and all(matches):
        parts = []
        for m in matches:
            assert m is not None
            count = int(m.group(1))
            if count < 1:
                raise UsageError(f"--assume {spec!r}: the GPU count must be at least 1")
            parts.append((count, _lookup(spec, m.group(2))))
        return facts_for_mix(parts)
    m = _ASSUME_RE.match(spec.strip())
    if m is None:
        path = Path(spec).expanduser()
        if path.exists() or spec.endswith(".json") or "/" in spec:
            return load_facts(path)
        if spec.strip().upper() in CATALOGUE:
            raise UsageError(f"--assume {spec!r}: how many? Give the GPU count too, e.g. "
                             f"8x{CATALOGUE[spec.strip().upper()].key}")
        if _UNSUPPORTED.match(spec.strip()):
            _lookup(spec, spec.strip())
        raise UsageError(
            f"--assume {spec!r}: expected <count>x<GPU> (e.g. 8xRTX-PRO-6000, 2xH200, 1xRTX-5090+1xRTX-3090) or the "
            f"path of a HostFacts JSON file; known GPUs: {', '.join(catalogue_names())}"
        )
    count, name = int(m.group(1)), m.group(2)
    if count < 1:
        raise UsageError(f"--assume {spec!r}: the GPU count must be at least 1")
    return facts_for(count, _lookup(spec, name))
