"""`sglwrap memory`: the accountant alone — what-if planning, also for a GPU you don't have."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sglwrap import argsplit
from sglwrap.argsplit import refuse_misplaced_own, split_own_args
from sglwrap.errors import ConfigError, UsageError
from sglwrap.record import Record

class MemoryOptions(Record):
    """The parsed command line."""

    sglang_args: tuple[str, ...]
    json: bool = False
    assume: str | None = None
    assume_stack: str | None = None
    profile: str | None = None
    avail_before_weights_gib: float | None = None
    weights_gib: float | None = None
    explain_change: str | None = None
    plot: str | None = None


def add_parser(sub: Any) -> None:
    """Register `memory` (`parse` splits sglwrap's options from SGLang's; this parser serves --help)."""
    p = sub.add_parser("memory", help="predict SGLang's GPU memory budget and OOMs",
                       description="Predict how SGLang will split GPU memory, how many KV tokens fit and whether "
                                   "and where it fails. SGLang's own arguments follow `--` (or are passed through).")
    _add_options(p)


def _add_options(p: argparse.ArgumentParser) -> None:
    """`memory`'s own options (OWN_OPTIONS is read from them) and SGLang's arguments."""
    p.add_argument("--json", action="store_true", help="one JSON object on stdout (the table goes to stderr)")
    p.add_argument("--assume", metavar="HW", help="catalogued GPUs (8xRTX-PRO-6000, 2xH200) or a HostFacts file")
    p.add_argument("--assume-stack", metavar="PKG=VER,...", help="plan for this SGLang version (sglang=0.5.9)")
    p.add_argument("--profile", help="profile whose environment and settings apply (default: $SGLWRAP_PROFILE)")
    p.add_argument("--avail-before-weights-gib", type=float, metavar="X",
                   help="observed 'Load weight begin. avail mem=X GB': replaces the predicted P")
    p.add_argument("--weights-gib", type=float, metavar="Y",
                   help="observed 'Load weight end ... mem usage=Y GB': replaces the predicted W")
    p.add_argument("--explain-change", metavar="PROFILE", help="show how switching to PROFILE moves each term")
    p.add_argument("--plot", metavar="FILE", help="draw the budget as a PNG (needs matplotlib)")
    p.add_argument("sglang_args", nargs=argparse.REMAINDER, help="SGLang's arguments")


# sglwrap's own options (exact names only; none equals an SGLang flag) -> takes a value
OWN_OPTIONS: dict[str, bool] = argsplit.own_options(_add_options)


def _float(own: dict[str, Any], name: str) -> float | None:
    if name not in own:
        return None
    try:
        value = float(own[name])
    except ValueError:
        raise UsageError(f"memory: {name} {own[name]!r}: expected GiB as a number, e.g. 21.63") from None
    if value <= 0:
        raise UsageError(f"memory: {name} {value}: must be positive")
    from sglwrap.bounds import finite_gib

    return finite_gib(f"memory: {name}", value)


def parse(parser: argparse.ArgumentParser, argv: Sequence[str]) -> MemoryOptions:
    """Only sglwrap's exact option names are ours; everything else goes to SGLang unchanged."""
    head = list(argv[1:])
    pre = head[: head.index("--")] if "--" in head else head
    if "-h" in pre or "--help" in pre:
        parser.parse_args(["memory", "--help"])
    own, sglang = split_own_args(head, OWN_OPTIONS, None, "memory")
    refuse_misplaced_own(sglang, OWN_OPTIONS, "memory")
    return MemoryOptions(
        sglang_args=tuple(sglang), json=bool(own.get("--json")), assume=own.get("--assume"),
        assume_stack=own.get("--assume-stack"), profile=own.get("--profile") or os.environ.get("SGLWRAP_PROFILE"),
        avail_before_weights_gib=_float(own, "--avail-before-weights-gib"),
        weights_gib=_float(own, "--weights-gib"), explain_change=own.get("--explain-change"), plot=own.get("--plot"))


def _facts(assume: str | None) -> Any:
    if assume is not None:
        from sglwrap.host.catalogue import resolve_assume

        return resolve_assume(assume)
    try:
        from sglwrap.host.nvml import probe_nvml
    except ImportError:
        probe_nvml = None  # type: ignore[assignment]
    facts = probe_nvml() if probe_nvml is not None else None
    if facts is None or not facts.gpus:
        why = "; ".join(getattr(facts, "notes", ())) or "NVML is not available"
        raise UsageError(f"memory: no GPU to plan for ({why}); pass --assume HW, e.g. --assume 8xH200 "
                         "or --assume host.json")
    return facts


def _cmdline(opts: MemoryOptions) -> tuple[Any, str]:
    """The user's SGLang args read as the target release reads them (64 for what SGLang would refuse), and that
    release's version: its defaults are planned with even when the nearest bundled flag table is another release's."""
    from sglwrap.host.probe import assumed_sglang_version
    from sglwrap.sglang.cmdline import read_cmdline
    from sglwrap.sglang.flags import table_for, target_release

    release = target_release(None, assumed_sglang_version(opts.assume_stack))
    release, cmd = read_cmdline(opts.sglang_args, release, table_for(release), require_model=True)
    return cmd, release.text


def _profile(name: str | None) -> tuple[dict[str, str], dict[str, object]]:
    if not name:
        return {}, {}
    from sglwrap.profiles import load_profile

    p = load_profile(name)
    return {k: v.value for k, v in p.env.items()}, dict(p.sglang)


def run(opts: MemoryOptions) -> int:
    """Plan, render (table on stdout, or on stderr with --json), optionally compare and plot."""
    from sglwrap import term
    from sglwrap.memory import Observed, plan
    from sglwrap.memory.render import compare, render_compare, render_table

    if not opts.sglang_args:
        raise UsageError("memory: pass SGLang's arguments after `--`, e.g. "
                         "sglwrap memory --assume 8xH200 -- --model-path Llama-3.1-8B --tp-size 8")
    if opts.plot and not opts.plot.lower().endswith(".png"):
        raise UsageError(f"memory: --plot {opts.plot}: the plot is a PNG image; name the file *.png")
    if opts.plot:  # checked before planning: a missing plotting library is a usage problem (64), not an OOM
        from sglwrap.plotting import require_matplotlib

        require_matplotlib("memory")
    cmd, version = _cmdline(opts)
    facts = _facts(opts.assume)
    env, sg = _profile(opts.profile)
    observed = Observed(
        None if opts.avail_before_weights_gib is None else int(opts.avail_before_weights_gib * (1 << 30)),
        None if opts.weights_gib is None else int(opts.weights_gib * (1 << 30)))
    result = plan(facts, env, cmd, sglang_version=version, profile_sglang=sg, observed=observed)
    doc = result.to_dict()
    doc["profile"] = opts.profile
    stream = sys.stderr if opts.json else sys.stdout
    term.report(render_table(doc), stream)
    if opts.explain_change:
        env2, sg2 = _profile(opts.explain_change)
        other = plan(facts, env2, cmd, sglang_version=version, profile_sglang=sg2, observed=observed).to_dict()
        doc["explain_change"] = {"profile": opts.explain_change, **compare(doc, other)}
        term.report(render_compare(opts.explain_change, doc["explain_change"]), stream)
    if opts.plot:
        from sglwrap.memory.plot import write_plot

        path = Path(opts.plot)
        if not path.parent.is_dir():
            raise ConfigError(f"--plot {path}: directory {path.parent} does not exist")
        write_plot(doc, path)
    if opts.json:
        sys.stdout.write(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    return result.exit_code
