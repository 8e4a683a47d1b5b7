"""Python dependency pins: ``python-deps``.

Two questions, answered from installed package metadata and ``ast`` reads (nothing is imported, no network):

- the model's ``config.json`` against the installed transformers: its ``model_type`` must be a config class that
  transformers (``models/auto/configuration_auto.py`` ``CONFIG_MAPPING_NAMES``) or SGLang (``srt/configs``) knows,
  else ``AutoConfig`` fails ("does not recognize this architecture"), unless ``auto_map`` brings the code and
  ``--trust-remote-code`` allows it; a ``transformers_version`` newer than the installed one is a warning;
- SGLang's own pins (``Requires-Dist`` of the installed ``sglang``) against what is installed, resolver-style with
  ``packaging`` (markers evaluated for this interpreter, extras ignored).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from sglwrap.record import Record
from sglwrap.versions import InvalidVersion, Version

from sglwrap.distinfo import canonical_name as canonicalize_name
from sglwrap.preflight.installed import (dist_info_paths, environment, installed_sglang, sglang_model_types,
                                         transformers_model_types)
from sglwrap.preflight.model import Context, Status, Verdict

# Packages SGLang itself refuses to start with when older than its pin: ``assert_pkg_version`` in
# srt/entrypoints/engine.py:1947-1966 (0.5.23; skipped with SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK). Other unmet pins
# (torch, transformers, ...) are warnings: they break some setups and not others.
HARD_PINS = frozenset({"sglang-kernel", "sgl-kernel", "flashinfer-python"})


def below_minimum(p: PinProblem) -> bool:
    """Whether the installed version is below a lower bound of the pin (``>=``, ``==``, ``~=``, ``>``): what
    SGLang's own ``assert_pkg_version(name, min)`` refuses (a newer kernel than the pin passes it)."""
    from packaging.requirements import InvalidRequirement, Requirement  # packaging's parsers cost ~25 ms to import

    if p.installed is None:
        return True
    try:
        have = Version(p.installed)
        for spec in Requirement(p.requirement).specifier:
            if spec.operator in (">=", "==", "~=", ">", "===") and "*" not in spec.version \
                    and have < Version(spec.version):
                return True
    except (InvalidVersion, InvalidRequirement):
        return False
    return False


class PinProblem(Record):
    """One requirement of SGLang the environment does not meet."""

    requirement: str
    installed: str | None  # None: not installed

    @property
    def name(self) -> str:
        from packaging.requirements import Requirement

        return canonicalize_name(Requirement(self.requirement).name)

    def __str__(self) -> str:
        return f"{self.requirement} (installed: {self.installed or 'none'})"


def unmet_requirements(requires: Iterable[str], installed: Mapping[str, str]) -> list[PinProblem]:
    """Requirements (``Requires-Dist`` lines) not met by ``installed`` (canonical name -> version); markers are
    evaluated for this interpreter with no extra, so optional extras are never demanded (pure)."""
    from packaging.markers import InvalidMarker, UndefinedEnvironmentName
    from packaging.requirements import InvalidRequirement, Requirement

    out: list[PinProblem] = []
    for line in requires:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is not None:
            try:
                if not req.marker.evaluate({"extra": ""}):
                    continue
            except (InvalidMarker, UndefinedEnvironmentName):
                continue
        have = installed.get(canonicalize_name(req.name))
        if have is None:
            out.append(PinProblem(str(req), None))
            continue
        try:
            ok = req.specifier.contains(Version(have), prereleases=True)
        except InvalidVersion:
            continue
        if not ok:
            out.append(PinProblem(str(req), have))
    return out


@functools.lru_cache(maxsize=4)
def _unmet(python: str) -> list[PinProblem]:
    """``unmet_requirements`` of the target's SGLang against its environment, kept on disk under the same stamps as
    the environment and this interpreter's version (its markers are evaluated here)."""
    from sglwrap.diskcache import from_files

    def compute() -> list[list[str | None]]:
        versions, requires, _ = environment(python)
        return [[p.requirement, p.installed] for p in unmet_requirements(requires, versions)]

    kind = "unmet-{}.{}.{}-{}".format(*sys.version_info[:3], sys.platform)
    kept = from_files(kind, dist_info_paths(python), compute)
    return [PinProblem(str(r), None if i is None else str(i)) for r, i in kept]


def config_verdict(cfg: Mapping[str, object], transformers: str | None, known_types: frozenset[str],
                   trust_remote_code: bool) -> tuple[Status, str, str]:
    """(status, reason, fix) for the config's needs against the installed transformers (pure)."""
    mtype = cfg.get("model_type")
    want = cfg.get("transformers_version")
    auto_map = cfg.get("auto_map")
    if transformers is None:
        return Status.BLOCK, "transformers is not installed for the target interpreter", "pip install transformers"
    notes: list[str] = []
    status = Status.PASS
    if isinstance(mtype, str) and known_types and mtype not in known_types:
        if auto_map and trust_remote_code:
            notes.append(f"model_type {mtype!r} comes from the checkpoint's own code (auto_map, --trust-remote-code)")
        elif auto_map:
            return (Status.BLOCK, f"model_type {mtype!r} is unknown to transformers {transformers} and to SGLang; the "
                    "checkpoint brings its code (auto_map) but --trust-remote-code is not given: AutoConfig refuses "
                    "to run it", "pass --trust-remote-code (after reading the checkpoint's code), or upgrade "
                    f"transformers{f' to >= {want}' if want else ''}")
        else:
            return (Status.BLOCK, f"model_type {mtype!r} is unknown to transformers {transformers} and to SGLang: "
                    "'The checkpoint you are trying to load has model type "
                    f"`{mtype}` but Transformers does not recognize this architecture'",
                    f"upgrade transformers{f' to >= {want}' if want else ''} (within SGLang's pin)")
    if isinstance(want, str):
        try:
            if Version(want).release[:2] > Version(transformers).release[:2]:
                status = Status.WARN
                notes.append(f"config.json was written by transformers {want}, installed is {transformers} "
                             "(newer config fields may be ignored)")
        except InvalidVersion:
            pass
    reason = "; ".join(notes) or f"model_type {mtype!r} is known to transformers {transformers}"
    return status, reason, "upgrade transformers within SGLang's pin" if status is Status.WARN else ""


class InstalledDeps(Record):
    """What is installed for the target interpreter, as ``python-deps`` judges it (read before the checks)."""

    versions: Mapping[str, str]  # canonical name -> version of every installed distribution
    requires: tuple[str, ...]  # the installed sglang's Requires-Dist
    unmet: tuple[PinProblem, ...]  # those pins the environment does not meet
    model_types: frozenset[str]  # model types AutoConfig knows: transformers', plus SGLang's own when both found


def gather_installed(ctx: Context) -> InstalledDeps | None:
    """The installed packages' metadata and the model types of the installed transformers and SGLang (``ast``, disk
    memo), when the target release is the installed one; None otherwise (``python-deps`` then skips)."""
    if installed_sglang(ctx) != (ctx.stack.sglang or ctx.args.version):
        return None
    from sglwrap.sglang.release import target_python

    python = target_python(ctx.environ)
    versions, requires, dirs = environment(python)
    known: frozenset[str] = frozenset()
    if not isinstance(ctx.model, str):  # the model types are read only when a config.json is there to judge
        tdir = dirs.get("transformers")
        known = transformers_model_types(Path(tdir)) if tdir else frozenset()
        sdir = dirs.get("sglang")
        model_type = ctx.model.config.get("model_type")
        if known and sdir and model_type not in known:  # SGLang's own types only matter then
            known = known | sglang_model_types(Path(sdir))
    return InstalledDeps(versions=versions, requires=requires, unmet=tuple(_unmet(python)), model_types=known)


def check_python_deps(ctx: Context) -> Verdict:
    """The config's transformers needs and SGLang's own pins against the installed packages (metadata only)."""
    from sglwrap.preflight.checks_model import model_facts

    cid = "python-deps"
    target = ctx.stack.sglang or ctx.args.version
    if installed_sglang(ctx) != target:
        return Verdict(cid, Status.SKIP, f"SGLang {target} is not the installed release: its pins and the installed "
                       "transformers are not what will run")
    deps: InstalledDeps = ctx.installed_deps
    versions, requires, problems = deps.versions, deps.requires, list(deps.unmet)
    skip_check = (ctx.env("SGLANG_SKIP_SGL_KERNEL_VERSION_CHECK") or "").strip().lower() in ("1", "true")
    hard = [p for p in problems if p.name in HARD_PINS and below_minimum(p) and not skip_check]
    soft = [p for p in problems if p not in hard]
    parts: list[str] = []
    status = Status.PASS
    fix: list[str] = []
    if hard:
        from packaging.requirements import Requirement

        status = Status.BLOCK
        parts.append(f"SGLang {target} requires {', '.join(map(str, hard))}")
        fix.append("pip install " + " ".join(f"'{Requirement(p.requirement).name}{Requirement(p.requirement).specifier}'"
                                             for p in hard))
    if soft:
        status = max(status, Status.WARN, key=_sev)
        parts.append(f"unmet pins of SGLang {target}: {', '.join(map(str, soft[:6]))}"
                     + (f" and {len(soft) - 6} more" if len(soft) > 6 else ""))
        fix.append("pip check; reinstall sglang into a clean environment")
    mf = model_facts(ctx)
    if not isinstance(mf, str):
        st, why, f = config_verdict(mf.config, versions.get("transformers"), deps.model_types,
                                    bool(ctx.args.get("trust_remote_code")))
        if st is not Status.PASS:
            status = max(status, st, key=_sev)
            parts.append(why)
            fix.append(f)
        elif not parts:
            parts.append(why)
    if status is Status.PASS:
        return Verdict(cid, Status.PASS, f"{len(requires)} pins of SGLang {target} met; " + "; ".join(parts))
    return Verdict(cid, status, "; ".join(parts), "; ".join(x for x in fix if x))


def _sev(s: Status) -> int:
    from sglwrap.preflight.model import SEVERITY

    return SEVERITY[s]
