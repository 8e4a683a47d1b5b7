"""Which SGLang release a plan is for: one answer, one version parser, and the reason it was chosen.

Order: ``--assume-stack sglang=X`` (a what-if names the release outright) → the SGLang installed for the target
interpreter (package metadata, never an import) → the newest release whose data ships with sglwrap.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from sglwrap.record import Record
from sglwrap.versions import InvalidVersion, Version

from sglwrap.distinfo import installed_version
from sglwrap.errors import UsageError
from sglwrap.interpreter import interpreter_id, running_id


def parse_version(text: str, *, what: str = "sglang") -> Version:
    """``text`` as a PEP 440 version; a UsageError naming ``what`` when it is not one."""
    try:
        return Version(text.strip())
    except InvalidVersion:
        raise UsageError(f"{what}={text!r} is not a version (expected e.g. 0.5.9, 0.5.23rc1, 0.4.6.post2)") from None


class TargetRelease(Record):
    """The SGLang release sglwrap plans for, and why."""

    version: Version
    source: str  # "assumed" | "installed" | "bundled-newest" | "bundled-fitted" (the newest taking the argv)
    why: str
    python: str
    installed: Version | None  # what the target interpreter really has (None: SGLang not installed there)

    @property
    def text(self) -> str:
        return str(self.version)

    def as_dict(self) -> dict[str, object]:
        """The ``sglang`` record of a plan's JSON."""
        return {"version": self.text, "source": self.source, "why": self.why, "python": self.python,
                "installed": None if self.installed is None else str(self.installed)}


def target_python(environ: Mapping[str, str] | None = None) -> str:
    """The interpreter that runs SGLang: ``$SGLWRAP_PYTHON`` or the one running sglwrap."""
    env = os.environ if environ is None else environ
    return env.get("SGLWRAP_PYTHON") or sys.executable


_INSTALLED: dict[str, str | None] = {}


def installed_version_text(python: str) -> str | None:
    """The SGLang version string installed for ``python`` (metadata only, no import of sglang), or None."""
    key = interpreter_id(python)  # two venvs of one base Python share a binary, never a prefix
    if key in _INSTALLED:
        return _INSTALLED[key]
    if key == running_id():
        found: str | None = installed_version("sglang", sys.path)
    else:
        import subprocess

        code = "import importlib.metadata as m\ntry: print(m.version('sglang'))\nexcept Exception: print('')"
        try:
            out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=30, check=False)
            found = out.stdout.strip() or None
        except (OSError, subprocess.TimeoutExpired):
            found = None
    _INSTALLED[key] = found
    return found


def resolve_target(python: str, assumed: str | None, bundled: list[Version]) -> TargetRelease:
    """The release to plan for: ``assumed`` (from --assume-stack), else installed, else the newest bundled."""
    installed_text = installed_version_text(python)
    installed = None
    if installed_text is not None:
        try:
            installed = Version(installed_text)
        except InvalidVersion:
            installed = None
    if assumed is not None:
        v = parse_version(assumed)
        why = "--assume-stack sglang=" + assumed
        if installed is not None and installed != v:
            why += f" (the installed {installed} is not used for this plan)"
        return TargetRelease(v, "assumed", why, python, installed)
    if installed is not None:
        return TargetRelease(installed, "installed", f"installed for {python}", python, installed)
    if not bundled:
        raise UsageError("SGLang is not installed and no release data ships with this sglwrap; "
                         "pass --assume-stack sglang=VERSION")
    newest = max(bundled)
    return TargetRelease(newest, "bundled-newest",
                         f"SGLang is not installed for {python}; planning for the newest release sglwrap knows "
                         f"({newest}); pass --assume-stack sglang=VERSION to plan for another", python, None)
