"""Where HostFacts come from: a ``HostProbe`` seam with NVML, catalogue (``--assume 8xH200``) and file
(``--assume facts.json``) implementations, and ``--assume-stack`` overrides applied on top of any of them.

Planning code (preflight, memory) asks ``gather_facts`` and never imports pynvml itself.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from sglwrap.errors import UsageError
from sglwrap.host import stack
from sglwrap.host.facts import HostFacts
from sglwrap.record import Record, replace


class HostProbe(Protocol):
    """Anything that can describe a host."""

    def facts(self) -> HostFacts:
        """The HostFacts of the host this probe describes."""
        ...


class NvmlProbe(Record):
    """This machine: GPUs through NVML, the stack of ``python`` through metadata and the cached import probe."""

    python: str = sys.executable
    environ: Mapping[str, str] | None = None
    with_stack_probe: bool = True

    def facts(self) -> HostFacts:
        from sglwrap.host.nvml import probe_nvml

        gpu = probe_nvml(environ=self.environ)
        return with_local_stack(gpu, self.python, environ=self.environ, probe=self.with_stack_probe, live=True)


class CatalogueProbe(Record):
    """A machine from the built-in catalogue, with this machine's installed stack (override with --assume-stack)."""

    spec: str
    python: str = sys.executable
    environ: Mapping[str, str] | None = None
    with_stack_probe: bool = True

    def facts(self) -> HostFacts:
        from sglwrap.host.catalogue import resolve_assume  # GPU tables: --assume runs only

        gpu = resolve_assume(self.spec)
        return with_local_stack(gpu, self.python, environ=self.environ, probe=self.with_stack_probe)


class FileProbe(Record):
    """A HostFacts JSON file captured on a real machine: GPUs, driver and stack as they were there."""

    path: Path

    def facts(self) -> HostFacts:
        from sglwrap.host.catalogue import load_assumed_file  # a wrong path is 64, like an unknown GPU name

        return load_assumed_file(self.path)


def with_local_stack(
    facts: HostFacts, python: str, *, environ: Mapping[str, str] | None = None, probe: bool = True,
    live: bool = False,
) -> HostFacts:
    """``facts`` plus the package versions of ``python``, (if ``probe``) its cached import-level facts, and what
    its installed files say (GPU architectures, NCCL, nvcc; with ``live`` also libcuda and /sys)."""
    packages = stack.package_versions(python)
    probes = dict(facts.probes)
    if probe and packages.get("torch"):
        probes["stack"] = stack.probe_stack(
            python, packages, facts.driver_version, (g.uuid for g in facts.gpus), environ=environ
        )
    from sglwrap.host.binaries import binary_facts

    env = os.environ if environ is None else environ
    paths = stack.site_paths(python)
    binaries = {**binary_facts(paths, env, live=live, versions=packages), **facts.binaries}
    binaries["versions"] = {k: v for k, v in packages.items() if k in _BINARY_DISTS}
    if binaries["versions"]:  # where each was installed from (PEP 610); nothing to read when none is installed
        from sglwrap.distinfo import installed_origins

        binaries["origins"] = installed_origins(list(binaries["versions"]), paths)
    return replace(facts, packages={**facts.packages, **packages}, probes=probes, binaries=binaries)


# Distributions whose installed shared objects sglwrap.host.binaries reads, and the name of their entry there.
_BINARY_DISTS: dict[str, str] = {
    "sgl-kernel": "sgl-kernel", "sglang-kernel": "sgl-kernel", "flashinfer-python": "flashinfer",
    "flashinfer-cubin": "flashinfer", "flashinfer-jit-cache": "flashinfer", "sgl-deep-gemm": "deep-gemm",
    "deep-gemm": "deep-gemm", "sgl-deep-ep": "deep-ep", "deep-ep": "deep-ep", "sgl-flash-mla": "flash-mla",
    "torch": "torch", "nvidia-nccl-cu12": "nccl", "nvidia-nccl-cu13": "nccl",
}


def probe_for(assume: str | None, *, python: str = sys.executable,
              environ: Mapping[str, str] | None = None) -> HostProbe:
    """The probe an ``--assume`` value (or its absence) selects."""
    if assume is None:
        return NvmlProbe(python=python, environ=environ)
    spec = assume.strip()
    if not spec:
        raise UsageError("--assume '': empty; expected <count>x<GPU> (e.g. 8xH200) or the path of a HostFacts file")
    looks_like_file = os.path.exists(spec) or spec.endswith(".json") or "/" in spec
    if not looks_like_file:  # 8xH200, or a typo of one (H200, 8H200): the catalogue says what is wrong (64)
        return CatalogueProbe(spec=spec, python=python, environ=environ)
    return FileProbe(path=Path(spec).expanduser())


def gather_facts(
    assume: str | None = None,
    assume_stack: str | None = None,
    *,
    python: str = sys.executable,
    environ: Mapping[str, str] | None = None,
) -> HostFacts:
    """HostFacts for a command: from NVML, the catalogue or a file, then ``--assume-stack`` applied."""
    facts = probe_for(assume, python=python, environ=environ).facts()
    if assume_stack:
        facts = apply_assume_stack(facts, parse_assume_stack(assume_stack))
    return facts


# --assume-stack keys that are not package names: the driver, facts read from installed files, /sys facts.
HOST_KEYS = {"driver", "cuda-driver", "torch-arch", "nccl", "nvcc", "cuda-driver-api", "iommu", "acs",
             "nvidia-caps"}
# Architecture lists of installed binaries: sgl-kernel-arch=sm_90:sm_100a, as sglwrap.host.binaries reads them.
ARCH_KEYS = {"sgl-kernel-arch", "flashinfer-arch", "deep-gemm-arch", "deep-ep-arch", "flash-mla-arch", "nccl-arch",
             "torch-arch"}
# Package names --assume-stack knows (distribution names as pip spells them), besides sglwrap.host.stack.PACKAGES.
KNOWN_PACKAGES = set(stack.PACKAGES) | {"transformers", "vllm", "flash-attn", "xgrammar", "torchao", "sgl-flash-attn",
                                        "nvidia-cutlass-dsl-libs-cu13", "nvidia-nvshmem-cu12", "nvidia-nvshmem-cu13",
                                        "torchvision", "nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime"}
# Import names people write instead of the distribution name.
_IMPORT_NAMES = {"flashinfer": "flashinfer-python", "sgl-kernel-python": "sgl-kernel", "deep-gemm-python": "deep-gemm",
                 "flashinfer-python-cubin": "flashinfer-cubin", "pynvml": "nvidia-ml-py", "cupy": "cupy-cuda12x"}
_HOST_VALUES = {"iommu": ("translated", "passthrough", "off"), "acs": ("redirect", "clear"),
                "nvidia-caps": ("yes", "no")}
_KEY_RE = r"^[a-z0-9][a-z0-9._-]*$"  # both compiled (re's own cache) when --assume-stack is given
_VER_RE = r"^\d+(\.\d+)*([a-z0-9.+_-]*)$"


def assumed_sglang_version(assume_stack: str | None) -> str | None:
    """The ``sglang=`` entry of ``--assume-stack`` (parsed and checked as everywhere else), if any."""
    return parse_assume_stack(assume_stack).get("sglang") if assume_stack else None


def parse_assume_stack(text: str) -> dict[str, str]:
    """``sglang=0.5.23,torch=2.9.1+cu128,driver=570.124.06`` -> a dict; ``torch-arch`` takes ``sm_90:sm_100``."""
    out: dict[str, str] = {}
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        name, sep, value = item.partition("=")
        key = name.strip().lower().replace("_", "-")
        value = value.strip()
        if not sep or not re.match(_KEY_RE, key) or not value:
            raise UsageError(f"--assume-stack {item!r}: expected NAME=VERSION, e.g. torch=2.9.1+cu128 or driver=580.95.05")
        _check_key(key)
        if key in ARCH_KEYS:
            arches = [a for a in re.split(r"[:; ]+", value) if a]
            bad = [a for a in arches if not re.fullmatch(r"(sm|compute)_\d+[af]?", a)]
            if bad:
                raise UsageError(f"--assume-stack {key}: {bad[0]!r} is not like sm_90, sm_120a or compute_120 "
                                 "(separate entries with ':')")
        elif key in _HOST_VALUES:
            if value.lower() not in _HOST_VALUES[key]:
                raise UsageError(f"--assume-stack {key}={value!r}: expected one of {', '.join(_HOST_VALUES[key])}")
            value = value.lower()
        elif value.lower() == "none" and key in KNOWN_PACKAGES and key != "sglang":
            value = "none"  # known to be absent (an image without FlashInfer)
        elif not re.match(_VER_RE, value, re.I) or not _pep440(value):
            raise UsageError(f"--assume-stack {key}={value!r}: not a version (expected digits and dots, e.g. "
                             "2.9.1, 2.9.1+cu128, 580.95.05; or 'none' for a package that is not installed)")
        if key in out and out[key] != value:
            raise UsageError(f"--assume-stack {key} given twice ({out[key]} and {value}); give each name once")
        out[key] = value
    return out


def _pep440(value: str) -> bool:
    """Whether ``value`` reads as a version (``2.x`` and ``latest`` do not)."""
    from sglwrap.versions import InvalidVersion, strict

    try:
        strict(value)
    except InvalidVersion:
        return False
    return True


def _check_key(key: str) -> None:
    """Refuse a name --assume-stack does not know, with the closest known one."""
    if key in KNOWN_PACKAGES or key in HOST_KEYS or key in ARCH_KEYS:
        return
    import difflib

    if key in _IMPORT_NAMES:
        raise UsageError(f"--assume-stack {key!r}: that is an import name; did you mean {_IMPORT_NAMES[key]!r} "
                         "(the name pip installs)?")
    known = sorted(KNOWN_PACKAGES | HOST_KEYS | ARCH_KEYS)
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    raise UsageError(f"--assume-stack {key!r}: unknown name.{hint} Known: packages ({', '.join(sorted(KNOWN_PACKAGES))}), "
                     f"host facts ({', '.join(sorted(HOST_KEYS - {'torch-arch'}))}) and binary arch lists "
                     f"({', '.join(sorted(ARCH_KEYS))})")


# Which part of the import probe a package's version invalidates.
_PROBE_PART = {"torch": "torch", "flashinfer-python": "flashinfer", "sglang": "sglang"}


# What an SGLang release brings with it (its pins and theirs): another release planned means other versions of these.
# bitsandbytes is no SGLang requirement in any release read (0.4.1.post4 - 0.5.23; only the "test" extra names it from
# 0.5.7): installing another release keeps it.
RELEASE_PINNED = frozenset(stack.PACKAGES) - {"sglang", "nvidia-ml-py", "cupy-cuda12x", "cupy-cuda13x", "bitsandbytes"}


def apply_assume_stack(facts: HostFacts, overrides: Mapping[str, str]) -> HostFacts:
    """``facts`` with package versions, driver and torch arch list replaced; stale probe parts dropped. When
    ``sglang=`` names another release than the installed one, the installed packages that release would bring in
    its own versions (torch, sglang-kernel, FlashInfer, NCCL, ...) are left out unless named too: they describe
    this environment, not the one planned (installing that release replaces them)."""
    packages = dict(facts.packages)
    probes: dict[str, Any] = dict(facts.probes)
    stack_probe = dict(probes.get("stack") or {})
    driver, cuda_drv = facts.driver_version, facts.cuda_driver_version
    binaries: dict[str, Any] = dict(facts.binaries)
    arches = dict(binaries.get("arches") or {})
    notes = facts.notes
    if "sglang" in overrides and overrides["sglang"] != packages.get("sglang"):
        dropped = sorted(n for n in RELEASE_PINNED if n in packages and n not in overrides)
        for name in dropped:
            del packages[name]
            stack_probe.pop(_PROBE_PART.get(name, ""), None)
            read = _BINARY_DISTS.get(name)
            if read and f"{read}-arch" not in overrides:
                arches.pop(read, None)
            if name.startswith("nvidia-nccl") and "nccl" not in overrides:
                binaries.pop("nccl", None)
        if dropped:
            probes["assume_stack_left_out"] = {n: facts.packages[n] for n in dropped}
            notes = (*notes, f"--assume-stack sglang={overrides['sglang']}: the installed "
                     + ", ".join(f"{n} {facts.packages[n]}" for n in dropped)
                     + f" belong to {'SGLang ' + packages['sglang'] if packages.get('sglang') else 'this environment'}"
                     " and are left out of the plan; name them in --assume-stack to plan with them")
    for key, value in overrides.items():
        if key == "driver":
            driver, cuda_drv = value, None
            binaries.pop("cuda_driver_api", None)
        elif key == "cuda-driver-api":
            major, _, minor = value.strip().partition(".")
            binaries["cuda_driver_api"] = int(major) * 1000 + int(minor or 0) * 10
        elif key == "cuda-driver":
            major, _, minor = value.strip().partition(".")
            if not major.isdigit() or minor and not minor.isdigit():
                raise UsageError(f"--assume-stack cuda-driver={value!r}: expected the CUDA version the driver "
                                 "supports, MAJOR.MINOR (e.g. cuda-driver=12.8)")
            cuda_drv = int(major) * 1000 + int(minor or 0) * 10
        elif key == "torch-arch":
            probes["torch_arch_override"] = [a for a in re.split(r"[:; ]+", value) if a]
        elif key in ARCH_KEYS:
            arches[key.removesuffix("-arch")] = [a for a in re.split(r"[:; ]+", value) if a]
        elif key in ("nccl", "nvcc"):
            binaries[key] = value
            packages[key] = value
        elif key in ("iommu", "acs"):
            binaries[key] = {"mode" if key == "iommu" else "state": value}
        elif key == "nvidia-caps":
            binaries["nvidia_caps"] = value == "yes"
        elif value == "none":
            packages.pop(key, None)
            probes["assumed_absent"] = sorted({*probes.get("assumed_absent", ()), key})
            stack_probe.pop(_PROBE_PART.get(key, ""), None)
        else:
            packages[key] = value
            stack_probe.pop(_PROBE_PART.get(key, ""), None)
            origins = dict(binaries.get("origins") or {})
            if origins.pop(key, None) is not None:  # the installed build's origin says nothing of the one planned
                binaries["origins"] = origins
            read = _BINARY_DISTS.get(key)
            if read and (binaries.get("versions") or {}).get(key) != value and f"{read}-arch" not in overrides:
                arches.pop(read, None)  # the binaries read belong to another version than the one planned
    binaries["arches"] = arches
    if stack_probe:
        probes["stack"] = stack_probe
    else:
        probes.pop("stack", None)
    probes["assume_stack"] = dict(overrides)
    if "sglang" in overrides:
        _add_release_pins(packages, probes, overrides)
    return replace(
        facts, packages=packages, probes=probes, driver_version=driver, cuda_driver_version=cuda_drv,
        source=f"{facts.source}+assume-stack", binaries=binaries, notes=notes,
    )


# Distributions whose pin names a version but not the build a user installs (torch +cu128 or +cu126, sgl-kernel
# +cu130 from SGLang's index, ...): there, not of a known build, so nothing that reads the build may use the pin.
_BUILD_VARIANTS = frozenset({"torch", "torchvision", "torchaudio", "sgl-kernel", "sglang-kernel",
                             "flashinfer-jit-cache"})
# Distributions that provide the same module: naming one replaces the release's pin of the other.
SAME_MODULE = {"flashinfer": "flashinfer-python", "flashinfer-python": "flashinfer",
                "sgl-kernel": "sglang-kernel", "sglang-kernel": "sgl-kernel"}


def _add_release_pins(packages: dict[str, str], probes: dict[str, Any], overrides: Mapping[str, str]) -> None:
    """What the assumed SGLang release installs, for the packages nobody named: an exact pin of a plain install
    becomes the planned version; any other of its requirements means installed in a version nobody knows; what only
    ``sglang[all]`` adds is listed as ``extra`` (there or not, nobody knows) (``probes["release_pins"]``)."""
    from sglwrap.sglang.pins import exact_pin, release_requirements

    planned = release_requirements(overrides["sglang"])
    if planned is None:
        return
    read, reqs = planned
    pinned: dict[str, str] = {}
    brought: dict[str, str] = {}
    for name, spec in reqs["base"].items():
        if name in overrides or name in packages or SAME_MODULE.get(name, "") in overrides:
            continue  # named by the user (or what provides the same module), or installed here and kept
        version = exact_pin(spec)
        if version is not None and name not in _BUILD_VARIANTS:
            packages[name] = pinned[name] = version
        else:
            brought[name] = spec or "*"
    maybe = sorted(n for n in reqs["all"] if n not in overrides and n not in packages)
    probes["release_pins"] = {"release": read, "pinned": pinned, "brought": brought, "extra": maybe}
