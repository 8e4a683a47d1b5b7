"""Facts read from installed files, never by importing them: the GPU architectures compiled into CUDA libraries
(the fatbin headers of each ELF ``.nv_fatbin`` section), the NCCL version inside ``libnccl.so``, the nvcc that
FlashInfer's JIT would run, the CUDA driver API version (``cuDriverGetVersion`` through ctypes: no CUDA context),
and the IOMMU mode and PCIe ACS bits from ``/sys``. Results are cached by path, size and mtime.
"""

from __future__ import annotations

import glob
import json
import os
import re
import struct
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

FATBIN_MAGIC = 0xBA55ED50
# Packages whose shared objects carry GPU code SGLang runs; the directory name under site-packages.
CUDA_PACKAGES: dict[str, tuple[str, ...]] = {
    "sgl-kernel": ("sgl_kernel",),
    "flashinfer": ("flashinfer", "flashinfer_jit_cache", "flashinfer_cubin"),
    "deep-gemm": ("deep_gemm",),
    "deep-ep": ("deep_ep",),
    "flash-mla": ("flash_mla",),
    "torch": ("torch/lib",),
    "nccl": ("nvidia/nccl",),
    "vllm": ("vllm",),
}
MAX_SO_BYTES = 2 << 30  # a section table is read, never the whole file


def fatbin_arches(path: str | os.PathLike[str]) -> set[str]:
    """``{"sm_90", "sm_100", "compute_120", ...}`` from the ELF ``.nv_fatbin`` section(s) of one shared object.

    SASS entries (kind 2) give ``sm_XY``, PTX entries (kind 1) ``compute_XY``. Empty when the file is not a 64-bit
    little-endian ELF or has no fatbin."""
    out: set[str] = set()
    try:
        with open(path, "rb") as fh:
            head = fh.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
                return out
            shoff = struct.unpack_from("<Q", head, 0x28)[0]
            shentsize, shnum, shstrndx = struct.unpack_from("<HHH", head, 0x3A)
            if not shoff or shentsize < 64 or shnum == 0 or shnum > 65535:
                return out
            fh.seek(shoff)
            table = fh.read(shentsize * shnum)
            sections = [struct.unpack_from("<IIQQQQIIQQ", table, i * shentsize) for i in range(shnum)]
            if shstrndx >= len(sections):
                return out
            str_off, str_size = sections[shstrndx][4], sections[shstrndx][5]
            fh.seek(str_off)
            names = fh.read(min(str_size, 1 << 20))
            for sec in sections:
                name_off, off, size = sec[0], sec[4], sec[5]
                end = names.find(b"\0", name_off)
                if names[name_off:end] != b".nv_fatbin" or size == 0:
                    continue
                _scan_fatbin(fh, off, size, out)
    except (OSError, struct.error, ValueError):
        return out
    return out


def _scan_fatbin(fh: Any, off: int, size: int, out: set[str]) -> None:
    """Walk the fatbins packed in one section: header (magic, version, header size, payload size), then entries
    (kind, header size, payload size, ..., arch at byte 28)."""
    pos, end = off, off + size
    while pos + 16 <= end:
        fh.seek(pos)
        magic, _ver, hsize, fat_size = struct.unpack("<IHHQ", fh.read(16))
        if magic != FATBIN_MAGIC:
            pos += 8  # fatbins are 8-byte aligned; skip padding
            continue
        entry, stop = pos + hsize, pos + hsize + fat_size
        while entry + 32 <= stop:
            fh.seek(entry)
            raw = fh.read(48)
            kind, _v, ehsize, payload = struct.unpack_from("<HHIQ", raw, 0)
            arch = struct.unpack_from("<I", raw, 28)[0]
            flags = struct.unpack_from("<Q", raw, 40)[0] if len(raw) >= 48 and ehsize >= 48 else 0
            if ehsize == 0 or kind not in (1, 2):
                break
            if 10 <= arch < 1000:
                out.add(f"{'sm' if kind == 2 else 'compute'}_{arch}{_variant(flags)}")
            entry += ehsize + payload
        pos = stop if stop > pos else pos + 16


def _variant(flags: int) -> str:
    """The arch-specific (``a``, exact GPU only) or family (``f``, same major) suffix from an entry's flags, as
    cuobjdump prints it; seen in sgl-kernel and FlashMLA wheels: 0x100000 for sm_90a/sm_100a/sm_120a, 0x200000 for
    sm_100f."""
    if flags & 0x100000:
        return "a"
    if flags & 0x200000:
        return "f"
    return ""


_PRUNE = {"include", "csrc", "cutlass", "cubins", "__pycache__", "tests", "triton", "cccl", "headers"}


def package_arches(site_dirs: Iterable[str], cache: dict[str, Any] | None = None,
                   versions: Mapping[str, str] | None = None) -> dict[str, list[str]]:
    """For each package in ``CUDA_PACKAGES`` found under ``site_dirs``: the union of its shared objects'
    architectures. A package's result is cached under its directory's mtime and the installed versions, so a warm
    run stats a few directories instead of walking them."""
    cache = {} if cache is None else cache
    stamp = ",".join(f"{k}={v}" for k, v in sorted((versions or {}).items()))
    result: dict[str, list[str]] = {}
    for pkg, subdirs in CUDA_PACKAGES.items():
        arches: set[str] = set()
        found = False
        for site in site_dirs:
            for sub in subdirs:
                base = os.path.join(site, sub)
                try:
                    mtime = os.stat(base).st_mtime_ns
                except OSError:
                    continue
                found = True
                key = f"pkg|{base}|{mtime}|{stamp}"
                hit = cache.get(key)
                if isinstance(hit, list):
                    arches |= set(hit)
                    continue
                here: set[str] = set()
                for so in _shared_objects(base):
                    here |= _cached_arches(so, cache)
                cache[key] = sorted(here)
                arches |= here
        if found:
            result[pkg] = sorted(arches, key=_arch_sort)
    return result


def _shared_objects(base: str) -> list[str]:
    out = []
    for root, dirs, files in os.walk(base):
        dirs[:] = [d for d in dirs if d not in _PRUNE]
        for f in files:
            if ".so" in f and not f.endswith(".py"):
                out.append(os.path.join(root, f))
    return sorted(out)


def _cached_arches(path: str, cache: dict[str, Any]) -> set[str]:
    try:
        st = os.stat(path)
    except OSError:
        return set()
    key = f"{path}|{st.st_size}|{int(st.st_mtime)}"
    hit = cache.get(key)
    if isinstance(hit, list):
        return set(hit)
    arches = fatbin_arches(path) if st.st_size < MAX_SO_BYTES else set()
    cache[key] = sorted(arches)
    return arches


def _arch_sort(a: str) -> tuple[int, str]:
    m = re.search(r"(\d+)", a)
    return (int(m.group(1)) if m else 0, a)


_NCCL_RE = re.compile(rb"NCCL version (\d+\.\d+\.\d+)")


def nccl_version_of(path: str | os.PathLike[str]) -> str | None:
    """The ``NCCL version X.Y.Z`` string libnccl prints at init, read from the library's bytes."""
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    m = _NCCL_RE.search(data)
    if m:
        return m.group(1).decode()
    m2 = re.search(rb"libnccl\.so\.(\d+\.\d+\.\d+)", data)
    return m2.group(1).decode() if m2 else None


def find_libnccl(site_dirs: Iterable[str], environ: Mapping[str, str]) -> str | None:
    """The libnccl torch will load: ``SGLANG_NCCL_SO_PATH``/``VLLM_NCCL_SO_PATH``, else the nvidia-nccl wheel's."""
    for var in ("SGLANG_NCCL_SO_PATH", "VLLM_NCCL_SO_PATH"):
        if environ.get(var) and os.path.isfile(environ[var]):
            return environ[var]
    for site in site_dirs:
        for cand in sorted(glob.glob(os.path.join(site, "nvidia", "nccl", "lib", "libnccl.so*"))):
            return cand
    return None


def nvcc_for_jit(environ: Mapping[str, str], site_dirs: Iterable[str] = ()) -> tuple[str | None, str | None]:
    """(path, release) of the nvcc FlashInfer's JIT would run: ``$CUDA_HOME/bin/nvcc``, else ``nvcc`` on PATH,
    else /usr/local/cuda (FlashInfer ``jit/cpp_ext.py``). The release is read from ``version.json`` or
    ``version.txt`` next to it when present, else from ``nvcc --version``."""
    cands: list[str] = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if environ.get(var):
            cands.append(os.path.join(environ[var], "bin", "nvcc"))
    for d in (environ.get("PATH") or "").split(os.pathsep):
        if d:
            cands.append(os.path.join(d, "nvcc"))
    cands.append("/usr/local/cuda/bin/nvcc")
    for c in cands:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c, _nvcc_release(c)
    return None, None


def _nvcc_release(nvcc: str) -> str | None:
    real = os.path.realpath(nvcc)
    home = Path(real).parent.parent
    for meta in (home / "version.json",):
        try:
            data = json.loads(meta.read_text(encoding="utf-8"))
            ver = (data.get("cuda_nvcc") or data.get("cuda") or {}).get("version")
            if ver:
                return ".".join(str(ver).split(".")[:2])
        except (OSError, ValueError, AttributeError):
            pass
    m = re.search(r"cuda-(\d+\.\d+)", real)
    if m:
        return m.group(1)
    from sglwrap.diskcache import from_files

    found: str | None = from_files("nvcc-release", [Path(real)], lambda: _nvcc_version_output(nvcc))
    return found


def _nvcc_version_output(nvcc: str) -> str | None:
    import subprocess

    try:
        proc = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"release (\d+\.\d+)", proc.stdout)
    return m.group(1) if m else None


def cuda_driver_api_version() -> int | None:
    """``cuDriverGetVersion`` of the libcuda this process would load (e.g. 13000), None without a driver. Reads a
    number, creates no context; a forward-compat libcuda on ``LD_LIBRARY_PATH`` answers with its own version."""
    import ctypes

    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    ver = ctypes.c_int(0)
    try:
        rc = lib.cuDriverGetVersion(ctypes.byref(ver))
    except AttributeError:
        return None
    return int(ver.value) if rc == 0 else None


def iommu_facts(sys_root: str = "/sys") -> dict[str, Any]:
    """IOMMU mode from ``/sys/kernel/iommu_groups`` and the default domain type; "unknown" when unreadable."""
    groups = os.path.join(sys_root, "kernel", "iommu_groups")
    try:
        names = os.listdir(groups)
    except OSError:
        return {"mode": "unknown", "why": f"{groups} unreadable"}
    if not names:
        return {"mode": "off"}
    types: set[str] = set()
    for g in names[:64]:
        try:
            types.add(Path(groups, g, "type").read_text(encoding="utf-8").strip())
        except OSError:
            continue
    if not types:
        return {"mode": "unknown", "why": "no readable iommu group type"}
    mode = "passthrough" if types <= {"identity"} else "translated"
    return {"mode": mode, "domain_types": sorted(types)}


ACS_CAP_ID = 0x0D
ACS_CTRL_RR, ACS_CTRL_CR = 0x4, 0x8  # request redirect, completion redirect


def acs_redirect_bridges(sys_root: str = "/sys") -> dict[str, Any]:
    """PCIe bridges with ACS request/completion redirect enabled (each forces P2P through the root complex). Reading
    extended config space needs root; otherwise "unknown"."""
    if os.geteuid() != 0:
        return {"state": "unknown", "why": "reading PCIe extended config space needs root"}
    redirect: list[str] = []
    for dev in sorted(glob.glob(os.path.join(sys_root, "bus", "pci", "devices", "*"))):
        try:
            cls = Path(dev, "class").read_text(encoding="utf-8").strip()
            if not cls.startswith("0x0604"):
                continue
            cfg = Path(dev, "config").read_bytes()
        except OSError:
            continue
        ctrl = _acs_control(cfg)
        if ctrl is not None and ctrl & (ACS_CTRL_RR | ACS_CTRL_CR):
            redirect.append(os.path.basename(dev))
    return {"state": "redirect" if redirect else "clear", "bridges": redirect}


def _acs_control(cfg: bytes) -> int | None:
    off = 0x100
    seen = 0
    while 0x100 <= off and off + 8 <= len(cfg) and seen < 64:
        header = struct.unpack_from("<I", cfg, off)[0]
        if header in (0, 0xFFFFFFFF):
            return None
        if header & 0xFFFF == ACS_CAP_ID:
            return int(struct.unpack_from("<H", cfg, off + 6)[0])
        off = (header >> 20) & 0xFFC
        seen += 1
    return None


# Readings kept per file (keyed by path, size and mtime); beyond this many the oldest are dropped when one is added.
MAX_READINGS = 4096


def binary_facts(site_dirs: Iterable[str], environ: Mapping[str, str], *, live: bool = True,
                 versions: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Everything above, for HostFacts.binaries. ``live`` adds what only this machine can answer (libcuda, /sys);
    ``versions`` (installed distributions) keys the per-package cache."""
    from sglwrap import diskcache

    sites = list(site_dirs)
    kept = diskcache.load("binaries", "readings", environ)
    cache: dict[str, Any] = dict(kept) if isinstance(kept, dict) else {}
    before = len(cache)
    out: dict[str, Any] = {"arches": package_arches(sites, cache, versions)}
    nccl = find_libnccl(sites, environ)
    if nccl:
        key = "nccl|" + _stat_key(nccl)
        if key not in cache:
            cache[key] = nccl_version_of(nccl)
        out["nccl"] = cache[key]
        out["nccl_path"] = nccl
    nvcc, release = nvcc_for_jit(environ, sites)
    if nvcc:
        out["nvcc"], out["nvcc_path"] = release, nvcc
    if live:
        drv = cuda_driver_api_version()
        if drv is not None:
            out["cuda_driver_api"] = drv
        out["iommu"] = iommu_facts()
        out["acs"] = acs_redirect_bridges()
        out["nvidia_caps"] = os.path.exists("/dev/nvidia-caps")
    if len(cache) != before:
        # insertion order is age: a JSON object keeps it, so the oldest readings are the first dropped
        diskcache.store("binaries", "readings", dict(list(cache.items())[-MAX_READINGS:]), environ)
    return out


def _stat_key(path: str) -> str:
    try:
        st = os.stat(path)
    except OSError:
        return path
    return f"{path}|{st.st_size}|{int(st.st_mtime)}"
