"""Facts read from installed files: fatbin architectures in ELF shared objects, libnccl's version, /sys IOMMU and
ACS, the --assume-stack keys that carry them, and the catalogue's new GPUs and mixed boxes."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from sglwrap.errors import UsageError
from sglwrap.host import binaries
from sglwrap.host.catalogue import resolve_assume
from sglwrap.host.probe import apply_assume_stack, parse_assume_stack

REPO = Path(__file__).resolve().parent.parent


def _entry(kind: int, arch: int, flags: int, payload: bytes) -> bytes:
    head = bytearray(64)
    struct.pack_into("<HHIQ", head, 0, kind, 0x0101, 64, len(payload))
    struct.pack_into("<I", head, 28, arch)
    struct.pack_into("<Q", head, 40, flags)
    return bytes(head) + payload


def make_elf(path: Path, entries: list[tuple[int, int, int]]) -> Path:
    """A minimal ELF64 with one .nv_fatbin section holding one fatbin of ``entries`` (kind, arch, flags)."""
    body = b"".join(_entry(k, a, f, b"\0" * 24) for k, a, f in entries)
    fatbin = struct.pack("<IHHQ", binaries.FATBIN_MAGIC, 1, 16, len(body)) + body
    shstr = b"\0.shstrtab\0.nv_fatbin\0"
    data_off = 64
    shstr_off = data_off + len(fatbin)
    shoff = (shstr_off + len(shstr) + 7) & ~7
    sections = [
        (0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
        (1, 3, 0, 0, shstr_off, len(shstr), 0, 0, 1, 0),
        (11, 1, 0, 0, data_off, len(fatbin), 0, 0, 8, 0),
    ]
    head = bytearray(64)
    head[:4] = b"\x7fELF"
    head[4], head[5], head[6] = 2, 1, 1
    struct.pack_into("<Q", head, 0x28, shoff)
    struct.pack_into("<HHH", head, 0x3A, 64, len(sections), 1)
    blob = bytearray(head) + fatbin + shstr
    blob += b"\0" * (shoff - len(blob))
    for sec in sections:
        blob += struct.pack("<IIQQQQIIQQ", *sec)
    path.write_bytes(bytes(blob))
    return path


def test_fatbin_arches_reads_sass_ptx_and_variants(tmp_path: Path) -> None:
    so = make_elf(tmp_path / "libk.so", [(2, 90, 0x8011), (2, 90, 0x108011), (2, 100, 0x1208011), (2, 120, 0x1108011),
                                         (1, 120, 0x8011)])
    assert binaries.fatbin_arches(so) == {"sm_90", "sm_90a", "sm_100f", "sm_120a", "compute_120"}


def test_fatbin_arches_of_a_non_elf_is_empty(tmp_path: Path) -> None:
    p = tmp_path / "x.so"
    p.write_bytes(b"not an elf at all" * 10)
    assert binaries.fatbin_arches(p) == set()


def test_package_arches_walks_a_wheel_and_caches_by_stat(tmp_path: Path) -> None:
    site = tmp_path / "site"
    (site / "sgl_kernel" / "sm100").mkdir(parents=True)
    make_elf(site / "sgl_kernel" / "sm100" / "common_ops.abi3.so", [(2, 100, 0x1108011), (2, 120, 0x1108011)])
    make_elf(site / "sgl_kernel" / "flash_ops.abi3.so", [(2, 80, 0x8011)])
    cache: dict[str, object] = {}
    got = binaries.package_arches([str(site)], cache)
    assert got == {"sgl-kernel": ["sm_80", "sm_100a", "sm_120a"]}
    assert sum(1 for k in cache if ".so|" in k) == 2  # one entry per shared object (plus the per-package one)
    (site / "sgl_kernel" / "flash_ops.abi3.so").unlink()
    make_elf(site / "sgl_kernel" / "flash_ops.abi3.so", [(2, 86, 0x8011), (2, 89, 0x8011)])
    os.utime(site / "sgl_kernel" / "flash_ops.abi3.so", (1, 1))  # a new mtime: read again, not from the cache
    assert binaries.package_arches([str(site)], cache)["sgl-kernel"] == ["sm_86", "sm_89", "sm_100a", "sm_120a"]


def test_nccl_version_from_the_library_bytes(tmp_path: Path) -> None:
    lib = tmp_path / "libnccl.so.2"
    lib.write_bytes(b"\0junk NCCL version 2.27.3+cuda12.9 more\0")
    assert binaries.nccl_version_of(lib) == "2.27.3"


@pytest.mark.parametrize("types,mode", [(["DMA-FQ"], "translated"), (["identity", "identity"], "passthrough"),
                                        ([], "off")])
def test_iommu_mode_from_sys(tmp_path: Path, types: list[str], mode: str) -> None:
    groups = tmp_path / "kernel" / "iommu_groups"
    groups.mkdir(parents=True)
    for i, t in enumerate(types):
        (groups / str(i)).mkdir()
        (groups / str(i) / "type").write_text(t + "\n")
    assert binaries.iommu_facts(str(tmp_path))["mode"] == mode


def test_iommu_unreadable_is_unknown(tmp_path: Path) -> None:
    assert binaries.iommu_facts(str(tmp_path / "nope"))["mode"] == "unknown"


@pytest.mark.skipif(os.geteuid() != 0, reason="reads config space as root only")
def test_acs_redirect_bits_on_a_bridge(tmp_path: Path) -> None:
    dev = tmp_path / "bus" / "pci" / "devices" / "0000:00:01.1"
    dev.mkdir(parents=True)
    (dev / "class").write_text("0x060400\n")
    cfg = bytearray(4096)
    struct.pack_into("<I", cfg, 0x100, binaries.ACS_CAP_ID | (1 << 16))
    struct.pack_into("<H", cfg, 0x106, binaries.ACS_CTRL_RR | binaries.ACS_CTRL_CR)
    (dev / "config").write_bytes(bytes(cfg))
    got = binaries.acs_redirect_bridges(str(tmp_path))
    assert got == {"state": "redirect", "bridges": ["0000:00:01.1"]}


@pytest.mark.parametrize("text,hint", [("bananas=1.0", "unknown name"), ("flashinfer=0.6.16", "flashinfer-python"),
                                       ("torhc=2.9.1", "torch"), ("iommu=maybe", "translated")])
def test_assume_stack_refuses_unknown_names_and_values(text: str, hint: str) -> None:
    with pytest.raises(UsageError) as e:
        parse_assume_stack(text)
    assert hint in str(e.value)


def test_assume_stack_binary_keys_reach_the_facts() -> None:
    keys = parse_assume_stack("nccl=2.26.2,nvcc=12.8,sgl-kernel-arch=sm_90a:sm_100a,iommu=translated,acs=redirect,"
                              "nvidia-caps=no,cuda-driver-api=13.0")
    facts = apply_assume_stack(resolve_assume("2xRTX-PRO-6000"), keys)
    b = facts.binaries
    assert b["nccl"] == "2.26.2" and b["nvcc"] == "12.8"
    assert b["arches"]["sgl-kernel"] == ["sm_90a", "sm_100a"]
    assert b["iommu"]["mode"] == "translated" and b["acs"]["state"] == "redirect"
    assert b["nvidia_caps"] is False and b["cuda_driver_api"] == 13000


def test_assumed_version_drops_the_binaries_read_for_another_version() -> None:
    facts = resolve_assume("1xH100")
    facts = facts.__class__(**{**facts.__dict__, "binaries": {"arches": {"sgl-kernel": ["sm_90"]},
                                                              "versions": {"sgl-kernel": "0.3.21"}}})
    assert "sgl-kernel" not in apply_assume_stack(facts, {"sgl-kernel": "0.2.0"}).binaries["arches"]
    assert apply_assume_stack(facts, {"sgl-kernel": "0.3.21"}).binaries["arches"]["sgl-kernel"] == ["sm_90"]


def test_mixed_box_and_new_catalogue_gpus() -> None:
    f = resolve_assume("1xRTX-5090+1xRTX-3090")
    assert [g.compute_capability for g in f.gpus] == [(12, 0), (8, 6)]
    assert f.links[0].p2p_read == "not_supported" and not f.nvswitch
    for name, cc in (("T4", (7, 5)), ("A10G", (8, 6)), ("L20", (8, 9)), ("RTX-6000-Ada", (8, 9)), ("GB10", (12, 1)),
                     ("B300", (10, 3)), ("GB200", (10, 0)), ("H100-PCIe", (9, 0)), ("RTX-5070", (12, 0))):
        assert resolve_assume(f"1x{name}").gpus[0].compute_capability == cc
    nvl = resolve_assume("4xH100-NVL")
    assert nvl.link(0, 1).p2p_nvlink == "ok" and nvl.link(1, 2).p2p_nvlink != "ok"  # NVLink bridges join pairs


def test_amd_gpu_is_one_clear_line() -> None:
    with pytest.raises(UsageError) as e:
        resolve_assume("8xMI300X")
    assert "not supported by sglwrap's checks" in str(e.value)


def test_cli_json_carries_binary_facts() -> None:
    env = {**os.environ, "SGLWRAP_SELFCHECK": "0"}
    proc = subprocess.run([sys.executable, "-m", "sglwrap", "preflight", "--json", "--assume", "1xH100",
                           "--assume-stack", "nccl=2.27.3,sgl-kernel-arch=sm_90a"], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=300, check=False)
    import json

    doc = json.loads(proc.stdout)
    assert doc["facts"]["binaries"]["nccl"] == "2.27.3"
    assert doc["facts"]["binaries"]["arches"]["sgl-kernel"] == ["sm_90a"]
    assert "checks skipped" in doc["headline"] or "checks ran" in doc["headline"]
