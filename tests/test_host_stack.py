"""Stack facts: versions without imports, the cached import probe, --assume-stack and the version tables."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sglwrap.errors import UsageError
from sglwrap.host import stack
from sglwrap.host.catalogue import resolve_assume
from sglwrap.host.probe import apply_assume_stack, parse_assume_stack, probe_for, FileProbe, CatalogueProbe, NvmlProbe
from sglwrap.host.stackview import driver_cuda, parse_version, stack_view

FIX = Path(__file__).parent / "fixtures" / "hostfacts"


def test_parse_assume_stack_reads_packages_driver_and_arch_list() -> None:
    got = parse_assume_stack("sglang=0.5.23, torch=2.9.1+cu128,flashinfer_python=0.6.16,driver=570.124.06,"
                             "torch-arch=sm_80:sm_90")
    assert got == {"sglang": "0.5.23", "torch": "2.9.1+cu128", "flashinfer-python": "0.6.16",
                   "driver": "570.124.06", "torch-arch": "sm_80:sm_90"}


@pytest.mark.parametrize("bad", ["torch", "torch=", "=1.0", "torch=abc", "torch-arch=sm_80:gfx90a"])
def test_parse_assume_stack_rejects_bad_items(bad: str) -> None:
    with pytest.raises(UsageError, match="--assume-stack"):
        parse_assume_stack(bad)


def test_assume_stack_drops_only_the_stale_probe_parts() -> None:
    base = resolve_assume("2xH200")
    probed = base.__class__(**{**base.__dict__, "packages": {"torch": "2.14.1", "flashinfer-python": "0.7.2"},
                               "probes": {"stack": {"torch": {"version": "2.14.1+cu130", "cuda": "13.0",
                                                              "arch_list": ["sm_90"]},
                                                    "flashinfer": {"found": True, "gen_trtllm_comm_module": [9, 10, 12]}}}})
    out = apply_assume_stack(probed, {"flashinfer-python": "0.6.16", "driver": "570.1"})
    assert out.packages["flashinfer-python"] == "0.6.16"
    assert "flashinfer" not in out.probes["stack"] and "torch" in out.probes["stack"]
    view = stack_view(out)
    assert view.fi_trtllm_comm_majors == (9, 10)  # from the version table, not the stale probe
    assert view.torch_cuda == "13.0"  # still the probed torch
    assert out.driver_version == "570.1" and out.cuda_driver_version is None
    assert view.driver_cuda == "12.8"


def test_assuming_another_sglang_release_leaves_out_what_the_installed_one_brought() -> None:
    """The test venv's pairing (SGLang 0.5.23 with sglang-kernel 0.4.10 and torch 2.14.1): planning for 0.5.9 must not
    judge 0.5.9's torch against 0.5.23's kernel. The same release, or a package named too, keeps the value."""
    base = resolve_assume("8xRTX-PRO-6000")
    local = {"sglang": "0.5.23", "sglang-kernel": "0.4.10", "torch": "2.14.1", "flashinfer-python": "0.7.2",
             "nvidia-nccl-cu13": "2.30.7", "nvidia-ml-py": "13.580.82"}
    installed = base.__class__(**{**base.__dict__, "packages": local,
                                  "binaries": {"nccl": "2.30.7", "arches": {"sgl-kernel": ["sm_90a"], "nccl": ["sm_90"]}}})
    other = apply_assume_stack(installed, {"sglang": "0.5.9", "torch": "2.9.1+cu128"})
    # what 0.5.23 brought is gone; what 0.5.9's plain install pins comes from its own metadata (sglwrap.sglang.pins)
    assert other.packages["sglang"] == "0.5.9" and other.packages["torch"] == "2.9.1+cu128"
    assert other.packages["nvidia-ml-py"] == "13.580.82" and "sglang-kernel" not in other.packages
    assert other.packages["flashinfer-python"] == "0.6.3"  # 0.5.9 pins flashinfer_python==0.6.3
    assert "sgl-kernel" not in other.packages  # a kernel build is not known from a pin: there, version unknown
    assert other.probes["release_pins"]["brought"]["sgl-kernel"] == "==0.3.21"
    assert "nccl" not in other.binaries and other.binaries["arches"] == {}
    assert other.probes["assume_stack_left_out"] == {"flashinfer-python": "0.7.2", "nvidia-nccl-cu13": "2.30.7",
                                                     "sglang-kernel": "0.4.10"}
    assert any("left out of the plan" in n for n in other.notes)
    same = apply_assume_stack(installed, {"sglang": "0.5.23", "torch": "2.9.1+cu128"})
    assert same.packages["sglang-kernel"] == "0.4.10" and "assume_stack_left_out" not in same.probes
    named = apply_assume_stack(installed, {"sglang": "0.5.9", "sglang-kernel": "0.3.21"})
    assert named.packages["sglang-kernel"] == "0.3.21" and "torch" not in named.packages


@pytest.mark.parametrize(
    ("torch", "cuda", "has_sm120"),
    [
        pytest.param("2.9.1+cu128", "12.8", True, id="cu128-wheel"),
        pytest.param("2.9.1+cu126", "12.6", False, id="cu126-wheel"),
        pytest.param("2.7.1", "12.6", False, id="2.7-default-cu126"),
        pytest.param("2.9.1", "12.8", True, id="2.9-default-cu128"),
        pytest.param("2.14.1", "13.0", True, id="2.14-default-cu130"),
    ],
)
def test_torch_tables(torch: str, cuda: str, has_sm120: bool) -> None:
    view = stack_view(apply_assume_stack(resolve_assume("1xRTX-5090"), {"torch": torch}))
    assert view.torch_cuda == cuda
    assert ("sm_120" in (view.torch_arch_list or ())) is has_sm120


@pytest.mark.parametrize(("fi", "majors"), [("0.6.3", (9, 10)), ("0.6.16", (9, 10)), ("0.6.17", (9, 10, 12)),
                                            ("0.7.2", (9, 10, 12))])
def test_flashinfer_trtllm_comm_gate_by_version(fi: str, majors: tuple[int, ...]) -> None:
    view = stack_view(apply_assume_stack(resolve_assume("1xH100"), {"flashinfer-python": fi}))
    assert view.fi_trtllm_comm_majors == majors


@pytest.mark.parametrize(("drv", "cuda"), [("580.95.05", "13.0"), ("570.124.06", "12.8"), ("535.1", "12.2"),
                                           ("999.1", "13.0"), (None, None), ("400.1", None)])
def test_driver_branch_table(drv: str | None, cuda: str | None) -> None:
    assert driver_cuda(drv) == cuda


def test_parse_version() -> None:
    assert parse_version("2.9.1+cu128") == (2, 9, 1)
    assert parse_version("0.5.23.post1") == (0, 5, 23)
    assert parse_version("abc") is None


def test_probe_for_picks_the_implementation(tmp_path: Path) -> None:
    assert isinstance(probe_for(None), NvmlProbe)
    assert isinstance(probe_for("8xH200"), CatalogueProbe)
    f = tmp_path / "h.json"
    f.write_text(resolve_assume("2xH200").to_json())
    assert isinstance(probe_for(str(f)), FileProbe)
    assert probe_for(str(f)).facts() == resolve_assume("2xH200")


def test_package_versions_reads_metadata_without_importing() -> None:
    code = ("import sys; from sglwrap.host.stack import package_versions; v = package_versions(); "
            "print(sorted(v)); print([m for m in ('torch', 'sglang', 'flashinfer') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).parents[1]).stdout.splitlines()
    assert out[1] == "[]"
    assert "nvidia-ml-py" in out[0] or "torch" in out[0] or out[0] == "[]"


def test_package_versions_of_a_venv_interpreter_reads_its_site_packages(tmp_path: Path) -> None:
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    (site / "flashinfer_python-0.6.16.dist-info").mkdir(parents=True)
    (site / "flashinfer_python-0.6.16.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: flashinfer-python\nVersion: 0.6.16\n")
    (tmp_path / "venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (tmp_path / "venv" / "bin").mkdir()
    py = tmp_path / "venv" / "bin" / "python"
    py.write_text("#!/bin/false\n")
    assert stack.package_versions(str(py)) == {"flashinfer-python": "0.6.16"}


def test_stack_probe_script_never_imports_flashinfer_or_sglang() -> None:
    code = ("import runpy, sys; sys.argv = ['p', '--no-torch']; "
            f"runpy.run_path({str(stack.PROBE_SCRIPT)!r}, run_name='__main__'); "
            "print([m for m in ('flashinfer', 'sglang', 'torch') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    lines = out.strip().splitlines()
    assert lines[-1] == "[]"
    json.loads(lines[0])


def test_probe_stack_is_cached_by_versions_driver_and_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    calls: list[list[str]] = []

    def fake_run(argv: list[str], *, timeout: float, env: object = None) -> tuple[int, str]:
        calls.append(argv)
        return 0, json.dumps({"torch": {"version": "2.14.1+cu130", "cuda": "13.0", "arch_list": ["sm_90"]}})

    monkeypatch.setattr(stack, "_run", fake_run)
    pk = {"torch": "2.14.1"}
    first = stack.probe_stack(sys.executable, pk, "580.1", ["GPU-a"])
    again = stack.probe_stack(sys.executable, pk, "580.1", ["GPU-a"])
    assert (first["cache"], again["cache"]) == ("miss", "hit")
    assert again["torch"]["cuda"] == "13.0" and "probe_seconds" in again
    stack.probe_stack(sys.executable, pk, "570.1", ["GPU-a"])  # driver changed
    stack.probe_stack(sys.executable, pk, "580.1", ["GPU-b"])  # other GPU
    stack.probe_stack(sys.executable, {"torch": "2.9.1"}, "580.1", ["GPU-a"])  # other torch
    assert len(calls) == 4
    assert list((tmp_path / "sglwrap" / "stack").glob("*.json"))


def test_probe_stack_failure_is_reported_not_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(stack, "_run", lambda argv, timeout, env=None: (1, "ImportError: libcudart.so.13"))
    got = stack.probe_stack(sys.executable, {"torch": "2.14.1"}, None, [])
    assert "libcudart" in got["error"] and got["cache"] == "miss"
    assert not (tmp_path / "sglwrap" / "stack").exists() or not list((tmp_path / "sglwrap" / "stack").glob("*.json"))


@pytest.mark.parametrize("spec", ["8xRTX-PRO-6000", "8xH100", "8xH200", "2xH200", "8xB200", "4xL40S", "1xRTX-4090",
                                  "1xRTX-5090", "8xA100-80G", "4xL4", "2xH20", "1xRTX-5080", "2xRTX-3090"])
def test_catalogue_covers_the_issue_list(spec: str) -> None:
    facts = resolve_assume(spec)
    assert facts.gpu_count == int(spec.split("x")[0])
    assert all(g.memory_total_bytes > 10 * 2**30 for g in facts.gpus)
    assert facts.provenance


def test_catalogue_pcie_and_nvswitch_shapes() -> None:
    pcie = resolve_assume("8xRTX-PRO-6000")
    assert not pcie.all_pairs_nvlink and not pcie.nvswitch
    assert {g.compute_capability for g in pcie.gpus} == {(12, 0)}
    hgx = resolve_assume("8xH200")
    assert hgx.all_pairs_nvlink and hgx.nvswitch
    pair = resolve_assume("2xH200")
    assert pair.all_pairs_nvlink and pair.nvswitch and pair.links[0].nvlink_count == 18
