"""``sglwrap rehearse [--profile P] [--json] [--timeout S] [--layers N] [--force] -- <sglang args>``: the launch
plan run once with dummy weights on this machine, one request, a clean stop, diagnose's verdict (sglwrap.rehearse).

The plan is `launch`'s own (``commands.launch.plan_for``): same profile, preflight, injector, environment, argv and
interpreter. ``rehearse`` always runs and records its verdict; ``launch --rehearse`` is the one that skips a
fingerprint that passed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

from sglwrap import argsplit
from sglwrap.errors import EXIT_INTERRUPTED, UsageError
from sglwrap.record import Record

class RehearseOptions(Record):
    """The parsed command line of ``sglwrap rehearse``."""

    profile: str
    sglang_args: tuple[str, ...]
    json: bool = False
    timeout_s: float | None = None
    layers: int | None = None
    force: bool = False
    assume: str | None = None
    assume_stack: str | None = None


def add_parser(sub: Any) -> None:
    """Register ``rehearse`` (``parse`` splits the options; this parser serves --help)."""
    p = sub.add_parser(
        "rehearse", help="run the launch once with dummy weights: one request, clean stop, diagnose's verdict",
        description="Run exactly what `sglwrap launch` would run (profile, injector, environment, argv, "
                    "interpreter) with --load-format dummy added, on this machine's GPUs, listening on a private "
                    "127.0.0.1 port; wait for /health 200, send one short /generate, stop SGLang and everything it "
                    "started, and report passed, or the stage, cause and fix `diagnose` reads from its log. "
                    "Every option sglwrap does not own is SGLang's (with or without `--`).")
    _add_options(p)


def _add_options(p: argparse.ArgumentParser) -> None:
    """`rehearse`'s own options (OWN_OPTIONS is read from them) and SGLang's arguments."""
    p.add_argument("--profile", help="profile name or file (default: $SGLWRAP_PROFILE, else baseline)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.add_argument("--timeout", metavar="S", help="seconds until a rehearsal that has not answered is killed and "
                                                  "reported as a hang (default: sized from the model, printed)")
    p.add_argument("--layers", metavar="N", help="build the model with N layers (SGLang's "
                                                 "--json-model-override-args): faster, but its memory numbers no "
                                                 "longer hold for the real model")
    p.add_argument("--force", action="store_true", help="rehearse even where preflight blocks (to see whether "
                                                        "SGLang really fails)")
    p.add_argument("--assume", metavar="HW", help="refused: a rehearsal runs on this machine's GPUs")
    p.add_argument("--assume-stack", metavar="PKG=VER,...", help="only the installed SGLang can be rehearsed")
    p.add_argument("sglang_args", nargs=argparse.REMAINDER, help="SGLang's arguments")


# sglwrap's own options here: name -> takes a value. None of them equals an SGLang flag (tested).
OWN_OPTIONS: dict[str, bool] = argsplit.own_options(_add_options)


def parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> RehearseOptions:
    """Only sglwrap's exact option names are ours; values of SGLang's options are skipped with its flag table."""
    from sglwrap.commands.launch import _table

    head = list(argv[1:])
    if argsplit.wants_help(head):
        parser.parse_args(["rehearse", "--help"])
    own, _ = argsplit.split_own_args(head, OWN_OPTIONS, None, "rehearse")
    if own.get("--assume") is not None:
        raise UsageError(f"rehearse: --assume {own['--assume']} plans for GPUs that are not here, and a rehearsal "
                         "runs SGLang on this machine's GPUs; drop --assume (`sglwrap launch --dry-run --assume` "
                         "plans for other GPUs)")
    table = _table(own.get("--assume-stack"))[1]
    own, sglang_args = argsplit.split_own_args(head, OWN_OPTIONS, table, "rehearse")
    argsplit.refuse_misplaced_own(sglang_args, OWN_OPTIONS, "rehearse")
    return RehearseOptions(
        profile=own.get("--profile") or os.environ.get("SGLWRAP_PROFILE") or "baseline",
        sglang_args=tuple(sglang_args), json=bool(own.get("--json")),
        timeout_s=_number("--timeout", own.get("--timeout"), float), layers=_number("--layers", own.get("--layers"), int),
        force=bool(own.get("--force")), assume_stack=own.get("--assume-stack"))


def _number(flag: str, raw: str | None, kind: type) -> Any:
    if raw is None:
        return None
    try:
        value = kind(raw)
    except ValueError:
        value = None
    if value is None or not value > 0 or value == float("inf"):
        what = "seconds > 0, e.g. 900" if kind is float else "a whole number of layers >= 1, e.g. 2"
        raise UsageError(f"rehearse: {flag} {raw!r}: expected {what}")
    return value


def run(opts: RehearseOptions) -> int:
    """Plan as `launch` plans, rehearse, print the verdict; 0 passed, 78 failed or cannot rehearse here."""
    from sglwrap import launch as L
    from sglwrap import term
    from sglwrap.commands.launch import plan_for
    from sglwrap.rehearse import report
    from sglwrap.rehearse.run import Interrupted
    from sglwrap.rehearse.session import rehearse_plan

    environ = dict(os.environ)
    L.require_user_args(opts.sglang_args)
    lopts = L.LaunchOptions(profile=opts.profile, sglang_args=opts.sglang_args, assume_stack=opts.assume_stack,
                            force=opts.force)
    from sglwrap.rehearse.plan import refuse_early

    planned = plan_for(lopts, environ, check=refuse_early)
    for w in (*planned.plan.warnings, *planned.notes):
        term.note(f"sglwrap: note: {w}")
    try:
        outcome = rehearse_plan(planned.plan, planned.cmd, environ, assume=opts.assume, layers=opts.layers,
                                timeout_s=opts.timeout_s, progress=lambda t: term.note(f"sglwrap: rehearse: {t}"))
    except Interrupted as e:
        term.note(f"sglwrap: rehearse: interrupted ({e}); SGLang and everything it started were killed")
        return EXIT_INTERRUPTED
    if opts.json:
        sys.stdout.write(json.dumps(outcome.doc) + "\n")
    else:
        term.report(report.to_text(outcome.doc))
    return outcome.exit_code
