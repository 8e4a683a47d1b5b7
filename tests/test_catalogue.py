"""The --assume GPU catalogue: every entry's memory is a driver-reported total that fits the card's marketed size, its
compute capability is its family's, and the names people type resolve only where they mean one GPU."""

from __future__ import annotations

import re

import pytest

from sglwrap.errors import UsageError
from sglwrap.host.catalogue import _CAT, CATALOGUE, CatalogueGpu, catalogue_names, find_gpu, resolve_assume

MIB = 2**20

# Marketed memory per GPU in GB, from the vendors' spec sheets (not from the catalogue): the driver's total is a little
# under it (ECC, reserved regions), never more than 1% over.
MARKETED_GB = {
    "T4": 16, "V100": 32, "V100-16G": 16, "A10": 24, "A10G": 24, "A30": 24, "A40": 48, "L4": 24, "L20": 48, "L40": 48,
    "L40S": 48, "RTX-A6000": 48, "RTX-6000-Ada": 48, "RTX-5880-Ada": 48, "RTX-2080": 8, "RTX-2080-Ti": 11,
    "RTX-A4000": 16, "RTX-A5000": 24, "RTX-A4500": 20, "RTX-5000-Ada": 32, "RTX-4000-Ada": 20, "RTX-3060": 12,
    "RTX-3090": 24, "RTX-3080": 10, "RTX-3080-12G": 12, "RTX-3090-Ti": 24, "RTX-4060-Ti-16G": 16,
    "RTX-4070-Ti-SUPER": 16, "RTX-4080": 16, "RTX-4080-SUPER": 16, "RTX-4090": 24, "RTX-5060": 8, "RTX-5060-Ti": 16,
    "RTX-5070": 12, "RTX-5080": 16, "RTX-5090": 32, "RTX-PRO-6000": 96, "A100-40G": 40, "A100-80G": 80,
    "A100-PCIe-40G": 40, "A100-PCIe-80G": 80, "A800": 80, "H100": 80, "H100-PCIe": 80, "H100-NVL": 94, "H800": 80,
    "H20": 96, "H20-3e": 141, "H200": 141, "GH200-96G": 96, "GH200-144G": 144, "B200": 180, "B300": 288, "GB200": 186,
    "GB10": 128, "AGX-Thor": 128,
}

# Compute capability by family, from NVIDIA's CUDA GPUs table; the first pattern that matches the NVML name wins.
FAMILY_CC: list[tuple[str, tuple[int, int]]] = [
    (r"V100", (7, 0)), (r"Tesla T4|RTX 20\d0", (7, 5)), (r"A100|A800|\bA30\b", (8, 0)),
    (r"\bA10G?\b|\bA40\b|RTX A\d{4}|RTX 30\d0", (8, 6)), (r"\bL(4|20|40S?)\b|Ada Generation|RTX 40\d0", (8, 9)),
    (r"GH200|H100|H800|H20|H200", (9, 0)), (r"GB200|\bB200\b", (10, 0)), (r"B300", (10, 3)), (r"Thor", (11, 0)),
    (r"GB10\b", (12, 1)), (r"RTX 50\d0|RTX PRO", (12, 0)),
]


def _family_cc(nvml_name: str) -> tuple[int, int]:
    for pattern, cc in FAMILY_CC:
        if re.search(pattern, nvml_name):
            return cc
    raise AssertionError(f"no family for {nvml_name!r}")


@pytest.mark.parametrize("gpu", _CAT, ids=lambda g: g.key)
def test_memory_is_a_driver_total_that_fits_the_marketed_size(gpu: CatalogueGpu) -> None:
    marketed_mib = MARKETED_GB[gpu.key] * 1024
    assert 0.90 * marketed_mib <= gpu.memory_mib <= 1.01 * marketed_mib, (gpu.key, gpu.memory_mib)


@pytest.mark.parametrize("gpu", _CAT, ids=lambda g: g.key)
def test_compute_capability_is_the_familys(gpu: CatalogueGpu) -> None:
    assert gpu.compute_capability == _family_cc(gpu.nvml_name)


@pytest.mark.parametrize("gpu", _CAT, ids=lambda g: g.key)
def test_every_entry_names_where_its_numbers_come_from(gpu: CatalogueGpu) -> None:
    assert gpu.source.strip()
    # A reference a reader can follow: an issue/PR, a repository file, or the text search the figure came from.
    assert re.search(r"(issue|PR) \d+|\w/\w+\S*\.(py|txt)|text search|measured", gpu.source), gpu.source
    # Only a board whose driver reports no memory keeps its datasheet size.
    if "datasheet" in gpu.source:
        assert gpu.key == "AGX-Thor"


def test_nvml_names_are_spelled_as_nvidia_smi_prints_them() -> None:
    for gpu in _CAT:
        assert re.fullmatch(r"(NVIDIA|Tesla) [A-Za-z0-9 .-]+", gpu.nvml_name), gpu.nvml_name
        assert "..." not in gpu.nvml_name  # nvidia-smi's table truncates long names; NVML does not
    assert CATALOGUE["RTX-5000-ADA"].nvml_name == "NVIDIA RTX 5000 Ada Generation"
    assert CATALOGUE["B300"].nvml_name == "NVIDIA B300 SXM6 AC"


def test_geforce_cards_have_no_pcie_peer_access_and_datacenter_cards_do() -> None:
    for gpu in _CAT:
        if "GeForce" in gpu.nvml_name:
            assert not gpu.pcie_p2p and gpu.interconnect == "pcie", gpu.key
    assert all(CATALOGUE[k].pcie_p2p for k in ("A40", "A30", "RTX-A5000", "L20", "A100-PCIE-80G", "GH200-144G"))


def test_every_key_has_a_marketed_size_and_keys_are_unique() -> None:
    names = catalogue_names()
    assert len(names) == len(set(n.upper() for n in names))
    assert set(names) == set(MARKETED_GB)


@pytest.mark.parametrize("spec,key,count", [
    ("2xA40", "A40", 2), ("2xa40", "A40", 2), ("8xRTX4090", "RTX-4090", 8), ("1xrtx_4090", "RTX-4090", 1),
    ("4xRTX-A5000", "RTX-A5000", 4), ("2xrtx-4060-ti-16g", "RTX-4060-Ti-16G", 2), ("8xh20-3E", "H20-3e", 8),
    ("8xH800", "H800", 8), ("1xGH200-144G", "GH200-144G", 1), ("4xV100-32G", "V100", 4),
    ("2xRTX3080-12G", "RTX-3080-12G", 2),
])
def test_spellings_people_type_resolve(spec: str, key: str, count: int) -> None:
    facts = resolve_assume(spec)
    gpu = CATALOGUE[key.upper()]
    assert facts.gpu_count == count
    assert {g.name for g in facts.gpus} == {gpu.nvml_name}
    assert {g.memory_total_bytes for g in facts.gpus} == {gpu.memory_mib * MIB}


def test_two_a40s_plan_with_the_reported_total() -> None:
    facts = resolve_assume("2xA40")
    assert [g.memory_total_bytes for g in facts.gpus] == [46068 * MIB] * 2  # nvidia-smi, ECC on
    assert [g.compute_capability for g in facts.gpus] == [(8, 6)] * 2
    assert not facts.all_pairs_nvlink and facts.links[0].p2p_read == "ok"


def test_same_nvml_name_different_boards_stay_apart() -> None:
    ten, twelve = resolve_assume("1xRTX-3080").gpus[0], resolve_assume("1xRTX-3080-12G").gpus[0]
    assert ten.name == twelve.name == "NVIDIA GeForce RTX 3080"
    assert ten.memory_total_bytes < twelve.memory_total_bytes


def test_hopper_boards_are_wired_as_their_servers_are() -> None:
    h800 = resolve_assume("8xH800")
    assert h800.nvswitch and h800.all_pairs_nvlink and h800.links[0].nvlink_count == 8
    gh = resolve_assume("2xGH200-96G")
    assert not gh.nvswitch and gh.links[0].nvlink_count == 0


def test_every_key_resolves_written_without_separators() -> None:
    for gpu in _CAT:
        assert find_gpu(gpu.key.replace("-", "").lower()) is gpu, gpu.key


@pytest.mark.parametrize("name", ["4090", "RTX4060Ti", "RTX-4060-Ti", "A100-PCIe", "GH200", "RTX40 90X", "H20-3"])
def test_ambiguous_or_partial_names_are_not_guessed(name: str) -> None:
    assert find_gpu(name) is None


@pytest.mark.parametrize("spec,hint", [
    ("2xRTX-4060-Ti", "Did you mean 'RTX-4060-Ti-16G'?"), ("1xRTX4060Ti", "Did you mean 'RTX-4060-Ti-16G'?"),
    ("2xGH200", "Did you mean 'GH200-96G' or 'GH200-144G'?"), ("8xRTX-4900", "Did you mean 'RTX-4090'?"),
])
def test_an_incomplete_name_gets_a_suggestion_not_a_guess(spec: str, hint: str) -> None:
    with pytest.raises(UsageError) as e:
        resolve_assume(spec)
    assert "unknown GPU" in str(e.value) and hint in str(e.value)


def test_a_bare_name_asks_for_the_count() -> None:
    with pytest.raises(UsageError) as e:
        resolve_assume("rtx4090")
    assert "how many?" in str(e.value) and "8xRTX-4090" in str(e.value)
