"""Run every check, apply the downgrades to the profile, and say ok / downgraded / blocked."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sglwrap.compat.match import keep_contains, load_contains
from sglwrap.host.facts import HostFacts
from sglwrap.host.stackview import StackView, stack_view
from sglwrap.preflight.checks_comm import (
    check_custom_allreduce,
    check_profile_fit,
    check_ep_a2a,
    check_flashinfer_fusion,
    check_pcie_ipc_allreduce,
    check_symm_mem,
)
from sglwrap.preflight.checks_host import check_gpu_count, check_gpu_processes, check_nccl_env, check_sglang_flags
from sglwrap.preflight.checks_compat import check_compat
from sglwrap.preflight.checks_memory import check_memory
from sglwrap.preflight.checks_hostenv import HOSTENV_CHECKS
from sglwrap.preflight.checks_model import (
    check_context_length,
    check_model_arch,
    check_model_parallel,
    check_model_quant,
    check_speculative,
)
from sglwrap.preflight.deps import check_python_deps
from sglwrap.preflight.sglang_selfcheck import check_sglang_selfcheck
from sglwrap.preflight.checks_stack import (
    check_cuda_driver,
    check_flashinfer_cubin,
    check_nvml_live,
    check_sglang_installed,
    check_torch_arch,
)
from sglwrap.preflight.model import Context, FeatureChange, Status, Verdict
from sglwrap.record import Record, replace
from sglwrap.sglang.cmdline import SglangCmdline, cmdline_for, parse_cmdline

if TYPE_CHECKING:
    from sglwrap.memory.facts import ModelFacts
    from sglwrap.profiles import Profile
    from sglwrap.sglang.flags import FlagTable

EXIT_OK, EXIT_DOWNGRADED, EXIT_BLOCKED = 0, 1, 78

CHECKS: tuple[Callable[[Context], Verdict], ...] = (
    check_gpu_count,
    check_nvml_live,
    check_sglang_installed,
    check_cuda_driver,
    check_torch_arch,
    check_flashinfer_cubin,
    check_sglang_flags,
    check_flashinfer_fusion,
    check_custom_allreduce,
    check_symm_mem,
    check_ep_a2a,
    check_pcie_ipc_allreduce,
    check_nccl_env,
    check_profile_fit,
    check_gpu_processes,
    check_memory,
    check_compat,
    check_model_arch,
    check_model_quant,
    check_model_parallel,
    check_context_length,
    check_speculative,
    check_sglang_selfcheck,
    check_python_deps,
    *HOSTENV_CHECKS,
)


class PreflightResult(Record):
    """The checks' verdicts, the profile that remains after downgrades, and the facts they read."""

    verdict: str  # ok, downgraded, blocked
    checks: tuple[Verdict, ...]
    profile: Profile | None
    facts: HostFacts
    changes: tuple[FeatureChange, ...] = ()
    sglang_defaults: dict[str, Any] | None = None  # what the target release fills in by itself (sglang.resolved)

    @property
    def memory(self) -> dict[str, Any] | None:
        """The memory plan the ``memory`` check made, ``{"skipped": why}``, or None when it did not run."""
        for v in self.checks:
            if v.id == "memory":
                return dict(v.detail) if v.detail is not None else {"skipped": v.reason}
        return None

    @property
    def headline(self) -> str:
        """The verdict and what was not checked: ``OK, 4 of 13 checks skipped: cuda-driver, ...``."""
        word = {"ok": "OK", "downgraded": "DOWNGRADED", "blocked": "BLOCKED"}[self.verdict]
        warned = sum(v.status is Status.WARN for v in self.checks)
        if warned:
            word += f" ({warned} WARN)"
        skipped = [v.id for v in self.checks if v.status is Status.SKIP]
        ran = (f"all {len(self.checks)} checks ran" if not skipped else
               f"{len(skipped)} of {len(self.checks)} checks skipped: {', '.join(skipped)}")
        return f"{word}, {ran}{self._unknown_said()}"

    def _unknown_said(self) -> str:
        """``; not known here: ...`` for the knowledge-base entries that could only warn because a fact was unknown."""
        by_fact: dict[str, list[str]] = {}
        for v in self.checks:
            for eid, what in ((v.detail or {}).get("unknown") or {}).items() if v.id == "compat" else ():
                for w in what:
                    by_fact.setdefault(w, []).append(eid)
        said = [f"{w} ({', '.join(ids)})" for w, ids in by_fact.items()]
        return f"; not known here: {'; '.join(said)}" if said else ""

    @property
    def exit_code(self) -> int:
        return {"ok": EXIT_OK, "downgraded": EXIT_DOWNGRADED, "blocked": EXIT_BLOCKED}[self.verdict]

    def manifest(self) -> dict[str, Any]:
        """What launch writes under ``"preflight"`` in its manifest."""
        return {
            "verdict": self.verdict,
            "downgrades": [{"feature": c.feature, "set": c.mode or "dropped", "reason": c.reason}
                           for c in self.changes],
            "checks": [v.to_dict() for v in self.checks if v.status not in (Status.PASS, Status.SKIP)],
            "sglang_defaults": self.sglang_defaults,
        }


def run_preflight(
    facts: HostFacts,
    profile: Profile | None = None,
    sglang_args: SglangCmdline | Sequence[str] = (),
    *,
    flags: FlagTable | None = None,
    environ: Mapping[str, str] | None = None,
    force: bool = False,
    checks: Sequence[Callable[[Context], Verdict]] = CHECKS,
    deep: bool = False,
) -> PreflightResult:
    """Every check against ``facts``: this launch's other facts are gathered once (``launch_context``), then each
    check is a pure function of that Context (``environ``, the user's environment for the workers, defaults to empty).

    ``sglang_args`` is the parsed command line; a plain argv is parsed with ``flags`` (else the bundled data of
    the facts' SGLang release). ``deep``: also run SGLang's own checks in a child of the target interpreter
    (``sglang-selfcheck``) when no kept result answers for this command line; without it only a kept result is
    read."""
    stack = stack_view(facts)
    if isinstance(sglang_args, SglangCmdline):
        cmd = sglang_args
    elif flags is not None:
        cmd = parse_cmdline(sglang_args, flags)
    else:
        cmd = cmdline_for(sglang_args, stack.sglang)
    ctx = launch_context(facts, stack, cmd, profile=profile, flags=flags, environ=dict(environ or {}),
                         force=force, deep=deep)
    verdicts = tuple(check(ctx) for check in checks)
    keep_contains()  # the version-specifier answers the checks computed, for the next run
    changes = tuple(c for v in verdicts if v.status is Status.DOWNGRADE for c in v.changes)
    if any(v.status is Status.BLOCK for v in verdicts):
        verdict = "blocked"
    elif changes:
        verdict = "downgraded"
    else:
        verdict = "ok"
    if profile is not None:
        for change in changes:
            profile = apply_change(profile, change)
    from sglwrap.preflight.sglang_defaults import sglang_defaults

    return PreflightResult(verdict=verdict, checks=verdicts, profile=profile, facts=facts, changes=changes,
                           sglang_defaults=sglang_defaults(cmd, facts, stack.sglang))


def launch_context(facts: HostFacts, stack: StackView, cmd: SglangCmdline, *, profile: Profile | None,
                   flags: FlagTable | None, environ: dict[str, str], force: bool, deep: bool) -> Context:
    """The checks' one input, with this launch's facts gathered once: the model's (and draft's) config.json, whether
    a local --model-path is missing, sglwrap's own environment, the SGLang release installed for the target
    interpreter and its packages' metadata, what the target release registers, the knowledge base, the memory plan,
    this machine's host readings. Every read of disk or environment the checks need happens here, before any check
    runs (docs/preflight.md, "Facts once, checks pure")."""
    import os

    from sglwrap.memory.facts import read_model_facts
    from sglwrap.preflight import checks_compat
    from sglwrap.preflight.checks_hostenv import gather_hostenv
    from sglwrap.preflight.checks_memory import plan_memory
    from sglwrap.preflight.checks_model import gather_architectures, gather_release_registries, missing_local_model
    from sglwrap.preflight.deps import gather_installed
    from sglwrap.sglang.release import installed_version_text, target_python

    python = target_python(environ)
    installed = installed_version_text(python)
    load_contains()  # the version-specifier answers of earlier runs: the checks do no I/O
    mp = cmd.model_path
    model: ModelFacts | str = read_model_facts(mp) if mp else "no --model-path given"
    missing = missing_local_model(mp) if mp and isinstance(model, str) else None
    draft_path = cmd.get("speculative_draft_model_path")
    draft = read_model_facts(str(draft_path)) if draft_path else None
    ctx = Context(facts=facts, stack=stack, args=cmd, profile=profile, flags=flags, environ=environ, force=force,
                  deep=deep, model=model, model_missing=missing, draft=draft, process_environ=dict(os.environ),
                  installed_sglang=installed,
                  knowledge=tuple(checks_compat.entries()), knowledge_left_out=tuple(checks_compat.left_out()))
    # the facts below are derived from those above (the memory plan reads the profile's env, the registries the
    # installed package)
    return replace(ctx, memory_plan=plan_memory(ctx), hostenv=gather_hostenv(ctx),
                   installed_deps=gather_installed(ctx), **gather_release_registries(ctx),
                   **gather_architectures(ctx))


def apply_change(profile: Profile, change: FeatureChange) -> Profile:
    """The profile with one downgrade applied: the feature dropped, or set to ``change.mode``; ``sglang:<setting>``
    and ``env:<NAME>`` changes (from the knowledge base) set a profile setting or a forced worker variable."""
    if change.feature.startswith(("sglang:", "env:")):
        from sglwrap.compat.apply import apply_setting_change

        return apply_setting_change(profile, change)
    if change.mode is None:
        return profile.without_feature(change.feature, change.reason)
    features = {**profile.features, change.feature: change.mode}
    return replace(profile, features=features,
                   notes=profile.notes + (f"{change.feature} set {change.mode}: {change.reason}",))
