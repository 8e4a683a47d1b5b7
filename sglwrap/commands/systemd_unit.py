"""``sglwrap systemd-unit [--profile NAME] [--notify] [--] <sglang args>``: print a unit file on stdout.

Like ``launch``, every option that is not one of sglwrap's own below is SGLang's, with or without ``--``
(``sglwrap systemd-unit --model-path M --tp-size 8``). Warnings (secrets moved to the env file, an interpreter
without SGLang) go to stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any

from sglwrap import argsplit
from sglwrap.errors import UsageError
from sglwrap.record import Record

class UnitOptions(Record):
    """The parsed command line of ``sglwrap systemd-unit``."""

    profile: str | None
    sglang_args: tuple[str, ...]
    notify: bool = False
    watchdog_sec: int | None = None
    sglwrap_bin: str | None = None
    description: str | None = None
    rehearse: bool = False


def add_parser(sub: Any) -> None:
    """Register the ``systemd-unit`` verb (``parse`` splits the options; this parser serves --help)."""
    p = sub.add_parser(
        "systemd-unit", help="print a systemd unit that runs sglwrap as a drop-in",
        description="Print a systemd service unit whose ExecStart runs `sglwrap launch` with these SGLang arguments "
                    "(with or without `--`). Without --profile the unit has none: SGLWRAP_PROFILE in "
                    "/etc/sglwrap/NAME.env chooses. Secret flags (--api-key, --admin-api-key, ...) are read from "
                    "that env file, never written into the unit. The profile and the arguments are checked now, "
                    "not at boot.")
    _add_options(p)


def _add_options(p: argparse.ArgumentParser) -> None:
    """`systemd-unit`'s own options (OWN_OPTIONS is read from them) and SGLang's arguments."""
    p.add_argument("--profile", help="profile name or file to write into ExecStart (default: none; the env file's "
                                     "SGLWRAP_PROFILE, else baseline, at each start)")
    p.add_argument("--notify", action="store_true",
                   help="Type=notify: sglwrap supervises SGLang and reports ready when /health answers 200")
    p.add_argument("--watchdog-sec", type=int, metavar="S",
                   help="with --notify: WatchdogSec=S (sglwrap pings while /health answers)")
    p.add_argument("--sglwrap-bin", metavar="PATH", help="absolute path of sglwrap for ExecStart (default: found)")
    p.add_argument("--description", help="the unit's Description=")
    p.add_argument("--rehearse", action="store_true",
                   help="ExecStart runs `launch --rehearse`: the plan runs once with dummy weights before the real "
                        "load (skipped when its fingerprint passed before); TimeoutStartSec allows for it")
    p.add_argument("sglang_args", nargs=argparse.REMAINDER, help="SGLang's arguments (with or without --)")


# sglwrap's own options here: name -> takes a value. None equals an SGLang flag (checked in the tests).
OWN_OPTIONS: dict[str, bool] = argsplit.own_options(_add_options)


def parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> UnitOptions:
    """sglwrap's exact option names are ours; everything else is SGLang's (the CLI calls this, not parse_args)."""
    from sglwrap.argsplit import refuse_misplaced_own, split_own_args, wants_help

    head = list(argv[1:])
    if wants_help(head):
        parser.parse_args(["systemd-unit", "--help"])
    split_own_args(head, OWN_OPTIONS, None, "systemd-unit")  # a typo of ours is reported before any slow step
    from sglwrap.sglang.flags import flag_table

    # with SGLang's flag table, a value that looks like our option (--served-model-name --notify) stays SGLang's
    own, sglang_args = split_own_args(head, OWN_OPTIONS, flag_table(), "systemd-unit")
    refuse_misplaced_own(sglang_args, OWN_OPTIONS, "systemd-unit")
    watchdog = own.get("--watchdog-sec")
    if watchdog is not None:
        try:
            watchdog = int(watchdog)
        except ValueError:
            raise UsageError(f"systemd-unit: --watchdog-sec {watchdog!r}: expected whole seconds, e.g. 120") from None
    return UnitOptions(profile=own.get("--profile"), sglang_args=tuple(sglang_args), notify=bool(own.get("--notify")),
                       watchdog_sec=watchdog, sglwrap_bin=own.get("--sglwrap-bin"),
                       description=own.get("--description"), rehearse=bool(own.get("--rehearse")))


def _check_sglang_args(args: Sequence[str], notify: bool) -> list[str]:
    """Refuse what SGLang would refuse (64) and, with --notify, an endpoint sglwrap cannot poll; SGLang's flags."""
    from sglwrap import supervise
    from sglwrap.sglang.cmdline import parse_cmdline
    from sglwrap.sglang.flags import flag_table

    table = flag_table()
    cmd = parse_cmdline(args, table)
    if notify:
        supervise.endpoint_from_args(cmd)  # --grpc-mode or a bad --port: refused now
    return list(table.flags)


def run(opts: UnitOptions) -> int:
    """Check the profile and the SGLang arguments, then print the unit (warnings on stderr)."""
    from sglwrap import systemd_unit as U
    from sglwrap import term
    from sglwrap.profiles import load_profile

    sglang_args = list(opts.sglang_args)
    if not sglang_args:
        raise UsageError("systemd-unit: no SGLang arguments given; e.g. sglwrap systemd-unit --profile fewchan "
                         "--model-path M --tp-size 8")
    if opts.watchdog_sec is not None and (not opts.notify or opts.watchdog_sec <= 0):
        raise UsageError("systemd-unit: --watchdog-sec needs --notify and a number of seconds > 0")
    # the profile a start would use today: a bad one fails here with exit 78, not at the next boot
    load_profile(opts.profile or os.environ.get("SGLWRAP_PROFILE") or "baseline")
    known = _check_sglang_args(sglang_args, opts.notify)  # unknown or ambiguous SGLang flags: exit 64 now
    unit_args, secrets = U.move_secrets(sglang_args, known)
    command, env = U.sglwrap_command(opts.sglwrap_bin)
    spec = U.UnitSpec(profile=opts.profile, sglang_args=unit_args, command=command, notify=opts.notify,
                      watchdog_sec=opts.watchdog_sec, description=opts.description, environment=env,
                      rehearse=opts.rehearse)
    invocation = ["sglwrap", "systemd-unit", *(["--profile", opts.profile] if opts.profile else []),
                  *(["--notify"] if opts.notify else []), *(["--rehearse"] if opts.rehearse else []),
                  *(["--watchdog-sec", str(opts.watchdog_sec)] if opts.watchdog_sec is not None else []),
                  *(["--sglwrap-bin", opts.sglwrap_bin] if opts.sglwrap_bin else []),
                  *(["--description", opts.description] if opts.description is not None else []),
                  "--", *U.redact(unit_args)]
    sys.stdout.write(U.render_unit(spec, invocation=invocation))
    sys.stdout.flush()
    for s in secrets:
        term.note(f"sglwrap: {s.flag} is not in the unit (unit files are world-readable): put {s.variable}=<the "
                  f"value you gave> in /etc/sglwrap/NAME.env (chmod 600); ExecStart passes ${{{s.variable}}}")
    for w in U.interpreter_warnings(command, env):
        term.note(f"sglwrap: warning: {w}")
    return 0
