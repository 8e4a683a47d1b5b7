"""Where HostFacts come from: a ``HostProbe`` seam with NVML, catalogue (``--assume 8xH200``) and file
(``--assume facts.json``) implementations, and ``--assume-stack`` overrides applied on top of any of them.

Planning code (preflight, memory) asks ``gather_facts`` and never imports pynvml itself.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from sglwrap.errors import UsageError
from sglwrap.host import stack
from sglwrap.host.catalogue import resolve_assume
from sglwrap.host.facts import HostFacts, load_facts


class HostProbe(Protocol):
    """Anything that can describe a host."""

    def facts(self) -> HostFacts:
        """The HostFacts of the host this probe describes."""
        ...


@dataclass(frozen=True)
class NvmlProbe:
    """This machine: GPUs through NVML, the stack of ``python`` through metadata and the cached import probe."""

    python: str = sys.executable
    environ: Mapping[str, str] | None = None
    with_stack_probe: bool = True

    def facts(self) -> HostFacts:
        from sglwrap.host.nvml import probe_nvml

        gpu = probe_nvml(environ=self.environ)
        return with_local_stack(gpu, self.python, environ=self.environ, probe=self.with_stack_probe)


@dataclass(frozen=True)
class CatalogueProbe:
    """A machine from the built-in catalogue, with this machine's installed stack (override with --assume-stack)."""

    spec: str
    python: str = sys.executable
    environ: Mapping[str, str] | None = None
    with_stack_probe: bool = True

    def facts(self) -> HostFacts:
        gpu = resolve_assume(self.spec)
        return with_local_stack(gpu, self.python, environ=self.environ, probe=self.with_stack_probe)


@dataclass(frozen=True)
class FileProbe:
    """A HostFacts JSON file captured on a real machine: GPUs, driver and stack as they were there."""

    path: Path

    def facts(self) -> HostFacts:
        return load_facts(self.path)


def with_local_stack(
    facts: HostFacts, python: str, *, environ: Mapping[str, str] | None = None, probe: bool = True
) -> HostFacts:
    """``facts`` plus the package versions of ``python`` and (if ``probe``) its cached import-level facts."""
    packages = stack.package_versions(python)
    probes = dict(facts.probes)
    if probe and packages.get("torch"):
        probes["stack"] = stack.probe_stack(
            python, packages, facts.driver_version, (g.uuid for g in facts.gpus), environ=environ
        )
    return dataclasses.replace(facts, packages={**facts.packages, **packages}, probes=probes)


def probe_for(assume: str | None, *, python: str = sys.executable,
              environ: Mapping[str, str] | None = None) -> HostProbe:
    """The probe an ``--assume`` value (or its absence) selects."""
    if assume is None:
        return NvmlProbe(python=python, environ=environ)
    spec = assume.strip()
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


# --assume-stack keys that are not package names.
HOST_KEYS = {"driver", "cuda-driver", "torch-arch"}
_KEY_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_VER_RE = re.compile(r"^\d+(\.\d+)*([a-z0-9.+_-]*)$", re.I)


def parse_assume_stack(text: str) -> dict[str, str]:
    """``sglang=0.5.23,torch=2.9.1+cu128,driver=570.124.06`` -> a dict; ``torch-arch`` takes ``sm_90:sm_100``."""
    out: dict[str, str] = {}
    for item in (p.strip() for p in text.split(",")):
        if not item:
            continue
        name, sep, value = item.partition("=")
        key = name.strip().lower().replace("_", "-")
        value = value.strip()
        if not sep or not _KEY_RE.match(key) or not value:
            raise UsageError(f"--assume-stack {item!r}: expected NAME=VERSION, e.g. torch=2.9.1+cu128 or driver=580.95.05")
        if key == "torch-arch":
            arches = [a for a in re.split(r"[:; ]+", value) if a]
            bad = [a for a in arches if not re.fullmatch(r"(sm|compute)_\d+[af]?", a)]
            if bad:
                raise UsageError(f"--assume-stack torch-arch: {bad[0]!r} is not like sm_90 or compute_120 "
                                 "(separate entries with ':')")
        elif not _VER_RE.match(value):
            raise UsageError(f"--assume-stack {key}={value!r}: not a version")
        out[key] = value
    return out


# Which part of the import probe a package's version invalidates.
_PROBE_PART = {"torch": "torch", "flashinfer-python": "flashinfer", "sglang": "sglang"}


def apply_assume_stack(facts: HostFacts, overrides: Mapping[str, str]) -> HostFacts:
    """``facts`` with package versions, driver and torch arch list replaced; stale probe parts dropped."""
    packages = dict(facts.packages)
    probes: dict[str, Any] = dict(facts.probes)
    stack_probe = dict(probes.get("stack") or {})
    driver, cuda_drv = facts.driver_version, facts.cuda_driver_version
    for key, value in overrides.items():
        if key == "driver":
            driver, cuda_drv = value, None
        elif key == "cuda-driver":
            major, _, minor = value.strip().partition(".")
            if not major.isdigit() or minor and not minor.isdigit():
                raise UsageError(f"--assume-stack cuda-driver={value!r}: expected the CUDA version the driver "
                                 "supports, MAJOR.MINOR (e.g. cuda-driver=12.8)")
            cuda_drv = int(major) * 1000 + int(minor or 0) * 10
        elif key == "torch-arch":
            probes["torch_arch_override"] = [a for a in re.split(r"[:; ]+", value) if a]
        else:
            packages[key] = value
            stack_probe.pop(_PROBE_PART.get(key, ""), None)
    if stack_probe:
        probes["stack"] = stack_probe
    else:
        probes.pop("stack", None)
    probes["assume_stack"] = dict(overrides)
    return dataclasses.replace(
        facts, packages=packages, probes=probes, driver_version=driver, cuda_driver_version=cuda_drv,
        source=f"{facts.source}+assume-stack",
    )
