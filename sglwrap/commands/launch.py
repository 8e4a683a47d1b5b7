"""`sglwrap launch`: the drop-in for `python -m sglang.launch_server`."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from sglwrap import argsplit
from sglwrap import launch as L
from sglwrap import multinode
from sglwrap.errors import EXIT_USAGE, ConfigError, SglwrapError, UsageError
from sglwrap.inject import planned_run_dir, run_dir_for
from sglwrap.record import Record, replace
from sglwrap.sglang.cmdline import SglangCmdline, read_cmdline
from sglwrap.sglang.flags import FlagTable, table_for, target_release
from sglwrap.sglang.release import TargetRelease, target_python

if TYPE_CHECKING:
    from sglwrap.supervise import Endpoint

def add_parser(sub: Any) -> None:
    """Register `launch` (its options are split from SGLang's by `parse`; this parser serves --help)."""
    p = sub.add_parser(
        "launch", help="plan, check and exec SGLang (sglang serve) with a profile",
        description="Resolve a profile, run the checks, render the injector and exec SGLang in this process. "
                    "Every option sglwrap does not own is passed to SGLang unchanged (with or without `--`).")
    _add_options(p)


def _add_options(p: argparse.ArgumentParser) -> None:
    """`launch`'s own options (OWN_OPTIONS is read from them) and SGLang's arguments."""
    p.add_argument("--profile", help="profile name or file (default: $SGLWRAP_PROFILE, else baseline)")
    p.add_argument("--dry-run", action="store_true", help="print what would run and be written; write nothing")
    p.add_argument("--keep", action="store_true", help="with --dry-run: write the files for inspection")
    p.add_argument("--json", action="store_true", help="with --dry-run: one JSON object on stdout")
    p.add_argument("--assume", metavar="HW", help="plan for catalogued GPUs (8xH200, 8xRTX-PRO-6000) or a "
                                                  "HostFacts JSON file instead of this machine's")
    p.add_argument("--assume-stack", metavar="PKG=VER,...", help="plan for these package versions (sglang=0.5.9)")
    p.add_argument("--force", action="store_true", help="launch even if a check predicts failure")
    p.add_argument("--notify", action="store_true",
                   help="stay the parent: READY=1 to systemd once /health answers 200, forward signals, leave no "
                        "process behind (for Type=notify units); default is exec")
    p.add_argument("--rehearse", action="store_true",
                   help="first run this plan with --load-format dummy, one request and a clean stop (sglwrap "
                        "rehearse); launch only if it passed; skipped when this fingerprint passed before")
    p.add_argument("sglang_args", nargs=argparse.REMAINDER, help="SGLang's arguments")


# sglwrap's own options: name -> takes a value. None of them may equal an SGLang flag (tested).
OWN_OPTIONS: dict[str, bool] = argsplit.own_options(_add_options)


def split_own_args(argv: Sequence[str], table: FlagTable | None) -> tuple[dict[str, Any], list[str]]:
    """Separate sglwrap's options from SGLang's; SGLang values are skipped using its flag table."""
    return argsplit.split_own_args(argv, OWN_OPTIONS, table, "launch")


def _wants_json(head: Sequence[str]) -> bool:
    """``--dry-run --json`` among sglwrap's own options (before any ``--``): errors are answered in JSON too."""
    pre = list(head[: list(head).index("--")] if "--" in head else head)
    return "--dry-run" in pre and "--json" in pre


def json_failure(e: SglwrapError) -> None:
    """The one JSON object of a ``--dry-run --json`` that did not plan: verdict, exit code, the error, the gates."""
    gates = getattr(e, "gates", None)
    verdict = "usage_error" if e.exit_code == EXIT_USAGE else ("blocked" if gates else "error")
    doc = {"command": "launch", "verdict": verdict, "exit_code": e.exit_code, "error": e.message,
           "argv": None, "gates": gates, "mode": None}
    sys.stdout.write(json.dumps(doc, indent=1) + "\n")


def parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> L.LaunchOptions:
    """Custom parse: only sglwrap's exact option names are ours (no abbreviations)."""
    try:
        return _parse(parser, argv)
    except SglwrapError as e:
        if _wants_json(list(argv[1:])):
            json_failure(e)
        raise


def _parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> L.LaunchOptions:
    head = list(argv[1:])
    pre = head[: head.index("--")] if "--" in head else head
    if "-h" in pre or "--help" in pre:
        parser.parse_args(["launch", "--help"])
    own, _ = split_own_args(head, None)
    table = _table(own.get("--assume-stack"))[1]
    own, sglang_args = split_own_args(head, table)
    argsplit.refuse_misplaced_own(sglang_args, OWN_OPTIONS, "launch")
    profile = own.get("--profile") or os.environ.get("SGLWRAP_PROFILE") or "baseline"
    return L.LaunchOptions(profile=profile, sglang_args=tuple(sglang_args), dry_run=bool(own.get("--dry-run")),
                           json=bool(own.get("--json")), assume=own.get("--assume"),
                           assume_stack=own.get("--assume-stack"), force=bool(own.get("--force")),
                           notify=bool(own.get("--notify")), keep=bool(own.get("--keep")),
                           rehearse=bool(own.get("--rehearse")))


def _endpoint(cmd: SglangCmdline) -> Endpoint:
    from sglwrap.supervise import endpoint_from_args  # only --notify pays for http/ssl/ctypes imports

    return endpoint_from_args(cmd)


def _supervise(plan: L.LaunchPlan, env: dict[str, str], endpoint: Endpoint, environ: dict[str, str]) -> int:
    """``--notify``: run SGLang as a child, report readiness to systemd, exit as it did (sglwrap.supervise)."""
    from sglwrap import supervise

    config = supervise.SuperviseConfig(endpoint=endpoint, stop_grace_s=supervise.stop_grace_from_env(environ))
    return supervise.exit_like(supervise.supervise(plan.argv, env, config, environ=environ))


_TABLE_CACHE: dict[tuple[str, str | None], tuple[TargetRelease, FlagTable]] = {}


def _table(assume_stack: str | None) -> tuple[TargetRelease, FlagTable]:
    """The release the launch is for and its flag table (resolved once per process for one target interpreter:
    SGLWRAP_PYTHON may point elsewhere on the next call)."""
    from sglwrap.host.probe import assumed_sglang_version

    version = assumed_sglang_version(assume_stack)
    key = (target_python(), version)
    if key not in _TABLE_CACHE:
        release = target_release(key[0], version)
        _TABLE_CACHE[key] = (release, table_for(release))
    return _TABLE_CACHE[key]


class Planned(Record):
    """A launch decided: the plan, the command line it was made from, where this node stands, and notes."""

    plan: L.LaunchPlan
    cmd: SglangCmdline
    placement: multinode.Placement
    notes: list[str]
    endpoint: Endpoint | None


def plan_for(opts: L.LaunchOptions, environ: dict[str, str],
             check: Callable[[SglangCmdline], None] | None = None) -> Planned:
    """Everything `launch` decides before it writes a file: the one planning path that `launch`,
    `launch --rehearse` and `sglwrap rehearse` share. ``check`` sees the final command line before the (slower)
    preflight and may refuse it."""
    python = target_python(environ)
    release, table = _table(opts.assume_stack)
    if not opts.dry_run and release.source == "assumed" and release.installed != release.version:
        raise UsageError(f"launch: --assume-stack sglang={release.text} describes another machine; a real launch "
                         f"runs the installed SGLang ({release.installed or 'none'}); use it with --dry-run")
    release, cmd = read_cmdline(opts.sglang_args, release, table, require_model=True)
    # --- multi-node --- (node rank from --node-rank, else Slurm / LeaderWorkerSet / SkyPilot; sglwrap.multinode)
    placement = multinode.place(cmd, environ)
    if placement.added:
        cmd = cmd.with_args(placement.added)
    endpoint = _endpoint(cmd) if opts.notify else None
    # --- end multi-node ---
    if check is not None:
        check(cmd)
    # `sglang serve` where the release has it (0.5.10+), else python -m sglang.launch_server; tests substitute a module
    module = os.environ.get("SGLWRAP_SERVER_MODULE") or L.server_entry(release.version)
    if not opts.dry_run and "SGLWRAP_SERVER_MODULE" not in os.environ and release.installed is None:
        raise ConfigError(f"SGLang is not installed for {python}; install it there (pip install sglang) or point "
                          "SGLWRAP_PYTHON at the interpreter that has it")
    plan = L.prepare(opts, cmd, release, environ, python)
    ray_note = multinode.refuse_ray_without_env(cmd, plan.env_set, plan.profile.name, force=opts.force)
    if module != plan.module:
        plan = replace(plan, module=module)
    notes = [*placement.notes, *([ray_note] if ray_note else [])]
    return Planned(plan, cmd, placement, notes, endpoint)


def run(opts: L.LaunchOptions) -> int:
    """Parse → facts → profile → preflight (memory planned once) → plan → [rehearsal] → files → exec (or print,
    for --dry-run). With ``--dry-run --json`` a failure is still one JSON object on stdout (and the same exit code)."""
    try:
        return _run(opts)
    except SglwrapError as e:
        if opts.dry_run and opts.json:
            json_failure(e)
        raise


def _run(opts: L.LaunchOptions) -> int:
    from sglwrap.log import get_logger

    environ = dict(os.environ)
    L.require_user_args(opts.sglang_args)
    if opts.json and not opts.dry_run:
        raise UsageError("launch: --json needs --dry-run (a real launch's stdout belongs to SGLang)")
    if opts.keep and not opts.dry_run:
        raise UsageError("launch: --keep needs --dry-run (a real launch always writes its files)")
    if opts.rehearse and opts.dry_run:
        raise UsageError("launch: --rehearse runs SGLang and --dry-run runs nothing; use `sglwrap rehearse` to "
                         "rehearse without launching")
    if opts.rehearse and opts.assume:
        raise UsageError(f"launch: --rehearse runs SGLang on this machine's GPUs and --assume {opts.assume} plans "
                         "for others; drop one of them")
    planned = plan_for(opts, environ, check=_rehearsable if opts.rehearse else None)
    plan, placement, notes, endpoint = planned.plan, planned.placement, planned.notes, planned.endpoint
    log = get_logger()
    if opts.dry_run:
        return _dry_run(opts, plan, environ, placement, notes, endpoint)
    if opts.rehearse:
        _rehearse_first(planned, environ, log)
    run_dir = run_dir_for(plan.profile.hash, environ)
    site_text, doc = L.render_files(plan, run_dir, environ, dry_run=False)
    _site, manifest_path = L.write_files(run_dir, site_text, doc)
    for w in (*plan.warnings, *notes):
        log.warning("launch.note", note=w)
    _log_gates(log, plan.gates)
    log.info("launch.exec", profile=plan.profile.name, hash=plan.profile.hash, manifest=str(manifest_path),
             argv=plan.argv, node_rank=placement.node_rank, nnodes=placement.nnodes, rank_source=placement.source,
             mode="supervise" if endpoint else "exec")
    if endpoint is not None:
        return _supervise(plan, L.exec_environment(plan, run_dir, environ), endpoint, environ)
    L.exec_plan(plan, L.exec_environment(plan, run_dir, environ))
    return 0  # unreachable: exec replaced the process


def _rehearsable(cmd: SglangCmdline) -> None:
    from sglwrap.rehearse.plan import refuse_early

    refuse_early(cmd)


def _rehearse_first(planned: Planned, environ: dict[str, str], log: Any) -> None:
    """``--rehearse``: the rehearsal of this very plan (sglwrap.rehearse), skipped when its fingerprint passed
    before; a failure stops the launch with exit 78 and diagnose's words. The report goes to stderr: a launch's
    stdout belongs to SGLang."""
    from sglwrap import term
    from sglwrap.errors import SglwrapError
    from sglwrap.rehearse import report
    from sglwrap.rehearse.session import rehearse_plan
    from sglwrap.sdnotify import Notifier

    notifier = Notifier(environ)

    def progress(text: str) -> None:
        term.note(f"sglwrap: rehearse: {text}")
        notifier.send(STATUS=f"rehearsing: {text}")

    from sglwrap.rehearse.run import Interrupted

    try:
        outcome = rehearse_plan(planned.plan, planned.cmd, environ, assume=None, use_cache=True, progress=progress)
    except Interrupted as e:
        term.note(f"sglwrap: rehearse: interrupted ({e}); SGLang was not launched and everything the rehearsal "
                  "started was killed")
        raise
    doc = outcome.doc
    log.info("launch.rehearse", verdict=doc.get("verdict"), cached=outcome.cached, stage=doc.get("stage"),
             fingerprint=doc.get("fingerprint"), log=doc.get("log"))
    sys.stderr.write(report.to_text(doc))
    sys.stderr.flush()
    notifier.close()
    if outcome.exit_code != 0:
        raise SglwrapError(f"the rehearsal failed at {str(doc.get('stage')).replace('_', ' ')}, so SGLang was not "
                           f"launched: {doc.get('cause')} (log: {doc.get('log')})", exit_code=outcome.exit_code)


def _dry_run(opts: L.LaunchOptions, plan: L.LaunchPlan, environ: dict[str, str], placement: multinode.Placement,
             notes: list[str], endpoint: Endpoint | None) -> int:
    """Print the plan; write the files only with --keep (then into a run directory of their own)."""
    run_dir = run_dir_for(plan.profile.hash, environ) if opts.keep else planned_run_dir(plan.profile.hash, environ)
    site_text, doc = L.render_files(plan, run_dir, environ, dry_run=True)
    written = False
    site: str = str(run_dir / "sitecustomize.py")
    manifest_path: str = str(run_dir / L.MANIFEST_NAME)
    if opts.keep:
        s, m = L.write_files(run_dir, site_text, doc)
        site, manifest_path, written = str(s), str(m), True
    if opts.json:
        out = {"argv": plan.argv, "env": doc["env"], "sitecustomize": site, "manifest": manifest_path,
               "written": written, "profile": {"name": plan.profile.name, "hash": plan.profile.hash},
               "env_kept": plan.env_kept, "warnings": [*plan.warnings, *notes],
               "overridden": list(plan.overridden), "env_forced": dict(plan.env_forced),
               "sglang_version": plan.sglang_version, "sglang": plan.release, "flag_table": plan.flag_table_source,
               "gates": plan.gates, "node": placement.as_dict(),
               "mode": "supervise" if endpoint else "exec", "health": f"{endpoint.url}/health" if endpoint else None,
               "verdict": "planned", "exit_code": 0}
        sys.stdout.write(json.dumps(out, indent=1) + "\n")
        return 0
    tail = "" if written else " (not written: dry run; --keep writes it)"
    sys.stdout.write(L.describe(plan, site + tail, manifest_path + tail, supervise=endpoint is not None) + "\n")
    sys.stdout.write(f"node      {placement.node_rank} of {placement.nnodes} ({placement.source})\n")
    sys.stdout.write("".join(f"note      {n}\n" for n in notes))
    return 0


def _log_gates(log: Any, gates: dict[str, Any]) -> None:
    """One journal line per gate, so `journalctl -u …` shows what preflight and the accountant decided."""
    pre = gates.get("preflight")
    if isinstance(pre, dict) and "verdict" in pre:
        log.info("launch.preflight", verdict=pre["verdict"], downgrades=pre.get("downgrades", []),
                 findings=[f"{c['id']}: {c['status']}" for c in pre.get("checks", [])])
    mem = gates.get("memory")
    if isinstance(mem, dict) and "verdict" in mem:
        log.info("launch.memory", verdict=mem["verdict"], kv_tokens=mem.get("kv_tokens"),
                 mem_fraction_static=mem.get("mem_fraction_static"), fix=mem.get("fix"))
    elif isinstance(mem, dict):
        log.info("launch.memory", skipped=mem.get("skipped"))
