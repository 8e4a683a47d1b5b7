"""`sglwrap launch`: the drop-in for `python -m sglang.launch_server`."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sglwrap import argsplit
from sglwrap import launch as L
from sglwrap import multinode
from sglwrap.errors import ConfigError, UsageError
from sglwrap.inject import run_dir_for
from sglwrap.sglang_args import FlagTable, flag_table, installed_sglang_version, target_python

if TYPE_CHECKING:
    from sglwrap.supervise import Endpoint

# sglwrap's own options: name -> takes a value. None of them may equal an SGLang flag (tested).
OWN_OPTIONS: dict[str, bool] = {
    "--profile": True, "--dry-run": False, "--json": False, "--assume": True, "--assume-stack": True,
    "--force": False,
    "--notify": False,  # supervise for systemd Type=notify instead of exec (sglwrap.supervise)
}


def add_parser(sub: Any) -> None:
    """Register `launch` (its options are split from SGLang's by `parse`; this parser serves --help)."""
    p = sub.add_parser(
        "launch", help="plan, check and exec python -m sglang.launch_server with a profile",
        description="Resolve a profile, run the checks, render the injector and exec SGLang in this process. "
                    "Every option sglwrap does not own is passed to SGLang unchanged (with or without `--`).")
    p.add_argument("--profile", help="profile name or file (default: $SGLWRAP_PROFILE, else baseline)")
    p.add_argument("--dry-run", action="store_true", help="write the files and print what would run; do not exec")
    p.add_argument("--json", action="store_true", help="with --dry-run: one JSON object on stdout")
    p.add_argument("--assume", metavar="HW", help="plan for catalogued GPUs (8xH200, 8xRTX-PRO-6000) or a "
                                                  "HostFacts JSON file instead of this machine's")
    p.add_argument("--assume-stack", metavar="PKG=VER,...", help="plan for these package versions (sglang=0.5.9)")
    p.add_argument("--force", action="store_true", help="launch even if a check predicts failure")
    p.add_argument("--notify", action="store_true",
                   help="stay the parent: READY=1 to systemd once /health answers 200, forward signals, leave no "
                        "process behind (for Type=notify units); default is exec")
    p.add_argument("sglang_args", nargs=argparse.REMAINDER, help="SGLang's arguments")


def split_own_args(argv: Sequence[str], table: FlagTable | None) -> tuple[dict[str, Any], list[str]]:
    """Separate sglwrap's options from SGLang's; SGLang values are skipped using its flag table."""
    return argsplit.split_own_args(argv, OWN_OPTIONS, table, "launch")


def parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> L.LaunchOptions:
    """Custom parse: only sglwrap's exact option names are ours (no abbreviations)."""
    head = list(argv[1:])
    pre = head[: head.index("--")] if "--" in head else head
    if "-h" in pre or "--help" in pre:
        parser.parse_args(["launch", "--help"])
    own, _ = split_own_args(head, None)
    table = _table(own.get("--assume-stack"))
    own, sglang_args = split_own_args(head, table)
    profile = own.get("--profile") or os.environ.get("SGLWRAP_PROFILE") or "baseline"
    return L.LaunchOptions(profile=profile, sglang_args=tuple(sglang_args), dry_run=bool(own.get("--dry-run")),
                           json=bool(own.get("--json")), assume=own.get("--assume"),
                           assume_stack=own.get("--assume-stack"), force=bool(own.get("--force")),
                           notify=bool(own.get("--notify")))


def _endpoint(sglang_args: Sequence[str], table: FlagTable) -> Endpoint:
    from sglwrap.supervise import endpoint_from_args  # only --notify pays for http/ssl/ctypes imports

    return endpoint_from_args(sglang_args, table)


def _supervise(plan: L.LaunchPlan, env: dict[str, str], endpoint: Endpoint, environ: dict[str, str]) -> int:
    """``--notify``: run SGLang as a child, report readiness to systemd, exit as it did (sglwrap.supervise)."""
    from sglwrap import supervise

    config = supervise.SuperviseConfig(endpoint=endpoint, stop_grace_s=supervise.stop_grace_from_env(environ))
    return supervise.exit_like(supervise.supervise(plan.argv, env, config, environ=environ))


_TABLE_CACHE: dict[str | None, FlagTable] = {}


def _table(assume_stack: str | None) -> FlagTable:
    version = L.assumed_sglang_version(assume_stack)
    if version not in _TABLE_CACHE:
        _TABLE_CACHE[version] = flag_table(target_python(), assume_version=version)
    return _TABLE_CACHE[version]


def run(opts: L.LaunchOptions) -> int:
    """Plan, write the injector and manifest, then exec SGLang (or print the plan with --dry-run)."""
    from sglwrap.log import get_logger

    environ = dict(os.environ)
    python = target_python(environ)
    L.require_user_args(opts.sglang_args)
    if opts.json and not opts.dry_run:
        raise UsageError("launch: --json needs --dry-run (a real launch's stdout belongs to SGLang)")
    table = _table(opts.assume_stack)
    # --- multi-node --- (node rank from --node-rank, else Slurm / LeaderWorkerSet / SkyPilot; sglwrap.multinode)
    placement = multinode.place(opts.sglang_args, environ, table)
    if placement.added:
        opts = dataclasses.replace(opts, sglang_args=placement.sglang_args)
    endpoint = _endpoint(opts.sglang_args, table) if opts.notify else None
    # --- end multi-node ---
    plan = L.prepare(opts, environ, table, python)
    ray_note = multinode.refuse_ray_without_env(opts.sglang_args, table, plan.env_set, plan.profile.name,
                                                force=opts.force)
    module = os.environ.get("SGLWRAP_SERVER_MODULE", L.SERVER_MODULE)
    if module != plan.module:
        plan = dataclasses.replace(plan, module=module)
    if not opts.dry_run and module == L.SERVER_MODULE and installed_sglang_version(python) is None:
        raise ConfigError(f"SGLang is not installed for {python}; install it there (pip install sglang) or point "
                          "SGLWRAP_PYTHON at the interpreter that has it")
    run_dir = run_dir_for(plan.profile.hash, environ)
    site, manifest_path, doc = L.write_files(plan, run_dir, environ, dry_run=opts.dry_run)
    log = get_logger()
    notes = [*placement.notes, *([ray_note] if ray_note else [])]
    if opts.dry_run:
        if opts.json:
            out = {"argv": plan.argv, "env": doc["env"], "sitecustomize": str(site), "manifest": str(manifest_path),
                   "profile": {"name": plan.profile.name, "hash": plan.profile.hash},
                   "env_kept": plan.env_kept, "warnings": [*plan.warnings, *notes],
                   "overridden": list(plan.overridden),
                   "sglang_version": plan.sglang_version, "flag_table": plan.flag_table_source,
                   "gates": plan.gates, "node": placement.as_dict(),
                   "mode": "notify" if endpoint else "exec", "health": f"{endpoint.url}/health" if endpoint else None}
            sys.stdout.write(json.dumps(out, indent=1) + "\n")
        else:
            sys.stderr.write(L.describe(plan, site, manifest_path) + "\n")
            sys.stderr.write(f"node      {placement.node_rank} of {placement.nnodes} ({placement.source})\n")
            sys.stderr.write("".join(f"note      {n}\n" for n in notes))
        return 0
    for w in (*plan.warnings, *notes):
        log.warning("launch.note", note=w)
    _log_gates(log, plan.gates)
    log.info("launch.exec", profile=plan.profile.name, hash=plan.profile.hash, manifest=str(manifest_path),
             argv=plan.argv, node_rank=placement.node_rank, nnodes=placement.nnodes, rank_source=placement.source,
             mode="notify" if endpoint else "exec")
    if endpoint is not None:
        return _supervise(plan, L.exec_environment(plan, run_dir, environ), endpoint, environ)
    L.exec_plan(plan, L.exec_environment(plan, run_dir, environ))
    return 0  # unreachable: exec replaced the process


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
