"""``sglwrap systemd-unit --profile NAME [--notify] -- <sglang args>``: print a unit file on stdout."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from sglwrap.errors import UsageError


def add_parser(sub: Any) -> None:
    """Register the ``systemd-unit`` verb."""
    p = sub.add_parser(
        "systemd-unit", help="print a systemd unit that runs sglwrap as a drop-in",
        description="Print a systemd service unit whose ExecStart runs `sglwrap launch` with this profile and "
                    "these SGLang arguments. The profile and the arguments are checked now, not at boot.")
    p.add_argument("--profile", help="profile name or file (default: $SGLWRAP_PROFILE, else baseline)")
    p.add_argument("--notify", action="store_true",
                   help="Type=notify: sglwrap supervises SGLang and reports ready when /health answers 200")
    p.add_argument("--watchdog-sec", type=int, metavar="S",
                   help="with --notify: WatchdogSec=S (sglwrap pings while /health answers)")
    p.add_argument("--sglwrap-bin", metavar="PATH", help="absolute path of sglwrap for ExecStart (default: found)")
    p.add_argument("--description", help="the unit's Description=")
    p.add_argument("sglang_args", nargs=argparse.REMAINDER, help="SGLang's arguments, after --")


def run(args: argparse.Namespace) -> int:
    """Check the profile and the SGLang arguments, then print the unit."""
    from sglwrap import systemd_unit as U
    from sglwrap.profiles import load_profile
    from sglwrap.sglang_args import flag_table, parse_user_args

    sglang_args = list(args.sglang_args)
    if sglang_args[:1] == ["--"]:
        sglang_args = sglang_args[1:]
    if not sglang_args:
        raise UsageError("systemd-unit: no SGLang arguments given; e.g. sglwrap systemd-unit --profile fewchan "
                         "-- --model-path M --tp 8")
    if args.watchdog_sec is not None and (not args.notify or args.watchdog_sec <= 0):
        raise UsageError("systemd-unit: --watchdog-sec needs --notify and a number of seconds > 0")
    profile = args.profile or os.environ.get("SGLWRAP_PROFILE") or "baseline"
    load_profile(profile)  # a bad profile fails here with exit 78, not at the next boot
    parse_user_args(sglang_args, flag_table())  # unknown or ambiguous SGLang flags: exit 64 now
    if args.notify:
        from sglwrap.supervise import endpoint_from_args

        endpoint_from_args(sglang_args, flag_table())  # --grpc-mode or a bad --port: refused now
    command, env = U.sglwrap_command(args.sglwrap_bin)
    spec = U.UnitSpec(profile=profile, sglang_args=tuple(sglang_args), command=command, notify=args.notify,
                      watchdog_sec=args.watchdog_sec, description=args.description, environment=env)
    invocation = ["sglwrap", "systemd-unit", "--profile", profile, *(["--notify"] if args.notify else []),
                  "--", *sglang_args]
    sys.stdout.write(U.render_unit(spec, invocation=invocation))
    return 0
