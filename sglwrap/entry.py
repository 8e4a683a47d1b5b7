"""The ``sglwrap`` command: the CLI, imported only once the command runs."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """Run sglwrap with ``argv`` (default: sys.argv[1:]) and return the exit code."""
    from sglwrap.cli import main as cli_main

    return cli_main(list(sys.argv[1:] if argv is None else argv))
