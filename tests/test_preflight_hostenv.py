"""Host traps: live on this machine (a real bound socket, the real /dev/shm, rlimits, /proc/meminfo, disk), skipped
under --assume, and the rules on the numbers of real reports."""

from __future__ import annotations

import os
import resource
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from sglwrap.host.catalogue import resolve_assume
from sglwrap.host.facts import HostFacts
from sglwrap.preflight import Status, run_preflight
from sglwrap.preflight import checks_hostenv as he
from sglwrap.preflight.model import Verdict
from sglwrap.record import replace
from sglwrap.sglang.flags import bundled_table

GIB, MIB = 2**30, 2**20
HOST_CASES = sorted((Path(__file__).parent / "corpus" / "preflight" / "m_host").glob("*.yaml"))


def live() -> HostFacts:
    """This machine as NVML would describe it (the GPUs do not matter to these checks; the source does)."""
    return replace(resolve_assume("2xH200"), source="nvml")


def checks(facts: HostFacts, *argv: str, environ: dict[str, str] | None = None) -> dict[str, Verdict]:
    r = run_preflight(facts, None, list(argv), flags=bundled_table("0.5.23"), environ=environ,
                      checks=he.HOSTENV_CHECKS)
    return {v.id: v for v in r.checks}


@pytest.fixture()
def bound_port() -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        yield s.getsockname()[1]


def test_everything_is_skipped_under_assume() -> None:
    got = checks(resolve_assume("8xH200"), "--tp-size", "8")
    assert set(got) == {"host-shm", "host-noexec", "host-port", "host-memlock", "host-ram", "host-disk"}
    assert all(v.status is Status.SKIP and "skipped (--assume)" in v.reason for v in got.values())


def test_a_port_in_use_blocks_and_a_free_one_passes(bound_port: int) -> None:
    v = checks(live(), "--port", str(bound_port))["host-port"]
    assert v.status is Status.BLOCK and "Address already in use" in v.reason and "--port" in v.fix
    with socket.socket() as s:  # a port the OS just handed out and took back
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    assert checks(live(), "--port", str(free))["host-port"].status is Status.PASS


def test_the_port_of_another_node_rank_is_not_checked(bound_port: int) -> None:
    v = checks(live(), "--port", str(bound_port), "--nnodes", "2", "--node-rank", "1", "--dist-init-addr",
               "10.0.0.1:5000")["host-port"]
    assert v.status is Status.PASS


def test_live_readings_of_this_host_are_reported() -> None:
    got = checks(live(), "--tp-size", "2")
    st = os.statvfs("/dev/shm")
    assert f"{st.f_blocks * st.f_frsize / MIB:.0f} MiB" in got["host-shm"].reason
    soft = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    assert got["host-memlock"].status is Status.PASS  # no RDMA in a single-node TP launch
    assert ("unlimited" if soft == resource.RLIM_INFINITY else f"{soft // 1024} KiB") in got["host-memlock"].reason
    assert got["host-ram"].status is Status.PASS and "no pinned host buffers" in got["host-ram"].reason
    assert got["host-disk"].status in (Status.PASS, Status.WARN, Status.BLOCK) and "GiB free" in got["host-disk"].reason


def test_pinned_host_buffers_against_this_hosts_ram() -> None:
    avail = he.mem_available()
    assert avail is not None and avail > 0
    too_much = int(avail / GIB) + 64  # GB per rank, 2 ranks: more than this host has
    v = checks(live(), "--tp-size", "2", "--enable-hierarchical-cache", "--hicache-size", str(too_much))["host-ram"]
    assert v.status is Status.BLOCK and f"--hicache-size {too_much} GB x 2 rank(s)" in v.reason
    small = checks(live(), "--tp-size", "2", "--enable-hierarchical-cache", "--hicache-size", "1")["host-ram"]
    assert small.status in (Status.PASS, Status.WARN)


def test_jit_dirs_follow_the_environment(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "TMPDIR": str(tmp_path / "t"), "TRITON_CACHE_DIR": str(tmp_path / "tc")}
    d = he.jit_dirs(env)
    assert d["TMPDIR"] == str(tmp_path / "t") and d["TRITON_CACHE_DIR"] == str(tmp_path / "tc")
    assert d["FLASHINFER_WORKSPACE_BASE"] == str(tmp_path / ".cache" / "flashinfer")  # flashinfer/jit/env.py
    assert he.existing_parent(str(tmp_path / "no" / "such" / "dir")) == str(tmp_path)


def test_noexec_rule() -> None:
    v = he.noexec_verdict([("TMPDIR", "/tmp"), ("TRITON_CACHE_DIR", "/root/.triton/cache")])
    assert v.status is Status.BLOCK and "failed to map segment" in v.reason
    assert "export TMPDIR=" in v.fix and "export TRITON_CACHE_DIR=" in v.fix
    assert he.noexec_verdict([]).status is Status.PASS


def test_memlock_rule() -> None:
    assert he.memlock_verdict(8 * MIB, "--nnodes 2 (NCCL over InfiniBand/RoCE)").status is Status.BLOCK
    assert he.memlock_verdict(8 * MIB, None).status is Status.PASS
    assert he.memlock_verdict(resource.RLIM_INFINITY, "x").status is Status.PASS


def test_disk_rule() -> None:
    assert he.disk_verdict({"TMPDIR": ("/tmp", 100 * MIB)}).status is Status.BLOCK
    assert he.disk_verdict({"TMPDIR": ("/tmp", 2 * GIB), "X": ("/x", 50 * GIB)}).status is Status.WARN
    assert he.disk_verdict({"TMPDIR": ("/tmp", 50 * GIB)}).status is Status.PASS


@pytest.mark.parametrize("path", HOST_CASES, ids=[p.stem for p in HOST_CASES])
def test_real_host_reports(path: Path) -> None:
    """Each m_host case: its measured host numbers through the rule; blocked with the check it names."""
    doc = yaml.safe_load(path.read_text())
    assert doc["source"].startswith("https://") and doc["error"] and doc["fix"]
    h = doc["host"]
    v = he.shm_verdict(h["shm_total_bytes"], h["shm_free_bytes"], h["ranks"])
    assert v.id == doc["expect"]["check"]
    assert v.status.value == {"blocked": "block"}[doc["expect"]["verdict"]]
    assert "--shm-size" in v.fix


def test_shm_rule_leaves_a_single_gpu_and_a_large_shm_alone() -> None:
    assert he.shm_verdict(64 * MIB, 64 * MIB, 1).status is Status.WARN  # one rank: no NCCL SHM transport
    assert he.shm_verdict(32 * GIB, 32 * GIB, 8).status is Status.PASS


def test_other_pinned_ports_are_checked_too(bound_port: int) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    v = checks(live(), "--port", str(free), "--nccl-port", str(bound_port))["host-port"]
    assert v.status is Status.BLOCK and f"--nccl-port {bound_port}" in v.reason
