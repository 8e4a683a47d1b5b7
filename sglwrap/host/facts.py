"""One serializable description of a host: GPUs, the links between them, driver and stack versions.

Everything that plans (preflight, the memory accountant, launch) reads a ``HostFacts``; only the probes in
``sglwrap.host`` create one from the real machine, so tests and ``--assume`` feed facts in directly.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sglwrap.record import Record, asdict, field


SCHEMA_VERSION = 1

# nvidia-smi's names for NVML common-ancestor levels (NVML enum value -> name).
TOPOLOGY_LEVELS: dict[int, str] = {0: "INTERNAL", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


class GpuProcess(Record):
    """A compute process holding memory on a GPU."""

    pid: int
    used_bytes: int | None
    name: str | None = None


class GpuFacts(Record):
    """One GPU as NVML reports it (memory in bytes, as the driver reports it)."""

    index: int
    name: str
    compute_capability: tuple[int, int]
    memory_total_bytes: int
    memory_free_bytes: int | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None
    nvlink_active: int = 0
    processes: tuple[GpuProcess, ...] = ()
    nvml_index: int | None = None  # physical (PCI-order) index; ``index`` is the CUDA ordinal

    @property
    def sm(self) -> str:
        """The compute capability as torch spells it, e.g. ``sm_120``."""
        return f"sm_{self.compute_capability[0]}{self.compute_capability[1]}"


class LinkFacts(Record):
    """How two GPUs reach each other. P2P statuses use NVML's words: ok, chipset_not_supported, ..."""

    a: int
    b: int
    nvlink_count: int
    p2p_read: str
    p2p_write: str
    p2p_nvlink: str
    common_ancestor: str | None  # PIX, PXB, PHB, NODE, SYS, INTERNAL (None when unknown)


class HostFacts(Record):
    """Everything sglwrap knows about a machine; a JSON round-trip gives back an equal object."""

    source: str
    gpus: tuple[GpuFacts, ...]
    links: tuple[LinkFacts, ...] = ()
    driver_version: str | None = None
    cuda_driver_version: int | None = None  # NVML's int, e.g. 13000 for CUDA 13.0
    nvswitch: bool = False  # all GPUs on an NVSwitch fabric (multicast-capable)
    packages: dict[str, str] = field(default_factory=dict)
    probes: dict[str, Any] = field(default_factory=dict)
    provenance: str = ""
    notes: tuple[str, ...] = ()
    cuda_visible_devices: str | None = None  # the value the GPUs above were selected with (None: unset)
    # read from installed files (sglwrap.host.binaries): arches per CUDA package, nccl, nvcc, cuda_driver_api,
    # iommu, acs
    binaries: dict[str, Any] = field(default_factory=dict)

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    def link(self, a: int, b: int) -> LinkFacts | None:
        """The link between GPUs ``a`` and ``b`` in either order, or None."""
        for lk in self.links:
            if {lk.a, lk.b} == {a, b}:
                return lk
        return None

    @property
    def all_pairs_nvlink(self) -> bool:
        """True when every pair of GPUs is joined by NVLink (NVML's NVLINK P2P status ok)."""
        return self.nvlink_among(len(self.gpus))

    def nvlink_among(self, n: int) -> bool:
        """True when every pair among the first ``n`` GPUs has NVML's NVLINK P2P status ok (SGLang's
        is_full_nvlink test); False for fewer than 2 GPUs or more than the host has."""
        if n < 2 or n > len(self.gpus):
            return False
        for i in range(n):
            for j in range(i + 1, n):
                lk = self.link(i, j)
                if lk is None or lk.p2p_nvlink != "ok":
                    return False
        return True

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict with a schema version."""
        d = asdict(self)
        d["schema_version"] = SCHEMA_VERSION
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True)


def facts_from_dict(d: dict[str, Any]) -> HostFacts:
    """Rebuild HostFacts from ``to_dict`` output; raises KeyError/TypeError/ValueError on a bad shape."""
    gpus = tuple(
        GpuFacts(
            index=int(g["index"]),
            name=str(g["name"]),
            compute_capability=(int(g["compute_capability"][0]), int(g["compute_capability"][1])),
            memory_total_bytes=int(g["memory_total_bytes"]),
            memory_free_bytes=None if g.get("memory_free_bytes") is None else int(g["memory_free_bytes"]),
            uuid=g.get("uuid"),
            pci_bus_id=g.get("pci_bus_id"),
            nvlink_active=int(g.get("nvlink_active", 0)),
            processes=tuple(GpuProcess(**p) for p in g.get("processes", ())),
            nvml_index=None if g.get("nvml_index") is None else int(g["nvml_index"]),
        )
        for g in d["gpus"]
    )
    links = tuple(LinkFacts(**lk) for lk in d.get("links", ()))
    return HostFacts(
        source=str(d["source"]),
        gpus=gpus,
        links=links,
        driver_version=d.get("driver_version"),
        cuda_driver_version=d.get("cuda_driver_version"),
        nvswitch=bool(d.get("nvswitch", False)),
        packages=dict(d.get("packages", {})),
        probes=dict(d.get("probes", {})),
        provenance=str(d.get("provenance", "")),
        notes=tuple(d.get("notes", ())),
        cuda_visible_devices=d.get("cuda_visible_devices"),
        binaries=dict(d.get("binaries") or {}),
    )


def load_facts(path: Path) -> HostFacts:
    """Read a HostFacts JSON file (as written by ``HostFacts.to_json``)."""
    from sglwrap.errors import ConfigError

    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"{path}: cannot read host facts: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}: not JSON (line {e.lineno}): {e.msg}") from None
    try:
        return facts_from_dict(raw)
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise ConfigError(
            f"{path}: not a HostFacts file ({type(e).__name__}: {e}); "
            "write one with `python3 -m sglwrap.host.capture --out host.json` on the machine, or use a catalogue "
            "name like 8xH200"
        ) from None
