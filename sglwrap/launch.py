"""Plan a launch (pure), write its files (sitecustomize + manifest), then exec SGLang in this very process.

Flow: profile -> preflight gate -> argv/env plan -> memory gate -> files -> ``os.execve``. After the exec the PID,
the signals and the exit code are SGLang's own.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sglwrap import __version__, envvars, inject
from sglwrap.errors import ConfigError, UsageError
from sglwrap.fsutil import atomic_write_text
from sglwrap.host.facts import HostFacts
from sglwrap.profiles import Profile
from sglwrap.record import Record, field, replace
from sglwrap.settings import FEATURES, SETTINGS
from sglwrap.sglang.cmdline import SglangCmdline
from sglwrap.sglang.flags import FlagTable, pick_flag
from sglwrap.sglang.release import TargetRelease

SERVER_MODULE = "sglang.launch_server"
# `sglang serve` (console script sglang = sglang.cli.main:main). From SGLang 0.5.10 on, `python -m
# sglang.launch_server` warns that it is only "still supported" and recommends `sglang serve`; 0.5.10 is also where
# `serve` got `--model-type`, which sglwrap sets to `llm` so serve skips its diffusion auto-detection (which may fetch
# model_index.json from the Hub) and runs exactly launch_server's code: prepare_server_args + run_server, under the
# same try/finally kill_process_tree. The target venv's own console script is exec'd (its shebang names that venv's
# python), so the PID, signals and exit code stay SGLang's and `pgrep -f 'sglang serve'` finds the server.
SERVE_ENTRY = "sglang serve"
SERVE_SINCE = "0.5.10"
MANIFEST_NAME = "manifest.json"


def server_entry(version: object) -> str:
    """What to exec for SGLang ``version``: :data:`SERVE_ENTRY` from 0.5.10 on, else :data:`SERVER_MODULE`."""
    from sglwrap.versions import at_least

    return SERVE_ENTRY if at_least(str(version), SERVE_SINCE) else SERVER_MODULE


def entry_argv(python: str, module: str) -> list[str]:
    """The argv in front of SGLang's own arguments: the target venv's ``sglang`` console script (``…/bin/sglang
    serve``, beside ``python``), else ``python -m MODULE`` (``sglang.launch_server`` when the script is missing).
    Either way ``pgrep -f 'sglang serve'`` / ``pgrep -f sglang.launch_server`` finds the server."""
    if module == SERVE_ENTRY:
        script = Path(python).parent / "sglang"
        if script.is_file() and os.access(script, os.X_OK):
            return [str(script), "serve", "--model-type", "llm"]
        return [python, "-m", SERVER_MODULE]
    return [python, "-m", module]


class LaunchPlan(Record):
    """Everything a launch will do, decided before anything is written or executed."""

    profile: Profile
    python: str
    module: str
    sglang_args: tuple[str, ...]  # the user's args followed by the profile's
    profile_args: tuple[str, ...]  # what the profile added
    env_set: dict[str, str]  # profile/feature variables put into the exec environment
    env_kept: dict[str, str]  # profile variables left at the value the user's environment already had
    overridden: tuple[str, ...]  # profile settings the user's own args replaced
    warnings: tuple[str, ...]
    sglang_version: str
    flag_table_source: str
    facts: HostFacts | None = None
    release: dict[str, Any] = field(default_factory=dict)  # which SGLang the plan is for, and why
    gates: dict[str, Any] = field(default_factory=dict)  # preflight / memory results for the manifest
    env_forced: dict[str, dict[str, str]] = field(default_factory=dict)  # NAME -> {yours, profile}: force: true

    @property
    def argv(self) -> list[str]:
        return [*entry_argv(self.python, self.module), *self.sglang_args]


def plan_launch(profile: Profile, cmd: SglangCmdline, *, python: str,
                environ: Mapping[str, str], facts: HostFacts | None = None,
                module: str = SERVER_MODULE) -> LaunchPlan:
    """Decide argv and environment for ``profile`` + the user's SGLang command line. Pure: reads only its inputs."""
    table = cmd.table
    user_args = cmd.argv
    warnings: list[str] = []
    for written, exact in cmd.abbreviations:
        warnings.append(f"{written} is an abbreviation SGLang accepts for {exact}; "
                        f"write {exact} so a future flag cannot make it ambiguous")
    user_dests = set(cmd.given())
    profile_args: list[str] = []
    overridden: list[str] = []
    for key, value in sorted(profile.sglang.items()):
        setting = SETTINGS[key]
        flag = pick_flag(setting.flags, table)
        if flag is None:
            raise ConfigError(
                f"profile {profile.name!r} ({profile.sources[0]}): setting 'sglang.{key}' has no flag in SGLang "
                f"{table.version} (looked for {', '.join(setting.flags)}); remove it from the profile or "
                f"use another SGLang version")
        if table.flags[flag].dest in user_dests:
            overridden.append(f"sglang.{key} (your {flag} wins)")
            continue
        profile_args += [flag, _render_value(value)]
    feature_env: dict[str, str] = {}
    for name, mode in sorted(profile.features.items()):
        frag, env = _feature_fragment(profile, name, mode, table, warnings)
        if frag and table.flags[frag[0]].dest in user_dests:
            overridden.append(f"features.{name} (your {frag[0]} wins)")
            continue
        profile_args += list(frag)
        feature_env.update(env)
    env_forced: dict[str, dict[str, str]] = {}
    env_set, env_kept = _plan_env(profile, feature_env, environ, user_dests, warnings, env_forced)
    if profile_args:
        try:
            cmd.with_args(profile_args)  # the profile's values must be ones this SGLang accepts
        except UsageError as e:
            raise ConfigError(f"profile {profile.name!r} ({profile.sources[0]}): {e.message}") from None
    return LaunchPlan(
        profile=profile, python=python, module=module,
        sglang_args=tuple(user_args) + tuple(profile_args), profile_args=tuple(profile_args),
        env_set=env_set, env_kept=env_kept, overridden=tuple(overridden), warnings=tuple(warnings),
        sglang_version=table.version, flag_table_source=table.source, facts=facts, env_forced=env_forced,
    )


def _render_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _feature_fragment(profile: Profile, name: str, mode: str, table: FlagTable,
                      warnings: list[str]) -> tuple[tuple[str, ...], dict[str, str]]:
    feature = FEATURES[name]
    if mode == "auto":
        return (), {}
    candidates = feature.off_flags if mode == "off" else feature.on_flags
    env = dict(feature.on_env) if mode != "off" else {}
    for frag in candidates:
        if not frag or frag[0] in table.flags:
            return frag, env
    spelled = " or ".join(" ".join(c) for c in candidates)
    msg = (f"profile {profile.name!r}: features.{name}: {mode} needs {spelled}, which SGLang {table.version} "
           "does not have")
    if mode == "require":
        raise ConfigError(msg + "; the profile requires it")
    warnings.append(msg + "; skipped")
    return (), {}


def _plan_env(profile: Profile, feature_env: Mapping[str, str], environ: Mapping[str, str],
              user_dests: set[str], warnings: list[str],
              env_forced: dict[str, dict[str, str]]) -> tuple[dict[str, str], dict[str, str]]:
    env_set: dict[str, str] = {}
    env_kept: dict[str, str] = {}
    wanted = {name: (s.value, s.force) for name, s in profile.env.items()}
    for name, value in feature_env.items():
        wanted.setdefault(name, (value, False))
    for name, (value, force) in sorted(wanted.items()):
        current = environ.get(name)
        var = envvars.REGISTRY.get(name)
        triggers = set(var.sglang_overrides_when) if var is not None else set()
        if var is not None and ("*" in triggers or triggers & user_dests):
            if force:
                warnings.append(f"{name} is forced to {value} in every process, undoing what SGLang does itself "
                                f"({var.sglang_writes})")
            else:
                warnings.append(f"{name}={value} will not take effect: SGLang overwrites it with these arguments "
                                f"({var.sglang_writes}); set 'force: true' to override SGLang")
        if current is not None and current != value and not force:
            env_kept[name] = current
            warnings.append(f"{name}={current} from your environment is kept over the profile's {value} "
                            "(set 'force: true' in the profile to override)")
            continue
        if current is not None and current != value:
            env_forced[name] = {"yours": current, "profile": value}
        env_set[name] = value
    return env_set, env_kept


def exec_environment(plan: LaunchPlan, run_dir: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """The full environment for the exec: the caller's, the plan's variables, and the run dir first on PYTHONPATH."""
    env = dict(environ)
    env.update(plan.env_set)
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(run_dir) + (os.pathsep + old if old else "")
    env["SGLWRAP_PROFILE_HASH"] = plan.profile.hash
    return env


def env_changes(plan: LaunchPlan, run_dir: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """Only the variables the launch sets or changes (what ``--json`` reports as ``env``)."""
    full = exec_environment(plan, run_dir, environ)
    return {k: v for k, v in sorted(full.items()) if environ.get(k) != v}


def manifest(plan: LaunchPlan, run_dir: Path, site: Path, environ: Mapping[str, str], *,
             dry_run: bool) -> dict[str, Any]:
    """The launch manifest: what was decided and why, for `diagnose` and for people."""
    return {
        "sglwrap_manifest": 1,
        "sglwrap_version": __version__,
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "pid": os.getpid(),
        "host": os.uname().nodename,
        "dry_run": dry_run,
        "profile": {"name": plan.profile.name, "hash": plan.profile.hash,
                    "sources": list(plan.profile.sources), "notes": list(plan.profile.notes)},
        "argv": plan.argv,
        "env": env_changes(plan, run_dir, environ),
        "env_kept": plan.env_kept,
        "profile_args": list(plan.profile_args),
        "overridden": list(plan.overridden),
        "env_forced": dict(plan.env_forced),
        "warnings": list(plan.warnings),
        "versions": {"sglang": plan.sglang_version, "sglwrap": __version__,
                     "python": sys.version.split()[0]},
        "flag_table": plan.flag_table_source,
        "sglang": plan.release,
        "facts_source": plan.facts.source if plan.facts else None,
        "sitecustomize": str(site),
        "gates": plan.gates,
    }


def render_files(plan: LaunchPlan, run_dir: Path, environ: Mapping[str, str], *,
                 dry_run: bool) -> tuple[str, dict[str, Any]]:
    """The text of ``sitecustomize.py`` and the manifest a launch into ``run_dir`` writes (nothing is written)."""
    feature_env = {k: v for k, v in plan.env_set.items() if k not in plan.profile.env}
    text = inject.render_sitecustomize(plan.profile, feature_env)
    return text, manifest(plan, run_dir, run_dir / "sitecustomize.py", environ, dry_run=dry_run)


def write_files(run_dir: Path, site_text: str, doc: Mapping[str, Any]) -> tuple[Path, Path]:
    """Write sitecustomize.py and the manifest into ``run_dir`` (atomically); returns both paths."""
    site = inject.write_sitecustomize(run_dir, site_text)
    path = run_dir / MANIFEST_NAME
    atomic_write_text(path, json.dumps(doc, indent=1) + "\n", mode=0o600)
    return site, path


def describe(plan: LaunchPlan, site: Path | str, manifest_path: Path | str, *, supervise: bool = False) -> str:
    """Human-readable summary of a plan (``supervise``: --notify runs SGLang as a child instead of exec)."""
    why = plan.release.get("why") if plan.release else None
    lines = [f"profile   {plan.profile.name} ({plan.profile.short_hash})",
             f"sglang    {plan.sglang_version} ({why or 'flags: ' + plan.flag_table_source})"]
    for k, v in sorted(plan.env_set.items()):
        forced = plan.env_forced.get(k)
        lines.append(f"env       {k}={v}" + (f" (force: true in the profile overrides yours, {k}={forced['yours']})"
                                              if forced else ""))
    for k, v in sorted(plan.env_kept.items()):
        lines.append(f"env kept  {k}={v} (yours)")
    lines.append(f"{'supervise' if supervise else 'exec':<9} {shlex.join(plan.argv)}"
                 + (" (as a child: sglwrap stays the unit's main process for systemd notify)" if supervise else ""))
    lines.append(f"inject    {site}")
    lines.append(f"manifest  {manifest_path}")
    for w in plan.warnings:
        lines.append(f"note      {w}")
    for o in plan.overridden:
        lines.append(f"override  {o}")
    lines += _describe_gates(plan.gates)
    return "\n".join(lines)


def _describe_gates(gates: Mapping[str, Any]) -> list[str]:
    lines: list[str] = []
    pre = gates.get("preflight")
    if isinstance(pre, dict) and "verdict" in pre:
        lines.append(f"preflight {pre['verdict']}")
        for d in pre.get("downgrades", []):
            lines.append(f"  {d.get('feature')} -> {d.get('set')}: {d.get('reason')}")
        for c in pre.get("checks", []):
            lines.append(f"  {c['status']:<7} {c['id']}: {c['reason']}")
    mem = gates.get("memory")
    if isinstance(mem, dict) and "verdict" in mem:
        mfs = mem.get("mem_fraction_static", {})
        gib = mem.get("terms", {}).get("kv_pool", 0) / 2**30
        lines.append(f"memory    {mem['verdict']}: KV pool {gib:.1f} GiB per GPU = {mem.get('kv_tokens', 0):,} tokens "
                     f"at --mem-fraction-static {mfs.get('value')} ({mfs.get('source')}); "
                     f"weights {mem.get('weights_bytes_per_rank', 0) / 2**30:.1f} GiB/rank")
        cap = mem.get("context_capped")
        if cap:
            lines.append(f"  context capped at {cap['max_request_tokens']:,} tokens: the KV pool holds "
                         f"{cap['kv_tokens']:,}, fewer than --context-length {cap['context_length']:,}; "
                         f"fix: {cap['fix']}")
    elif isinstance(mem, dict) and "skipped" in mem:
        lines.append(f"memory    not planned: {mem['skipped']}")
    return lines


def exec_plan(plan: LaunchPlan, env: Mapping[str, str]) -> None:
    """Replace this process with SGLang (never returns on success)."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(plan.argv[0], plan.argv, dict(env))
    except OSError as e:
        raise ConfigError(f"cannot exec {plan.argv[0]}: {e.strerror}") from None


def require_user_args(args: Sequence[str]) -> None:
    """A launch without any SGLang arguments is almost surely a mistake in a unit file."""
    if not args:
        raise UsageError("no SGLang arguments given; e.g. sglwrap launch --profile fewchan -- --model-path M "
                         "--tp-size 8")


class LaunchOptions(Record):
    """sglwrap's own launch options (everything else on the command line belongs to SGLang)."""

    profile: str
    sglang_args: tuple[str, ...]
    dry_run: bool = False
    json: bool = False
    assume: str | None = None
    assume_stack: str | None = None
    force: bool = False
    notify: bool = False  # --notify: supervise for systemd Type=notify instead of exec (sglwrap.supervise)
    keep: bool = False  # --keep: a dry run writes its files for inspection
    rehearse: bool = False  # --rehearse: run the plan with dummy weights first (sglwrap.rehearse)


def prepare(opts: LaunchOptions, cmd: SglangCmdline, release: TargetRelease, environ: Mapping[str, str],
            python: str) -> LaunchPlan:
    """Profile -> preflight (which plans memory once and hands the plan on) -> argv/env plan. Raises ConfigError
    (exit 78) when blocked. A launch the accountant cannot plan is never blocked by memory: the record says why it
    was skipped, so sglwrap is never worse than plain SGLang."""
    from sglwrap.preflight.gate import preflight_gate
    from sglwrap.profiles import load_profile

    profile = load_profile(opts.profile, environ)
    profile, facts, record = preflight_gate(
        profile, cmd, assume=opts.assume, assume_stack=opts.assume_stack, python=python,
        environ=environ, force=opts.force)
    gates: dict[str, Any] = {"memory": record.pop("memory", None) or {"skipped": "the memory check did not run"},
                             "preflight": record}
    plan = plan_launch(profile, cmd, python=python, environ=environ, facts=facts)
    return replace(plan, gates=gates, release=release.as_dict())
