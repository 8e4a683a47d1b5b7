"""The ``sglwrap`` command: replay a memoized run when its inputs are unchanged, else run the CLI (recording)."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Run sglwrap with ``argv`` (default: sys.argv[1:]) and return the exit code."""
    from sglwrap import runmemo

    args = list(sys.argv[1:] if argv is None else argv)
    code = runmemo.replay(args)
    if code is not None:
        return code
    with runmemo.recording(args) as rec:
        from sglwrap.cli import main as cli_main

        code = cli_main(args)
        runmemo.finish(rec, code)
    return code
