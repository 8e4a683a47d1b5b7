"""What a check returns and what it reads: data only, rendered once by ``sglwrap.preflight.render``."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglwrap.host.facts import HostFacts
from sglwrap.host.stackview import StackView
from sglwrap.record import Record, field
from sglwrap.sglang.cmdline import SglangCmdline

if TYPE_CHECKING:
    from sglwrap.memory.facts import ModelFacts
    from sglwrap.profiles import Profile
    from sglwrap.sglang.flags import FlagTable


class Status(str, enum.Enum):
    """A check's outcome, mildest first."""

    PASS = "pass"
    SKIP = "skip"
    WARN = "warn"
    DOWNGRADE = "downgrade"
    BLOCK = "block"


SEVERITY = {Status.PASS: 0, Status.SKIP: 0, Status.WARN: 1, Status.DOWNGRADE: 2, Status.BLOCK: 3}


class FeatureChange(Record):
    """A downgrade: set ``feature`` to ``mode`` ("off") or drop it (``mode`` None: SGLang's default)."""

    feature: str
    mode: str | None
    reason: str


class Verdict(Record):
    """One check's result: a one-line reason that names the facts used, and a fix the user can apply."""

    id: str
    status: Status
    reason: str
    fix: str = ""
    changes: tuple[FeatureChange, ...] = ()
    detail: Mapping[str, Any] | None = None  # what a check computed for later stages (the memory plan)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "status": self.status.value, "reason": self.reason, "fix": self.fix}


class HostEnv(Record):
    """This machine's readings the host checks judge (``checks_hostenv.gather_hostenv``), taken once before the
    checks run and only when the facts describe this machine."""

    shm: tuple[int | None, int | None]  # /dev/shm total and free bytes (None: no /dev/shm)
    noexec: tuple[tuple[str, str], ...]  # (role, path) of JIT directories on a noexec filesystem
    ports: Mapping[str, int]  # flag -> port the launch binds (empty: this node serves no HTTP port)
    busy: tuple[tuple[str, int, str], ...]  # (flag, port, why) of the ports already taken
    memlock_soft: int  # ulimit -l (bytes; resource.RLIM_INFINITY when unlimited)
    mem_available: int | None  # MemAvailable of /proc/meminfo (bytes)
    disk_free: Mapping[str, tuple[str, int]]  # role -> (JIT directory, free bytes)


class Context(Record):
    """Everything a check may read; checks are pure functions of it."""

    facts: HostFacts
    stack: StackView
    args: SglangCmdline
    profile: Profile | None = None
    flags: FlagTable | None = None
    environ: Mapping[str, str] = field(default_factory=dict)
    force: bool = False
    deep: bool = False  # run the checks that start a child of the target interpreter (launch, preflight --deep)
    # facts of this launch gathered once by ``run_preflight`` before any check runs (checks read them, never disk)
    model: ModelFacts | str = "no --model-path given"  # the model's config.json read once, or why it was not
    model_missing: str | None = None  # why --model-path names a local model that is not there (None: may be fine)
    draft: ModelFacts | str | None = None  # --speculative-draft-model-path's config.json, or why not; None: no draft
    process_environ: Mapping[str, str] = field(default_factory=dict)  # sglwrap's own environment, read once
    installed_sglang: str | None = None  # the SGLang version installed for the target interpreter (metadata)
    sglang_package: Path | None = None  # its package directory (``.../site-packages/sglang``), read where a check needs it
    knowledge: tuple[Any, ...] = ()  # the knowledge base's entries (compat.kb.Entry, a layer above), loaded once
    knowledge_left_out: tuple[str, ...] = ()  # schema problems of the entries the knowledge base left out
    hostenv: HostEnv | None = None  # this machine's /dev/shm, mounts, ports, rlimits, RAM, disk (live facts only)
    arch_registry: tuple[frozenset[str], str] | None = None  # architectures the target release registers, where read
    arch_catalogue: Mapping[str, frozenset[str]] = field(default_factory=dict)  # every bundled release's, on a miss
    transformers_has: bool | None = None  # the installed transformers has the missed class (None: unknown)
    quant_registry: frozenset[str] = frozenset()  # quantization methods the installed target release registers
    quant_listed: Any = None  # else the release data's quantization_methods list (None: none)
    draft_archs: tuple[frozenset[str], str] | None = None  # architectures it drafts from the checkpoint, where read
    installed_deps: Any = None  # deps.InstalledDeps (a layer above): metadata of the target's packages, or None
    memory_plan: Any = None  # the accountant's MemoryPlan, the SglwrapError it raised, or None: not planned

    def mode(self, feature: str) -> str:
        """The profile's mode for ``feature`` (require, prefer, off, auto), or "default" when the profile does not
        name it: SGLang's own default then stands, and preflight only advises (warn), it never rewrites."""
        if self.profile is None:
            return "default"
        return self.profile.features.get(feature, "default")

    @property
    def world(self) -> int:
        """GPUs of one tensor-parallel group: the all-reduce's world size."""
        return self.args.tp

    def env(self, name: str) -> str | None:
        """The value a worker will see: the user's environment, else the profile's (forced profile values win)."""
        prof = self.profile.env.get(name) if self.profile is not None else None
        if prof is not None and (prof.force or name not in self.environ):
            return prof.value
        return self.environ.get(name)
