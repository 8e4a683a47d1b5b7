"""``sglwrap diagnose LOG... [--json] [--plot FILE]``: explain an SGLang launch from its logs."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from sglwrap.errors import SglwrapError

EXIT_UNREADABLE = 2


def add_parser(subparsers: Any) -> None:
    """Register the ``diagnose`` verb."""
    p = subparsers.add_parser(
        "diagnose",
        help="read SGLang logs and explain what happened",
        description="Read SGLang server logs (any version; files, '-' for stdin, .gz, journalctl exports) and "
        "launch manifests; print the per-rank memory timeline, the outcome, the real cause and the fix. "
        "Files of different launches are reported as separate runs, in command-line order ({\"runs\": [...]} "
        "with --json). Exit 0 when the server came up, 1 when it did not, 2 when no input could be read (with "
        "several inputs, one that is missing, empty or binary is skipped with a warning).",
    )
    p.add_argument("logs", nargs="+", metavar="LOG", help="log file, '-' for stdin, or an sglwrap launch manifest")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--plot", metavar="FILE", type=Path, help="write a PNG of free memory per rank and stage")
    p.add_argument("--model-path", metavar="DIR|NAME", dest="model_path",
                   help="the model's config for the memory re-plan when the log's model_path is not on this machine")


def run(args: argparse.Namespace) -> int:
    """Diagnose ``args.logs``; print, plot, and return 0/1 (2 via SglwrapError for unreadable input)."""
    from sglwrap.diagnose import diagnose_runs
    from sglwrap.diagnose.render import to_json, to_text

    if args.logs.count("-") > 1:
        raise SglwrapError("'-' (stdin) can be given only once", exit_code=EXIT_UNREADABLE)
    if args.plot is not None and args.plot.suffix.lower() != ".png":
        from sglwrap.errors import UsageError

        raise UsageError(f"diagnose: --plot {args.plot}: the plot is a PNG image; name the file *.png")
    if args.plot is not None:
        from sglwrap.plotting import require_matplotlib

        require_matplotlib("diagnose")
    reports = diagnose_runs(args.logs)
    from sglwrap import term
    from sglwrap.diagnose import fixcheck
    from sglwrap.diagnose.replan import describe, replan

    skipped = reports[0].skipped if reports else ()
    for path, why in skipped:
        term.note(f"diagnose: warning: skipped {path}: {why}")
    docs, texts = [], []
    for i, report in enumerate(reports):
        accountant = replan(report, model_path=args.model_path)
        checked = fixcheck.check(report, model_path=args.model_path)  # the fix is printed only if it re-plans fit
        report = fixcheck.apply(report, checked)
        if args.json:
            doc = json.loads(to_json(report))
            doc["accountant"] = accountant
            doc["fix_check"] = checked
            if len(reports) > 1:
                doc["run"], doc["label"] = i + 1, report.label
                del doc["skipped_inputs"]  # said once, beside the runs
            docs.append(doc)
        else:
            head = ""
            if len(reports) > 1:
                head = f"== run {i + 1} of {len(reports)}: {report.label or 'stdin'} ==\n"
            notes = describe(accountant) + fixcheck.describe(checked)
            texts.append(head + to_text(report) + "\n".join(notes) + "\n")
    if args.plot is not None:
        from sglwrap.diagnose.plot import write_plot

        written = write_plot(reports, args.plot)
        term.note(f"diagnose: plot written to {', '.join(str(p) for p in written)}")
    code = 0 if all(r.exit_code == 0 for r in reports) else 1
    if args.json:
        from sglwrap.diagnose.render import SCHEMA_VERSION

        out = docs[0] if len(docs) == 1 else {"schema_version": SCHEMA_VERSION, "command": "diagnose",
                                               "exit_code": code, "runs": docs,
                                               "skipped_inputs": [{"file": p, "why": w} for p, w in skipped]}
        sys.stdout.write(json.dumps(out) + "\n")
    else:
        term.report("\n".join(texts))  # wrapped to the terminal, status words coloured there
    return code
