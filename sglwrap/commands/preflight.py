"""`sglwrap preflight`: the checks alone, as a table on stderr or one JSON object on stdout.

Exit 0 ok, 1 ok after downgrade, 78 blocked. Options sglwrap does not own are SGLang's (with or without `--`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from sglwrap import argsplit
from sglwrap.argsplit import refuse_misplaced_own, split_own_args
from sglwrap.record import Record

class PreflightOptions(Record):
    """The parsed command line of `sglwrap preflight`."""

    profile: str | None
    sglang_args: tuple[str, ...] = ()
    json: bool = False
    assume: str | None = None
    assume_stack: str | None = None
    force: bool = False
    explain: str | None = None
    deep: bool = False
    verbose: bool = False  # every skipped check on its own row (else one folded line)


def add_parser(sub: Any) -> None:
    """Register `preflight` (options are split from SGLang's by `parse`; this parser serves --help)."""
    p = sub.add_parser(
        "preflight", help="run the preflight checks alone",
        description="Check a profile and SGLang arguments against this machine (or --assume'd one) before any "
                    "weights load. Exit 0 ok, 1 downgraded, 78 blocked.")
    _add_options(p)


def _add_options(p: argparse.ArgumentParser) -> None:
    """`preflight`'s own options (OWN_OPTIONS is read from them) and SGLang's arguments."""
    p.add_argument("--profile", help="profile name or file (default: $SGLWRAP_PROFILE, else baseline)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout (the table still goes to stderr)")
    p.add_argument("--assume", metavar="HW", help="catalogued GPUs (8xRTX-PRO-6000, 2xH200) or a HostFacts JSON file")
    p.add_argument("--assume-stack", metavar="PKG=VER,...",
                   help="package versions and driver, e.g. sglang=0.5.23,torch=2.9.1+cu128,driver=580.95.05")
    p.add_argument("--force", action="store_true", help="an explicit flag for an unsupported feature only warns")
    p.add_argument("--deep", action="store_true", help="also run the installed SGLang's own argument checks in a "
                   "CPU child (sglang-selfcheck; seconds the first time for a command line, then kept; `launch` "
                   "always runs them)")
    p.add_argument("--verbose", action="store_true", help="list every skipped check on its own row (else one line)")
    p.add_argument("--explain", metavar="ID", help="print one knowledge-base entry (its conditions, the error users "
                   "see, the fix and its public sources) and exit")
    p.add_argument("sglang_args", nargs=argparse.REMAINDER, help="SGLang's arguments (after --)")


# sglwrap's own options here: name -> takes a value. None may equal an SGLang flag (checked in the tests).
OWN_OPTIONS: dict[str, bool] = argsplit.own_options(_add_options)


def split_args(argv: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """sglwrap's own options vs SGLang's arguments (shared rule: sglwrap.argsplit)."""
    return split_own_args(argv, OWN_OPTIONS, None, "preflight")


def parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> PreflightOptions:
    """Custom parse (called by the CLI instead of parse_args): argv[0] is the verb."""
    head = list(argv[1:])
    pre = head[: head.index("--")] if "--" in head else head
    if "-h" in pre or "--help" in pre:
        parser.parse_args(["preflight", "--help"])
    own, sglang_args = split_args(head)
    refuse_misplaced_own(sglang_args, OWN_OPTIONS, "preflight")
    return PreflightOptions(
        profile=own.get("--profile"), sglang_args=tuple(sglang_args), json=bool(own.get("--json")),
        assume=own.get("--assume"), assume_stack=own.get("--assume-stack"), force=bool(own.get("--force")),
        explain=own.get("--explain"), deep=bool(own.get("--deep")), verbose=bool(own.get("--verbose")))


def preflight(opts: PreflightOptions, environ: Mapping[str, str]) -> tuple[Any, dict[str, Any]]:
    """Gather facts, load the profile and flag table, run the checks. Returns (result, timing)."""
    if opts.assume is not None:
        return _preflight(opts, environ)
    from sglwrap.host.nvml import forget_prefetch, prefetch_nvml

    prefetch_nvml(environ)  # a live host: NVML starts now, beside the imports and parsing below
    try:
        return _preflight(opts, environ)
    finally:
        forget_prefetch(environ)


def _preflight(opts: PreflightOptions, environ: Mapping[str, str]) -> tuple[Any, dict[str, Any]]:
    from sglwrap.host.probe import assumed_sglang_version, gather_facts
    from sglwrap.preflight import run_preflight
    from sglwrap.profiles import load_profile
    from sglwrap.sglang.cmdline import read_cmdline
    from sglwrap.sglang.flags import table_for, target_release
    from sglwrap.sglang.release import target_python

    t0 = time.monotonic()
    python = target_python(dict(environ))
    release = target_release(python, assumed_sglang_version(opts.assume_stack), dict(environ))
    # SGLang would refuse it: exit 64 (a guessed release's refusal reads the argv as the newest that takes it)
    release, cmd = read_cmdline(opts.sglang_args, release, table_for(release, dict(environ)))
    name = opts.profile or environ.get("SGLWRAP_PROFILE") or "baseline"
    profile = load_profile(name, environ)
    facts = gather_facts(opts.assume, opts.assume_stack, python=python, environ=environ)
    t1 = time.monotonic()
    result = run_preflight(facts, profile, cmd, flags=cmd.table, environ=environ, force=opts.force, deep=opts.deep)
    probe = facts.probes.get("stack") or {}
    timing = {"facts_s": round(t1 - t0, 3), "total_s": round(time.monotonic() - t0, 3),
              "stack_probe": {"cache": probe.get("cache"), "probe_s": probe.get("probe_seconds")},
              "sglang": release.as_dict()}
    return result, timing


def explain(entry_id: str) -> int:
    """Print one knowledge-base entry; an unknown id is a usage error naming the closest ids."""
    import difflib

    from sglwrap.compat.kb import by_id, explain as render, load
    from sglwrap.errors import UsageError

    table = by_id(load())
    entry = table.get(entry_id.strip())
    if entry is None:
        close = difflib.get_close_matches(entry_id.strip(), list(table), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise UsageError(f"--explain {entry_id!r}: no knowledge-base entry with that id{hint} "
                         f"({len(table)} entries under sglwrap/data/compat/)")
    sys.stdout.write(render(entry))
    return 0


def run(opts: PreflightOptions) -> int:
    """Print the table on stdout (on stderr with --json, whose one JSON object owns stdout); exit 0/1/78."""
    from sglwrap import term
    from sglwrap.preflight.render import to_json, to_table

    if opts.explain is not None:
        return explain(opts.explain)
    result, timing = preflight(opts, os.environ)
    stream = sys.stderr if opts.json else sys.stdout
    table = to_table(result, width=min(term.width(stream), 140), verbose=opts.verbose)
    term.report(f"preflight on {result.facts.source}: {result.headline}\n" + table.split("\n", 1)[1], stream)
    if opts.json:
        sys.stdout.write(json.dumps(to_json(result, timing=timing, headline=result.headline),
                                    indent=1, sort_keys=False) + "\n")
    return result.exit_code
