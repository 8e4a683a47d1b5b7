"""GPU facts from NVML (``nvidia-ml-py``): no CUDA context, no torch, and "no driver" is a fact, not a crash.

SGLang reads the SM through NVML for the same reason: initialising CUDA in the launcher would poison the
``fork()`` of its workers (SGLang 0.5.23 ``srt/utils/common.py:758-759``). This module imports only the
standard library and ``pynvml``, so ``python3 -m sglwrap.host.capture`` runs on a bare GPU machine.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sglwrap.host.facts import TOPOLOGY_LEVELS, GpuFacts, GpuProcess, HostFacts, LinkFacts

# nvmlDeviceGetP2PStatus results (pynvml.py:382-389) in the words LinkFacts uses.
P2P_STATUS: dict[int, str] = {
    0: "ok",
    1: "chipset_not_supported",
    2: "gpu_not_supported",
    3: "ioh_topology_not_supported",
    4: "disabled_by_regkey",
    5: "not_supported",
    6: "unknown",
}
# Caps indices as literals: pynvml.py:369 is ``NVML_P2P_CAPS_INDEX_READ = 0,`` -- a tuple (0,), not 0.
P2P_READ, P2P_WRITE, P2P_NVLINK = 0, 1, 2
NVLINK_DEVICE_TYPE_SWITCH = 2  # NVML_NVLINK_DEVICE_TYPE_SWITCH
MAX_NVLINKS = 36  # NVML_NVLINK_MAX_LINKS in nvidia-ml-py 12/13


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def bus_key(bus_id: str) -> tuple[int, int, str]:
    """Normalise a PCI bus id (``00000000:00:06.0`` or ``0000:00:06.0``) so NVML's two spellings compare equal."""
    parts = bus_id.strip().lower().split(":")
    if len(parts) == 3:
        return int(parts[0], 16), int(parts[1], 16), parts[2]
    if len(parts) == 2:
        return 0, int(parts[0], 16), parts[1]
    return -1, -1, bus_id.strip().lower()


def visible_order(spec: str | None, uuids: Sequence[str]) -> tuple[int, ...]:
    """The NVML indices CUDA will see, in CUDA-ordinal order, for a ``CUDA_VISIBLE_DEVICES`` value.

    Follows CUDA's rules: integers or (prefixes of) UUIDs, comma separated; the list ends at the first entry
    that is invalid, unknown, ambiguous or repeated; an empty value hides every GPU. ``MIG-`` entries are not
    mapped (they end the list here).
    """
    if spec is None:
        return tuple(range(len(uuids)))
    chosen: list[int] = []
    for raw in spec.split(","):
        token = raw.strip()
        idx = _match_token(token, uuids)
        if idx is None or idx in chosen:
            break
        chosen.append(idx)
    return tuple(chosen)


def _match_token(token: str, uuids: Sequence[str]) -> int | None:
    if not token:
        return None
    if token.lstrip("+-").isdigit():
        n = int(token)
        return n if 0 <= n < len(uuids) else None
    if token.upper().startswith("MIG-"):
        return None
    want = token.lower() if token.lower().startswith("gpu-") else "gpu-" + token.lower()
    hits = [i for i, u in enumerate(uuids) if u.lower().startswith(want)]
    return hits[0] if len(hits) == 1 else None


def _load_pynvml() -> Any:
    import pynvml

    return pynvml


class _Nvml:
    """Thin wrapper: every call returns a value or None (NVML raises for what a device does not support)."""

    def __init__(self, lib: Any) -> None:
        self.lib = lib

    def get(self, name: str, *args: Any) -> Any:
        fn = getattr(self.lib, name, None)
        if fn is None:
            return None
        try:
            return fn(*args)
        except self.lib.NVMLError:
            return None


def probe_nvml(
    lib: Any | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    proc_name: Callable[[int], str | None] | None = None,
) -> HostFacts:
    """HostFacts for the GPUs CUDA will see (``CUDA_VISIBLE_DEVICES`` honoured), read through NVML.

    ``lib`` is the ``pynvml`` module (tests pass a fake). Without a driver or without ``nvidia-ml-py`` the
    result has no GPUs and a note saying why. A read started by :func:`prefetch_nvml` for the same environment is
    taken instead of a new one.
    """
    env = os.environ if environ is None else environ
    if lib is None and proc_name is None:
        started = _PREFETCH.pop(_prefetch_key(env), None)
        if started is not None:
            thread, box = started
            thread.join()
            if "error" in box:
                raise box["error"]
            facts: HostFacts = box["facts"]
            return facts
    return _probe_now(lib, env, proc_name)


_PREFETCH: dict[tuple[int, str], tuple[Any, dict[str, Any]]] = {}


def _prefetch_key(env: Mapping[str, str]) -> tuple[int, str]:
    return id(env), env.get("CUDA_VISIBLE_DEVICES") or ""


def prefetch_nvml(environ: Mapping[str, str] | None = None) -> None:
    """Start reading NVML in a background thread: ``nvmlInit`` and the queries run without the GIL, so they overlap
    the imports and parsing a command does before it needs the facts; :func:`probe_nvml` with the same environment
    waits for the result (and raises what the read raised)."""
    import threading

    env = os.environ if environ is None else environ
    key = _prefetch_key(env)
    if key in _PREFETCH:
        return
    box: dict[str, Any] = {}

    def read() -> None:
        try:
            box["facts"] = _probe_now(None, env, None)
        except BaseException as e:  # handed to the caller of probe_nvml
            box["error"] = e

    thread = threading.Thread(target=read, name="sglwrap-nvml", daemon=True)
    _PREFETCH[key] = (thread, box)
    thread.start()


def forget_prefetch(environ: Mapping[str, str] | None = None) -> None:
    """Drop a prefetched read nobody took (the command stopped early), so a later probe reads NVML afresh."""
    _PREFETCH.pop(_prefetch_key(os.environ if environ is None else environ), None)


def _probe_now(lib: Any | None, env: Mapping[str, str],
               proc_name: Callable[[int], str | None] | None) -> HostFacts:
    host = socket.gethostname()
    try:
        lib = _load_pynvml() if lib is None else lib
    except ImportError:
        return _no_gpu("nvidia-ml-py (pynvml) is not installed", host)
    try:
        lib.nvmlInit()
    except lib.NVMLError as e:
        return _no_gpu(f"NVML could not start ({_text(e)}): no NVIDIA driver or no GPU", host)
    try:
        return _probe(_Nvml(lib), env, proc_name or _read_proc_name, host)
    finally:
        try:
            lib.nvmlShutdown()
        except lib.NVMLError:
            pass


def _no_gpu(why: str, host: str) -> HostFacts:
    return HostFacts(source="nvml", gpus=(), provenance=f"NVML on {host}", notes=(why,))


def _probe(nv: _Nvml, env: Mapping[str, str], proc_name: Callable[[int], str | None], host: str) -> HostFacts:
    count = nv.get("nvmlDeviceGetCount") or 0
    handles = [nv.get("nvmlDeviceGetHandleByIndex", i) for i in range(count)]
    uuids = [_text(nv.get("nvmlDeviceGetUUID", h) or "") for h in handles]
    buses = [_bus_id(nv, h) for h in handles]
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    order = visible_order(cvd, uuids)
    links_of = [_nvlinks(nv, h) for h in handles]
    gpus = tuple(
        _gpu(nv, handles[phys], cuda_idx, phys, uuids[phys], buses[phys], links_of[phys], proc_name)
        for cuda_idx, phys in enumerate(order)
    )
    gpu_buses = {bus_key(b) for b in buses if b}
    on_switch = [_on_switch(lk, gpu_buses) for lk in links_of]
    links = tuple(
        _link(nv, handles, buses, links_of, on_switch, order, a, b)
        for a in range(len(order))
        for b in range(a + 1, len(order))
    )
    switch = len(order) > 1 and all(on_switch[p] for p in order)
    notes = _notes(cvd, count, order, env, gpus)
    driver = nv.get("nvmlSystemGetDriverVersion")
    return HostFacts(
        source="nvml",
        gpus=gpus,
        links=links,
        driver_version=None if driver is None else _text(driver),
        cuda_driver_version=nv.get("nvmlSystemGetCudaDriverVersion_v2"),
        nvswitch=switch,
        provenance=f"NVML on {host}",
        notes=notes,
        cuda_visible_devices=cvd,
    )


def _bus_id(nv: _Nvml, handle: Any) -> str | None:
    info = nv.get("nvmlDeviceGetPciInfo", handle)
    return None if info is None else _text(info.busId)


def _nvlinks(nv: _Nvml, handle: Any) -> list[tuple[str | None, int | None]]:
    """(remote bus id, remote device type) for each active NVLink of one GPU."""
    out: list[tuple[str | None, int | None]] = []
    for link in range(int(getattr(nv.lib, "NVML_NVLINK_MAX_LINKS", MAX_NVLINKS))):
        state = nv.get("nvmlDeviceGetNvLinkState", handle, link)
        if state is None:  # NotSupported / InvalidArgument past the device's last link
            if link == 0:
                break
            continue
        if state != 1:
            continue
        remote = nv.get("nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
        kind = nv.get("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
        out.append((None if remote is None else _text(remote.busId), kind))
    return out


def _on_switch(links: list[tuple[str | None, int | None]], gpu_buses: set[tuple[int, int, str]]) -> bool:
    """True when the GPU's NVLinks end at an NVSwitch: NVML's remote device type says so (on the 2x H200 VM every
    link reports type 2 = SWITCH and remote bus FFFFFFFF:FF:FF.0), or the far end is no GPU we know."""
    if not links:
        return False
    for remote, kind in links:
        if kind is not None:
            if kind != NVLINK_DEVICE_TYPE_SWITCH:
                return False
        elif remote is None or bus_key(remote) in gpu_buses:
            return False
    return True


def _gpu(
    nv: _Nvml,
    handle: Any,
    cuda_idx: int,
    phys: int,
    uuid: str,
    bus: str | None,
    links: list[tuple[str | None, int | None]],
    proc_name: Callable[[int], str | None],
) -> GpuFacts:
    cc = nv.get("nvmlDeviceGetCudaComputeCapability", handle) or (0, 0)
    mem = nv.get("nvmlDeviceGetMemoryInfo", handle)
    procs = nv.get("nvmlDeviceGetComputeRunningProcesses", handle) or []
    return GpuFacts(
        index=cuda_idx,
        name=_text(nv.get("nvmlDeviceGetName", handle) or "unknown"),
        compute_capability=(int(cc[0]), int(cc[1])),
        memory_total_bytes=int(mem.total) if mem is not None else 0,
        memory_free_bytes=int(mem.free) if mem is not None else None,
        uuid=uuid or None,
        pci_bus_id=bus,
        nvlink_active=len(links),
        processes=tuple(
            GpuProcess(pid=int(p.pid), used_bytes=_used(p), name=proc_name(int(p.pid))) for p in procs
        ),
        nvml_index=phys,
    )


def _used(proc: Any) -> int | None:
    used = getattr(proc, "usedGpuMemory", None)
    # NVML reports "not available" (e.g. without permission) as None in pynvml, or as a huge sentinel.
    if used is None or used >= 2**63:
        return None
    return int(used)


def _link(
    nv: _Nvml,
    handles: list[Any],
    buses: list[str | None],
    links_of: list[list[tuple[str | None, int | None]]],
    on_switch: list[bool],
    order: tuple[int, ...],
    a: int,
    b: int,
) -> LinkFacts:
    """One pair. ``nvlink_count`` is what nvidia-smi shows as NV#: links ending at the other GPU, or, when both
    GPUs' links end at NVSwitches and NVML's NVLINK P2P status is ok, the links each can use (the smaller)."""
    pa, pb = order[a], order[b]
    ha, hb = handles[pa], handles[pb]

    def p2p(idx: int) -> str:
        st = nv.get("nvmlDeviceGetP2PStatus", ha, hb, idx)
        return "error" if st is None else P2P_STATUS.get(int(st), f"status_{st}")

    target = buses[pb]
    direct = 0 if target is None else sum(
        1 for remote, _kind in links_of[pa] if remote is not None and bus_key(remote) == bus_key(target)
    )
    nvl = p2p(P2P_NVLINK)
    if direct == 0 and nvl == "ok" and on_switch[pa] and on_switch[pb]:
        direct = min(len(links_of[pa]), len(links_of[pb]))
    level = nv.get("nvmlDeviceGetTopologyCommonAncestor", ha, hb)
    return LinkFacts(
        a=a,
        b=b,
        nvlink_count=direct,
        p2p_read=p2p(P2P_READ),
        p2p_write=p2p(P2P_WRITE),
        p2p_nvlink=nvl,
        common_ancestor=None if level is None else TOPOLOGY_LEVELS.get(int(level), f"LEVEL_{level}"),
    )


def _notes(
    cvd: str | None, count: int, order: tuple[int, ...], env: Mapping[str, str], gpus: tuple[GpuFacts, ...]
) -> tuple[str, ...]:
    notes: list[str] = []
    if cvd is not None:
        notes.append(f"CUDA_VISIBLE_DEVICES={cvd!r} selects NVML GPUs {list(order)} of {count}")
    if count == 0:
        notes.append("NVML started but reports no GPU")
    names = {g.name for g in gpus}
    if len(names) > 1 and env.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
        notes.append("mixed GPU models and CUDA_DEVICE_ORDER is not PCI_BUS_ID: CUDA ordinals may differ "
                     "from the order shown (CUDA puts the fastest first)")
    return tuple(notes)


def _read_proc_name(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read().split(b"\0")
    except OSError:
        return None  # another PID namespace (a container) or gone
    words = [a.decode(errors="replace") for a in argv if a]
    return " ".join(words)[:200] or None
