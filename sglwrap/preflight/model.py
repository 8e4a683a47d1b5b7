"""What a check returns and what it reads: data only, rendered once by ``sglwrap.preflight.render``."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sglwrap.host.facts import HostFacts
from sglwrap.host.stackview import StackView
from sglwrap.sglang.cmdline import SglangCmdline

if TYPE_CHECKING:
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


@dataclass(frozen=True)
class FeatureChange:
    """A downgrade: set ``feature`` to ``mode`` ("off") or drop it (``mode`` None: SGLang's default)."""

    feature: str
    mode: str | None
    reason: str


@dataclass(frozen=True)
class Verdict:
    """One check's result: a one-line reason that names the facts used, and a fix the user can apply."""

    id: str
    status: Status
    reason: str
    fix: str = ""
    changes: tuple[FeatureChange, ...] = ()
    detail: Mapping[str, Any] | None = None  # what a check computed for later stages (the memory plan)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "status": self.status.value, "reason": self.reason, "fix": self.fix}


@dataclass(frozen=True)
class Context:
    """Everything a check may read; checks are pure functions of it."""

    facts: HostFacts
    stack: StackView
    args: SglangCmdline
    profile: Profile | None = None
    flags: FlagTable | None = None
    environ: Mapping[str, str] = field(default_factory=dict)
    force: bool = False
    deep: bool = False  # run the checks that start a child of the target interpreter (launch, preflight --deep)

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
