"""Known GPUs for ``--assume``: plan for a machine you do not have.

Memory is the total the driver reports (``nvidia-smi --query-gpu=memory.total``), which is less than the
marketing capacity. Each entry names its source. "Usual interconnect" is how the common servers of that GPU
are built (HGX boards with NVSwitch, PCIe cards without NVLink); a real machine may differ — capture its
HostFacts with ``python3 -m sglwrap.host.capture --out host.json`` and pass the file to ``--assume`` instead.
"""

from __future__ import annotations

import re
from pathlib import Path

from sglwrap.bounds import MAX_GPUS_PER_HOST, check_count
from sglwrap.errors import UsageError
from sglwrap.host.facts import GpuFacts, HostFacts, LinkFacts, load_facts
from sglwrap.record import Record

MIB = 1024 * 1024


class CatalogueGpu(Record):
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
                 "nvidia-smi 32768MiB, ECC on, driver 525.105.17 (Wan-Video/Wan2.1 issue 5; the same total in other "
                 "public Tesla V100-SXM2-32GB tables); CC 7.0; modelled without NVLink"),
    CatalogueGpu("V100-16G", "Tesla V100-SXM2-16GB", 16384, (7, 0), "pcie", 0, True,
                 "nvidia-smi 16384MiB, ECC on, driver 550.127.05 (thamada/gls gls/V100_x8_smi.py); CC 7.0; modelled "
                 "without NVLink"),
    CatalogueGpu("A10", "NVIDIA A10", 23028, (8, 6), "pcie", 0, True,
                 "nvidia-smi memory.total 23028MiB (modal-labs/modal-client PR 2797); PCIe card, no NVLink"),
    CatalogueGpu("A10G", "NVIDIA A10G", 23028, (8, 6), "pcie", 0, True,
                 "name from nvidia-smi on AWS (NVIDIA/k8s-device-plugin issue 344); nvidia-smi 23028MiB, ECC on, in "
                 "public AWS g5 nvidia-smi tables (GitHub text search: 7 of the 8 that show memory; one older "
                 "23040MiB)"),
    CatalogueGpu("A30", "NVIDIA A30", 24576, (8, 0), "pcie", 0, True,
                 "nvidia-smi 24576MiB, ECC on (public A30 nvidia-smi tables found by GitHub text search, 8 of 10; one "
                 "older-format table shows 24258MiB, one a 2304MiB slice); GA100 CC 8.0; PCIe card, modelled without "
                 "NVLink bridge"),
    CatalogueGpu("A40", "NVIDIA A40", 46068, (8, 6), "pcie", 0, True,
                 "nvidia-smi 46068MiB, ECC on, driver 550.127.05 (thamada/gls gls/A40x10_smi.py); name also in "
                 "NVIDIA/nvidia-docker issue 1447; GA102 CC 8.6; PCIe card, modelled without NVLink bridge"),
    CatalogueGpu("L4", "NVIDIA L4", 23034, (8, 9), "pcie", 0, True,
                 "nvidia-smi 23034MiB, ECC on, driver 550.90.07 (thamada/gls gls/L4_smi.py; modal-labs/modal-client PR "
                 "2797); PCIe card, no NVLink"),
    CatalogueGpu("L20", "NVIDIA L20", 46068, (8, 9), "pcie", 0, True,
                 "nvidia-smi 46068MiB with ECC on, as the card ships (opendatalab/MinerU issue 667; 5 of 7 public L20 "
                 "nvidia-smi tables found by GitHub text search, one 49140MiB with ECC off, one 8376MiB slice); CC "
                 "8.9; PCIe card, no NVLink"),
    CatalogueGpu("L40", "NVIDIA L40", 46068, (8, 9), "pcie", 0, True,
                 "nvidia-smi 46068MiB with ECC on (6 of 7 public L40 nvidia-smi tables found by GitHub text search; "
                 "49140MiB with ECC off); PCIe, no NVLink"),
    CatalogueGpu("L40S", "NVIDIA L40S", 46068, (8, 9), "pcie", 0, True,
                 "nvidia-smi memory.total 46068 MiB, ECC on, driver 595.71.05 (akash-network/provider-configs PR 99; "
                 "modal-labs/modal-client PR 2797); PCIe card, no NVLink"),
    CatalogueGpu("RTX-A6000", "NVIDIA RTX A6000", 49140, (8, 6), "pcie", 0, True,
                 "nvidia-smi 49140MiB with ECC off, as the card ships (public RTX A6000 nvidia-smi tables, e.g. driver "
                 "515.57, found by GitHub text search); 46068MiB with ECC on (thamada/gls gls/RTX_A6000_x9_smi.py); "
                 "Ampere CC 8.6; modelled without NVLink bridge"),
    CatalogueGpu("RTX-6000-Ada", "NVIDIA RTX 6000 Ada Generation", 49140, (8, 9), "pcie", 0, True,
                 "nvidia-smi 49140MiB, ECC off, driver 550.127.05 (thamada/gls gls/RTX6000Ada_x8_smi.py); CC 8.9; PCIe "
                 "only"),
    CatalogueGpu("RTX-5880-Ada", "NVIDIA RTX 5880 Ada Generation", 49140, (8, 9), "pcie", 0, True,
                 "49140MiB with ECC off, as the RTX 6000 Ada's AD102 48 GB board reports (one public 5880 Ada record; "
                 "one public nvidia-smi table with ECC on shows 46068MiB); CC 8.9 (Ada); PCIe only, peer access "
                 "through the PCIe host bridge (NVIDIA/nccl issue 2079)"),
    CatalogueGpu("RTX-2080", "NVIDIA GeForce RTX 2080", 8192, (7, 5), "pcie", 0, False,
                 "nvidia-smi 8192MiB (public RTX 2080 nvidia-smi tables found by GitHub text search, 5 of 6 agree); "
                 "Turing CC 7.5; GeForce: no PCIe P2P"),
    CatalogueGpu("RTX-2080-Ti", "NVIDIA GeForce RTX 2080 Ti", 11264, (7, 5), "pcie", 0, False,
                 "nvidia-smi 11264MiB (public RTX 2080 Ti nvidia-smi tables found by GitHub text search; 22528MiB ones "
                 "are 22 GB modded boards); Turing CC 7.5; GeForce: no PCIe P2P"),
    CatalogueGpu("RTX-A4000", "NVIDIA RTX A4000", 16376, (8, 6), "pcie", 0, True,
                 "name from nvidia-smi (RainbowMiner/RainbowMiner issue 1796); nvidia-smi 16376MiB, ECC off, on "
                 "current drivers (public RTX A4000 nvidia-smi tables found by GitHub text search; older drivers "
                 "16117MiB); Ampere CC 8.6"),
    CatalogueGpu("RTX-A5000", "NVIDIA RTX A5000", 24564, (8, 6), "pcie", 0, True,
                 "nvidia-smi memory.total 24564 MiB, driver 570.211.01 (akash-network/provider-configs issue 82); "
                 "Ampere CC 8.6; modelled without NVLink bridge"),
    CatalogueGpu("RTX-A4500", "NVIDIA RTX A4500", 20470, (8, 6), "pcie", 0, True,
                 "nvidia-smi 20470MiB, ECC off (public RTX A4500 nvidia-smi tables found by GitHub text search, all "
                 "agree); Ampere CC 8.6; modelled without NVLink bridge"),
    CatalogueGpu("RTX-5000-Ada", "NVIDIA RTX 5000 Ada Generation", 32760, (8, 9), "pcie", 0, True,
                 "nvidia-smi 32760MiB, ECC off, driver 570.195.03 and others (public RTX 5000 Ada nvidia-smi tables "
                 "found by GitHub text search, all agree); CC 8.9; PCIe only"),
    CatalogueGpu("RTX-4000-Ada", "NVIDIA RTX 4000 Ada Generation", 20475, (8, 9), "pcie", 0, True,
                 "nvidia-smi 20475MiB, ECC off, driver 550.90.07 (thamada/gls gls/RTX4000Ada_smi.py); CC 8.9; PCIe "
                 "only"),
    CatalogueGpu("RTX-3060", "NVIDIA GeForce RTX 3060", 12288, (8, 6), "pcie", 0, False,
                 "nvidia-smi 12288MiB (geerlingguy/raspberry-pi-pcie-devices issue 790); GeForce: PCIe P2P disabled"),
    CatalogueGpu("RTX-3090", "NVIDIA GeForce RTX 3090", 24576, (8, 6), "pcie", 0, False,
                 "nvidia-smi 24576MiB, driver 560.35.03 (thamada/gls gls/RTX3090_smi.py; noonghunna/club-3090 issue "
                 "747); GeForce: PCIe P2P disabled by the driver"),
    CatalogueGpu("RTX-3080", "NVIDIA GeForce RTX 3080", 10240, (8, 6), "pcie", 0, False,
                 "10 GB board: nvidia-smi 10240MiB, driver 550.54.14 (thamada/gls gls/RTX3080_smi.py); GeForce: PCIe "
                 "P2P disabled by the driver"),
    CatalogueGpu("RTX-3080-12G", "NVIDIA GeForce RTX 3080", 12288, (8, 6), "pcie", 0, False,
                 "12 GB board (same NVML name): nvidia-smi 12288MiB (one public nvidia-smi table found by GitHub text "
                 "search); GeForce: PCIe P2P disabled by the driver"),
    CatalogueGpu("RTX-3090-Ti", "NVIDIA GeForce RTX 3090 Ti", 24564, (8, 6), "pcie", 0, False,
                 "nvidia-smi 24564MiB (public RTX 3090 Ti nvidia-smi tables found by GitHub text search, all agree); "
                 "GeForce: PCIe P2P disabled by the driver"),
    CatalogueGpu("RTX-4060-Ti-16G", "NVIDIA GeForce RTX 4060 Ti", 16380, (8, 9), "pcie", 0, False,
                 "16 GB board: nvidia-smi 16380MiB, driver 550.54.14 (thamada/gls gls/RTX4060Ti_smi.py); GeForce: PCIe "
                 "P2P disabled by the driver"),
    CatalogueGpu("RTX-4070-Ti-SUPER", "NVIDIA GeForce RTX 4070 Ti SUPER", 16376, (8, 9), "pcie", 0, False,
                 "16,376MiB from nvidia-smi, driver 560.94 (one public report found by GitHub text search; the same "
                 "AD103 16 GB total as the RTX 4080); GeForce: PCIe P2P disabled by the driver"),
    CatalogueGpu("RTX-4080", "NVIDIA GeForce RTX 4080", 16376, (8, 9), "pcie", 0, False,
                 "nvidia-smi 16376MiB (public RTX 4080 nvidia-smi tables found by GitHub text search, 7 of 10; two "
                 "16384MiB, one 32 GB modded board); GeForce: PCIe P2P disabled by the driver"),
    CatalogueGpu("RTX-4080-SUPER", "NVIDIA GeForce RTX 4080 SUPER", 16376, (8, 9), "pcie", 0, False,
                 "nvidia-smi FB total 16376 MiB, driver 595.71.05 (utkuozdemir/nvidia_gpu_exporter PR 414, "
                 "internal/captures/linux-x86_64__nvidia-geforce-rtx-4080-super__595.71.05.txt); GeForce: PCIe P2P "
                 "disabled by the driver"),
    CatalogueGpu("RTX-4090", "NVIDIA GeForce RTX 4090", 24564, (8, 9), "pcie", 0, False,
                 "nvidia-smi 24564MiB (RLinf/RLinf issue 255); GeForce: PCIe P2P disabled by the driver"),
    CatalogueGpu("RTX-5060", "NVIDIA GeForce RTX 5060", 8151, (12, 0), "pcie", 0, False,
                 "nvidia-smi 8151MiB (public RTX 5060 nvidia-smi tables found by GitHub text search, all agree); "
                 "SM120; GeForce: PCIe P2P disabled"),
    CatalogueGpu("RTX-5060-Ti", "NVIDIA GeForce RTX 5060 Ti", 16311, (12, 0), "pcie", 0, False,
                 "16 GB board: nvidia-smi 16311MiB, driver 595.84 and others (public RTX 5060 Ti nvidia-smi tables "
                 "found by GitHub text search; the 8 GB board reports 8151MiB); SM120; GeForce: PCIe P2P disabled"),
    CatalogueGpu("RTX-5070", "NVIDIA GeForce RTX 5070", 12227, (12, 0), "pcie", 0, False,
                 "nvidia-smi 12227MiB (shkhln/libc6-shim issue 14); SM120; GeForce: PCIe P2P disabled"),
    CatalogueGpu("RTX-5080", "NVIDIA GeForce RTX 5080", 16303, (12, 0), "pcie", 0, False,
                 "nvidia-smi 16303MiB (public RTX 5080 nvidia-smi tables found by GitHub text search); SM120; GeForce: "
                 "PCIe P2P disabled"),
    CatalogueGpu("RTX-5090", "NVIDIA GeForce RTX 5090", 32607, (12, 0), "pcie", 0, False,
                 "nvidia-smi 32607MiB (develsoftware/GMinerRelease issue 938); SM120; GeForce: PCIe P2P disabled"),
    CatalogueGpu("RTX-PRO-6000", "NVIDIA RTX PRO 6000 Blackwell Server Edition", 97887, (12, 0), "pcie", 0, True,
                 "nvidia-smi 97887MiB with ECC on or off (public RTX PRO 6000 Blackwell nvidia-smi tables found by "
                 "GitHub text search, all agree; akash-network/provider-configs issue 79); SM120; PCIe only (the "
                 "reference story's box)"),
    CatalogueGpu("A100-40G", "NVIDIA A100-SXM4-40GB", 40960, (8, 0), "nvswitch", 12, True,
                 "nvidia-smi 40960MiB, driver 580.126.09 (bottlerocket-os/bottlerocket-core-kit PR 834; "
                 "modal-labs/modal-client PR 2797); HGX A100 with NVSwitch, 12 NVLinks per GPU"),
    CatalogueGpu("A100-80G", "NVIDIA A100-SXM4-80GB", 81920, (8, 0), "nvswitch", 12, True,
                 "nvidia-smi 81920MiB, driver 555.42.02 (thamada/gls gls/A100SXMx4_smi.py); HGX A100 with NVSwitch, 12 "
                 "NVLinks per GPU"),
    CatalogueGpu("A100-PCIe-40G", "NVIDIA A100-PCIE-40GB", 40960, (8, 0), "pcie", 0, True,
                 "nvidia-smi 40960MiB, ECC on (public A100-PCIE-40GB nvidia-smi tables found by GitHub text search, "
                 "all agree); PCIe card, modelled without NVLink bridge"),
    CatalogueGpu("A100-PCIe-80G", "NVIDIA A100 80GB PCIe", 81920, (8, 0), "pcie", 0, True,
                 "nvidia-smi 81920MiB, ECC on (public A100 80GB PCIe nvidia-smi tables found by GitHub text search, "
                 "all agree); PCIe card, modelled without NVLink bridge"),
    CatalogueGpu("A800", "NVIDIA A800-SXM4-80GB", 81920, (8, 0), "nvswitch", 8, True,
                 "A800 is the China variant of the A100 80GB (OpenRLHF/OpenRLHF PR 298): CC 8.0; nvidia-smi 81920MiB, "
                 "driver 535.86.10 (dexmal/dexbotic issue 41); NVSwitch with fewer NVLinks"),
    CatalogueGpu("H100", "NVIDIA H100 80GB HBM3", 81559, (9, 0), "nvswitch", 18, True,
                 "nvidia-smi 81559MiB on H100 SXM5 (NVIDIA/nccl issue 1264); HGX H100 with NVSwitch, 18 NVLinks per "
                 "GPU"),
    CatalogueGpu("H100-PCIe", "NVIDIA H100 PCIe", 81559, (9, 0), "pcie", 0, True,
                 "nvidia-smi 81559MiB, ECC on (public H100 PCIe nvidia-smi tables found by GitHub text search, 7 of 9 "
                 "agree); PCIe card"),
    CatalogueGpu("H100-NVL", "NVIDIA H100 NVL", 95830, (9, 0), "pairs", 12, True,
                 "nvidia-smi 95830MiB, ECC on, driver 550.54.14 (thamada/gls gls/H100NVLx2_smi.py); PCIe cards joined "
                 "in pairs by NVLink bridges"),
    CatalogueGpu("H800", "NVIDIA H800", 81559, (9, 0), "nvswitch", 8, True,
                 "nvidia-smi 81559MiB, ECC on, 700 W SXM (public H800 nvidia-smi tables found by GitHub text search, 3 "
                 "of 4); name also in vllm-project/vllm issue 6737; CC 9.0; NVLink capped at 400 GB/s "
                 "(ai-dynamo/aiconfigurator PR 968): 8 NVLinks per GPU through NVSwitch"),
    CatalogueGpu("H20", "NVIDIA H20", 97871, (9, 0), "nvswitch", 18, True,
                 "nvidia-smi 97871MiB (public H20 nvidia-smi tables found by GitHub text search, all agree); HGX board "
                 "with NVSwitch"),
    CatalogueGpu("H20-3e", "NVIDIA H20-3e", 143771, (9, 0), "nvswitch", 18, True,
                 "141 GB H20: nvidia-smi 143771 MiB per GPU (public 8x H20-3e records found by GitHub text search); CC "
                 "9.0; HGX board with NVSwitch like the H20"),
    CatalogueGpu("H200", "NVIDIA H200", 143771, (9, 0), "nvswitch", 18, True,
                 "measured: nvidia-smi 143771 MiB, driver 580.159.04 (shared/data/host_h200x2.json); 8-GPU HGX H200 "
                 "boards use NVSwitch, 18 NVLinks per GPU"),
    CatalogueGpu("GH200-96G", "NVIDIA GH200 480GB", 97871, (9, 0), "pcie", 0, True,
                 "96 GB HBM3 Grace Hopper: nvidia-smi 97871MiB, ECC on, driver 550.127.05 (thamada/gls "
                 "gls/GH200_smi.py); one GPU per superchip, NVLink between superchips (NVL2/NVL32) not modelled"),
    CatalogueGpu("GH200-144G", "NVIDIA GH200 144G HBM3e", 146831, (9, 0), "pcie", 0, True,
                 "nvidia-smi memory.total 146831 MiB, driver 580.173.02 (a public nvidia-smi query found by GitHub "
                 "text search); name as in NVIDIA/mig-parted PR 139; one GPU per superchip, NVLink between superchips "
                 "not modelled"),
    CatalogueGpu("B200", "NVIDIA B200", 183359, (10, 0), "nvswitch", 18, True,
                 "nvidia-smi 183359MiB (public B200 nvidia-smi tables found by GitHub text search, all agree); HGX "
                 "B200 with NVSwitch, 18 NVLink5 per GPU"),
    CatalogueGpu("B300", "NVIDIA B300 SXM6 AC", 275040, (10, 3), "nvswitch", 18, True,
                 "nvidia-smi 'NVIDIA B300 SXM6 AC' 275040MiB, driver 580.105.08 (public B300 nvidia-smi tables found "
                 "by GitHub text search, 7 of 8 agree; the name also in NVIDIA/cosmos-framework PR 114 and pytorch/ao "
                 "PR 3640); SM103; HGX B300 with NVSwitch"),
    CatalogueGpu("GB200", "NVIDIA GB200", 188723, (10, 0), "nvswitch", 18, True,
                 "184.3 GiB per GPU and SM100 in flashinfer collect_env output (flashinfer-ai/flashinfer issue 4337); "
                 "NVL72 NVLink domain"),
    CatalogueGpu("GB10", "NVIDIA GB10", 124611, (12, 1), "pcie", 0, False,
                 "DGX Spark: 128 GB unified LPDDR5x (vllm-project/vllm issue 54125), SM121; nvidia-smi reports "
                 "memory.total [N/A] (unslothai/unsloth PR 10703), so the total is CUDA's 121.69 GiB "
                 "(unslothai/unsloth PR 10283; MiaAI-Lab/GLM-5.3-Flash-EXL3-2x-DGX-Sparks issue 47); one GPU per box"),
    CatalogueGpu("AGX-Thor", "NVIDIA Thor", 131072, (11, 0), "pcie", 0, False,
                 "Jetson AGX Thor: NVML name 'NVIDIA Thor' (micytao/vllm-playground PR 11; public nvidia-smi tables); "
                 "128 GB unified memory is the datasheet capacity: nvidia-smi reports the memory as Not Supported; "
                 "SM110 under CUDA 13 (sgl-project/sglang PR 39811); one GPU per module"),
)

# GPUs sglwrap's checks do not cover: --assume says so in one line instead of passing them silently.
_UNSUPPORTED = r"^(MI\d+[A-Z]*|RX-?\d+.*|RADEON.*|INSTINCT.*|GAUDI.*|ARC-.*|MAX-\d+)$"  # compiled when a name is unknown


def _unsupported(name: str) -> bool:
    """Whether ``name`` is a GPU family SGLang on CUDA cannot use (AMD, Intel, Gaudi)."""
    return re.match(_UNSUPPORTED, name, re.I) is not None


CATALOGUE: dict[str, CatalogueGpu] = {g.key.upper(): g for g in _CAT}
# Short names people write: "A100" is the 80 GB SXM part unless the memory is given.
_ALIASES = {"A100": "A100-80G", "H100-SXM": "H100", "H200-SXM": "H200", "V100-32G": "V100"}
CATALOGUE.update({alias: CATALOGUE[key.upper()] for alias, key in _ALIASES.items()})


def _squash(name: str) -> str:
    """A name without case, hyphens, underscores or spaces: ``rtx4090`` and ``RTX_4090`` both read ``RTX4090``."""
    return re.sub(r"[-_\s]", "", name).upper()


def _squashed_names() -> dict[str, CatalogueGpu]:
    """The catalogue names written without separators (``RTX4090``, ``rtx-pro6000``), keeping only the spellings that
    point at one GPU: a squashed form two different entries share would be a guess, so it is left out."""
    found: dict[str, list[CatalogueGpu]] = {}
    for name, gpu in CATALOGUE.items():
        found.setdefault(_squash(name), []).append(gpu)
    return {k: v[0] for k, v in found.items() if len({g.key for g in v}) == 1}


_SQUASHED = _squashed_names()


def find_gpu(name: str) -> CatalogueGpu | None:
    """The catalogue GPU a name means (``A40``, ``a40``, ``RTX4090``, ``rtx_4090``), or None."""
    return CATALOGUE.get(name.upper()) or _SQUASHED.get(_squash(name))

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
    gpu = find_gpu(name)
    if gpu is not None:
        return gpu
    if _unsupported(name):
        raise UsageError(f"--assume {spec!r}: {name} is not an NVIDIA GPU; AMD/ROCm and other accelerators are not "
                         "supported by sglwrap's checks (they would pass without being checked)")
    raise UsageError(f"--assume {spec!r}: unknown GPU {name!r}.{_did_you_mean(name)} Known GPUs: "
                     f"{', '.join(catalogue_names())}")


def _family(name: str) -> CatalogueGpu | None:
    """The catalogue GPU a name with extra words means (``H100-80GB`` -> H100, ``A100-80GB`` -> A100-80G): the
    name with ``GB`` written ``G``, else its leading hyphen-separated words, longest first."""
    respelled = re.sub(r"(\d+)\s*GB\b", r"\1G", name, flags=re.I)
    if respelled != name and find_gpu(respelled) is not None:
        return find_gpu(respelled)
    words = re.split(r"[-_\s]+", name)
    for n in range(len(words) - 1, 0, -1):
        gpu = find_gpu("-".join(words[:n]))
        if gpu is not None:
            return gpu
    return None


def _did_you_mean(name: str) -> str:
    """A hint for an unknown GPU name: the boards the name is the start of (``RTX4060Ti`` -> ``RTX-4060-Ti-16G``,
    ``GH200`` -> both GH200s), else the closest spelling."""
    import difflib

    family = _family(name)
    if family is not None:
        return f" Did you mean {family.key!r}? (names carry the memory only where a family has several sizes)"
    longer = [g.key for g in _CAT if _squash(g.key).startswith(_squash(name))]
    if 0 < len(longer) <= 3:
        return f" Did you mean {' or '.join(repr(k) for k in longer)}?"
    close = difflib.get_close_matches(name.upper(), list(CATALOGUE), n=1, cutoff=0.6)
    return f" Did you mean {CATALOGUE[close[0]].key!r}?" if close else ""


def resolve_assume(spec: str) -> HostFacts:
    """Turn an ``--assume`` value (``8xH200``, a mixed box ``1xRTX-5090+1xRTX-3090``, or a HostFacts JSON path)
    into HostFacts."""
    items = [p.strip() for p in spec.strip().split("+")]
    matches = [_ASSUME_RE.match(p) for p in items]
    if len(items) > 1 and all(matches):
        parts = []
        for m in matches:
            assert m is not None
            count = _count(spec, m.group(1))
            parts.append((count, _lookup(spec, m.group(2))))
        check_count(f"--assume {spec!r}", sum(c for c, _ in parts), MAX_GPUS_PER_HOST, "GPUs in one host")
        return facts_for_mix(parts)
    if not spec.strip():
        raise UsageError("--assume '': empty; expected <count>x<GPU> (e.g. 8xH200) or the path of a HostFacts file")
    m = _ASSUME_RE.match(spec.strip())
    if m is None:
        path = Path(spec.strip()).expanduser()
        if path.exists() or spec.endswith(".json") or "/" in spec:
            return load_assumed_file(path)
        bare = find_gpu(spec.strip())
        if bare is not None:
            raise UsageError(f"--assume {spec!r}: how many? Give the GPU count too, e.g. 8x{bare.key}")
        if _unsupported(spec.strip()):
            _lookup(spec, spec.strip())
        raise UsageError(
            f"--assume {spec!r}: expected <count>x<GPU> (e.g. 8xRTX-PRO-6000, 2xH200, 1xRTX-5090+1xRTX-3090) or the "
            f"path of a HostFacts JSON file; known GPUs: {', '.join(catalogue_names())}"
        )
    return facts_for(_count(spec, m.group(1)), _lookup(spec, m.group(2)))


def load_assumed_file(path: Path) -> HostFacts:
    """The HostFacts file an ``--assume`` names: a path that is no file is a usage error (64) like an unknown GPU
    name; a file that is not HostFacts is a broken input (78); more GPUs than one host has is refused (64)."""
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "no such file"
        raise UsageError(f"--assume {path}: {what}; expected a HostFacts JSON file (write one with "
                         "`python3 -m sglwrap.host.capture --out host.json` on the machine) or <count>x<GPU>")
    facts = load_facts(path)
    check_count(f"--assume {path}", len(facts.gpus), MAX_GPUS_PER_HOST, "GPUs in one host")
    return facts


def _count(spec: str, digits: str) -> int:
    """The GPU count of one ``<count>x<GPU>`` part: 1 to MAX_GPUS_PER_HOST (checked on the digits, so a
    thousand-digit count costs nothing)."""
    count = int(digits) if len(digits.lstrip("0")) <= len(str(MAX_GPUS_PER_HOST)) else MAX_GPUS_PER_HOST + 1
    if count < 1:
        raise UsageError(f"--assume {spec!r}: the GPU count must be at least 1")
    check_count(f"--assume {spec!r}", count, MAX_GPUS_PER_HOST, "GPUs in one host")
    return count
