"""The NVML layer: a fake pynvml built from a real machine's raw answers, checked against nvidia-smi's output."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sglwrap.host import nvml
from sglwrap.host.facts import HostFacts, facts_from_dict
from sglwrap.host.nvml import bus_key, probe_nvml, visible_order

FIX = Path(__file__).parent / "fixtures" / "hostfacts"
RAW = json.loads((FIX / "raw-host_probe-h200x2.json").read_text())
MIB = 1024 * 1024


@pytest.fixture(autouse=True)
def no_real_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test reads this machine's GPUs unless it injects a fake pynvml."""

    def refuse() -> Any:
        raise AssertionError("a test reached the real NVML")

    monkeypatch.setattr(nvml, "_load_pynvml", refuse)


class FakeNVMLError(Exception):
    pass


class FakeNvml:
    """pynvml's surface, answering from host_probe.py's raw capture. P2P caps must be plain ints, as ctypes wants."""

    NVMLError = FakeNVMLError
    NVML_NVLINK_MAX_LINKS = 36

    def __init__(self, raw: dict[str, Any], procs: dict[int, list[Any]] | None = None, start_error: bool = False,
                 direct: bool = False):
        self.raw = raw["nvml"]
        self.direct = direct
        self.procs = procs or {}
        self.start_error = start_error
        self.p2p_calls: list[Any] = []
        self.shutdown = False

    def nvmlInit(self) -> None:
        if self.start_error:
            raise FakeNVMLError("Driver Not Loaded")

    def nvmlShutdown(self) -> None:
        self.shutdown = True

    def _g(self, h: int) -> dict[str, Any]:
        return self.raw["gpus"][h]

    def nvmlDeviceGetCount(self) -> int:
        return int(self.raw["count"])

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return self._g(h)["uuid"]

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return self._g(h)["name"].encode()  # older pynvml returns bytes

    def nvmlDeviceGetCudaComputeCapability(self, h: int) -> tuple[int, int]:
        return tuple(self._g(h)["cc"])  # type: ignore[return-value]

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        g = self._g(h)
        return SimpleNamespace(total=g["mem_total"], free=g["mem_free"], used=g["mem_used"])

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return SimpleNamespace(busId=self._g(h)["pci_bus_id"])

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        states = self._g(h)["nvlink_states"]
        if link >= len(states):
            raise FakeNVMLError("Invalid Argument")
        return int(states[link])

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h: int, link: int) -> Any:
        if self.direct:  # a board where the pair is bridged directly: each link ends at the other GPU
            return SimpleNamespace(busId=self._g(1 - h)["pci_bus_id"].replace("00000000:", "0000:"))
        # what the real 2x H200 VM answered for every link (fixtures/hostfacts/h200x2-nvml-nvlink-remote.txt)
        return SimpleNamespace(busId="FFFFFFFF:FF:FF.0")

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h: int, link: int) -> int:
        return 0 if self.direct else 2  # NVML_NVLINK_DEVICE_TYPE_GPU / _SWITCH

    def nvmlDeviceGetP2PStatus(self, a: int, b: int, idx: Any) -> int:
        self.p2p_calls.append(idx)
        if not isinstance(idx, int):
            raise TypeError(f"an integer is required (got {type(idx).__name__})")  # what ctypes says to (0,)
        names = {0: "read", 1: "write", 2: "nvlink", 3: "atomics", 4: "prop"}
        return int(self.raw["pairs"][f"{min(a, b)}-{max(a, b)}"]["p2p"][names[idx]])

    def nvmlDeviceGetTopologyCommonAncestor(self, a: int, b: int) -> int:
        return int(self.raw["pairs"][f"{min(a, b)}-{max(a, b)}"]["common_ancestor"])

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        return self.procs.get(h, [])

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.raw["driver"]

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return int(self.raw["cuda_driver_v2"])


def probe(env: dict[str, str] | None = None, **kw: Any) -> HostFacts:
    return probe_nvml(FakeNvml(RAW, **kw), environ=env or {}, proc_name=lambda pid: f"proc{pid}")


# --- nvidia-smi parsers: the reference the NVML layer must agree with ---------------------------------------


def smi_query(text: str) -> list[dict[str, str]]:
    rows = list(csv.reader(io.StringIO(text.strip()), skipinitialspace=True))
    head = [h.split(" [")[0].strip() for h in rows[0]]
    return [dict(zip(head, (c.strip() for c in r))) for r in rows[1:]]


def smi_topo(text: str) -> dict[tuple[int, int], str]:
    clean = re.sub(r"\x1b\[[0-9;]*m", "", text)
    cells: dict[tuple[int, int], str] = {}
    for line in clean.splitlines():
        m = re.match(r"^GPU(\d+)\t(.*)$", line)
        if not m:
            continue
        i = int(m.group(1))
        for j, cell in enumerate(m.group(2).split("\t")):
            cell = cell.strip()
            if re.fullmatch(r"X|NV\d+|PIX|PXB|PHB|NODE|SYS", cell):
                cells[(i, j)] = cell
    return cells


def agree_with_nvidia_smi(facts: HostFacts, query: str, topo: str) -> None:
    """Each GPU's uuid, name, memory, bus id, compute capability and driver; each pair's NV#/PCI level."""
    rows = {int(r["index"]): r for r in smi_query(query)}
    for g in facts.gpus:
        r = rows[g.nvml_index if g.nvml_index is not None else g.index]
        assert g.uuid == r["uuid"]
        assert g.name == r["name"]
        assert g.memory_total_bytes // MIB == int(r["memory.total"].split()[0])
        assert bus_key(g.pci_bus_id or "") == bus_key(r["pci.bus_id"])
        assert f"{g.compute_capability[0]}.{g.compute_capability[1]}" == r["compute_cap"]
        assert facts.driver_version == r.get("driver_version", facts.driver_version)
    cells = smi_topo(topo)
    for lk in facts.links:
        a, b = facts.gpus[lk.a].nvml_index, facts.gpus[lk.b].nvml_index
        cell = cells[(a, b)]  # type: ignore[index]
        if cell.startswith("NV"):
            assert lk.nvlink_count == int(cell[2:])
            assert lk.p2p_nvlink == "ok"
        else:
            assert lk.nvlink_count == 0
            assert {"PIX": "PIX", "PXB": "PXB", "PHB": "PHB", "NODE": "NODE", "SYS": "SYS"}[cell] == lk.common_ancestor


def test_probe_from_raw_h200_pair_agrees_with_nvidia_smi() -> None:
    facts = probe()
    assert facts.gpu_count == 2
    agree_with_nvidia_smi(facts, RAW["nvidia_smi_query"], RAW["nvidia_smi_topo_m"])


def test_probe_reads_nvlink_state_although_common_ancestor_is_hostbridge() -> None:
    facts = probe()
    lk = facts.link(0, 1)
    assert lk is not None
    assert lk.common_ancestor == "PHB"  # NVML's HOSTBRIDGE (30) ...
    assert lk.nvlink_count == 18  # ... yet 18 NVLinks join the pair
    assert facts.all_pairs_nvlink
    assert facts.nvswitch is True  # NVML: every link's far end is an NVSwitch (an HGX slice)
    assert [g.nvlink_active for g in facts.gpus] == [18, 18]


def test_probe_directly_bridged_pair_is_not_a_switch() -> None:
    facts = probe_nvml(FakeNvml(RAW, direct=True), environ={})
    assert facts.links[0].nvlink_count == 18
    assert facts.nvswitch is False


def test_probe_passes_literal_caps_indices_not_the_pynvml_tuple() -> None:
    fake = FakeNvml(RAW)
    facts = probe_nvml(fake, environ={})
    assert sorted(fake.p2p_calls) == [0, 1, 2]
    assert all(type(i) is int for i in fake.p2p_calls)
    assert facts.links[0].p2p_read == "ok" and facts.links[0].p2p_write == "ok"


def test_probe_shuts_nvml_down() -> None:
    fake = FakeNvml(RAW)
    probe_nvml(fake, environ={})
    assert fake.shutdown


def test_probe_driver_facts() -> None:
    facts = probe()
    assert facts.driver_version == "580.159.04"
    assert facts.cuda_driver_version == 13000
    assert facts.gpus[0].compute_capability == (9, 0)
    assert facts.gpus[0].memory_total_bytes == 150754820096


def test_no_driver_is_a_fact_not_a_crash() -> None:
    facts = probe_nvml(FakeNvml(RAW, start_error=True), environ={})
    assert facts.gpus == ()
    assert "no NVIDIA driver" in facts.notes[0]
    assert "Driver Not Loaded" in facts.notes[0]


def test_missing_pynvml_is_a_fact(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing() -> Any:
        raise ImportError("No module named 'pynvml'")

    monkeypatch.setattr(nvml, "_load_pynvml", missing)
    facts = probe_nvml(environ={})
    assert facts.gpus == () and "not installed" in facts.notes[0]


def test_cuda_visible_devices_by_uuid_prefix_selects_and_renumbers() -> None:
    uuid1 = RAW["nvml"]["gpus"][1]["uuid"]
    facts = probe({"CUDA_VISIBLE_DEVICES": uuid1[:12]})
    assert [g.nvml_index for g in facts.gpus] == [1]
    assert facts.gpus[0].index == 0 and facts.gpus[0].uuid == uuid1
    assert facts.links == ()
    assert facts.cuda_visible_devices == uuid1[:12]


def test_cuda_visible_devices_reversed_keeps_pair_facts() -> None:
    facts = probe({"CUDA_VISIBLE_DEVICES": "1,0"})
    assert [g.nvml_index for g in facts.gpus] == [1, 0]
    assert facts.link(0, 1) is not None and facts.link(0, 1).nvlink_count == 18  # type: ignore[union-attr]


def test_processes_are_named_with_pids_and_unknown_memory_is_none() -> None:
    procs = {0: [SimpleNamespace(pid=4242, usedGpuMemory=70 * 2**30), SimpleNamespace(pid=7, usedGpuMemory=None)]}
    facts = probe(procs=procs)
    got = facts.gpus[0].processes
    assert [(p.pid, p.used_bytes, p.name) for p in got] == [(4242, 70 * 2**30, "proc4242"), (7, None, "proc7")]


UUIDS = ["GPU-4d36e88c-00d0", "GPU-928a752e-e0a8", "GPU-928b0000-0000"]


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        pytest.param(None, (0, 1, 2), id="unset-all"),
        pytest.param("", (), id="empty-none"),
        pytest.param("-1", (), id="minus-one-none"),
        pytest.param("2,0", (2, 0), id="order-kept"),
        pytest.param("0,7,1", (0,), id="stops-at-invalid"),
        pytest.param("1,1", (1,), id="stops-at-repeat"),
        pytest.param("GPU-928a", (1,), id="uuid-prefix"),
        pytest.param("GPU-928", (), id="ambiguous-prefix"),
        pytest.param("4d36e88c", (0,), id="uuid-without-GPU-"),
        pytest.param("MIG-abc,0", (), id="mig-not-mapped"),
        pytest.param(" 1 , 0 ", (1, 0), id="spaces"),
    ],
)
def test_visible_order(spec: str | None, want: tuple[int, ...]) -> None:
    assert visible_order(spec, UUIDS) == want


@given(st.lists(st.sampled_from(["0", "1", "2", "3", "-1", "GPU-928a", "GPU-4d", "x", ""]), max_size=6))
def test_visible_order_is_distinct_valid_and_a_prefix_of_the_spec(tokens: list[str]) -> None:
    got = visible_order(",".join(tokens), UUIDS)
    assert len(set(got)) == len(got)
    assert all(0 <= i < len(UUIDS) for i in got)
    assert len(got) <= len(tokens)


def test_bus_key_equates_nvml_spellings() -> None:
    assert bus_key("00000000:00:07.0") == bus_key("0000:00:07.0") == bus_key("00:07.0")
    assert bus_key("00000000:00:07.0") != bus_key("00000000:00:06.0")


@pytest.mark.parametrize("path", sorted(FIX.glob("*.json")), ids=lambda p: p.name)
def test_fixture_round_trips_and_says_where_it_came_from(path: Path) -> None:
    raw = json.loads(path.read_text())
    if "gpus" not in raw:  # raw probe dumps, not HostFacts
        assert raw.get("_source")
        return
    facts = facts_from_dict(raw)
    assert facts_from_dict(json.loads(facts.to_json())) == facts
    assert facts.provenance


def test_probe_output_round_trips() -> None:
    facts = probe(procs={0: [SimpleNamespace(pid=1, usedGpuMemory=5)]})
    assert facts_from_dict(json.loads(facts.to_json())) == facts


def test_a_prefetched_read_is_taken_once_and_a_forgotten_one_is_not(monkeypatch: pytest.MonkeyPatch) -> None:
    """prefetch_nvml reads in a thread; probe_nvml with the same environment takes that result; a read nobody took
    is dropped by forget_prefetch, so the next probe reads NVML again (here: a second fake with other GPUs)."""
    calls: list[str] = []
    fakes = iter([FakeNvml(RAW), FakeNvml(RAW, start_error=True)])

    def load() -> Any:
        calls.append("load")
        return next(fakes)

    monkeypatch.setattr(nvml, "_load_pynvml", load)
    env = {"CUDA_VISIBLE_DEVICES": "0,1"}
    nvml.prefetch_nvml(env)
    first = probe_nvml(environ=env)
    assert first.gpu_count == 2 and calls == ["load"]
    nvml.prefetch_nvml(env)  # the second fake: NVML cannot start
    nvml.forget_prefetch(env)
    monkeypatch.setattr(nvml, "_load_pynvml", lambda: FakeNvml(RAW))
    again = probe_nvml(environ=env)  # not the forgotten read's "no GPU" answer
    assert again.gpu_count == 2


def test_a_prefetched_read_that_raised_raises_in_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> Any:
        raise RuntimeError("driver exploded")

    monkeypatch.setattr(nvml, "_load_pynvml", broken)
    env: dict[str, str] = {}
    nvml.prefetch_nvml(env)
    with pytest.raises(RuntimeError, match="driver exploded"):
        probe_nvml(environ=env)
