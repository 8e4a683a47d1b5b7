"""The argparse front end: parse, call one command module, map errors to exit codes. Nothing else."""

from __future__ import annotations

import argparse
import gc
import importlib
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from sglwrap import __version__
from sglwrap.commands import COMMANDS
from sglwrap.errors import EXIT_INTERRUPTED, EXIT_SOFTWARE, EXIT_USAGE, SglwrapError, exit_codes_text


class _Parser(argparse.ArgumentParser):
    """No abbreviations (so SGLang's --json-model-override-args never binds to --json); usage errors exit 64."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(EXIT_USAGE)


def _load(verb: str) -> ModuleType | None:
    module, _help = COMMANDS[verb]
    collecting = gc.isenabled()
    # Importing a command's modules builds thousands of long-lived objects (classes, tables) and little garbage: the
    # collector would walk them again and again for nothing. Pause it, then freeze what was built (never walked again).
    gc.disable()
    try:
        return importlib.import_module(f"sglwrap.commands.{module}")
    except ModuleNotFoundError as e:
        if e.name == f"sglwrap.commands.{module}":
            return None  # verb not built yet
        raise
    finally:
        if collecting:
            gc.freeze()
            gc.enable()


def build_parser(verbs: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The top-level parser; only the named verbs' modules are imported (all when None)."""
    parser = _Parser(prog="sglwrap", description="A launcher for SGLang servers.")
    parser.add_argument("--version", action="version", version=f"sglwrap {__version__}")
    parser.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                        help="colour in reports: auto (on a terminal, unless NO_COLOR is set), always, never")
    sub = parser.add_subparsers(dest="verb", metavar="COMMAND", parser_class=_Parser)
    for verb in COMMANDS if verbs is None else verbs:
        mod = _load(verb)
        if mod is None:
            continue
        mod.add_parser(sub)
        verb_parser = sub.choices.get(verb)
        if verb_parser is not None:  # the verb's rows of the one exit-code table (sglwrap.errors)
            verb_parser.epilog = exit_codes_text(verb)
            verb_parser.formatter_class = argparse.RawDescriptionHelpFormatter
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run sglwrap with ``argv`` (default: sys.argv[1:]) and return the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    argv, color = _global_options(argv)
    if color is not None:
        from sglwrap.term import COLOR_MODES, set_color_mode

        if color not in COLOR_MODES:
            sys.stderr.write(f"sglwrap: error: --color {color!r}: expected one of {', '.join(COLOR_MODES)}\n")
            return EXIT_USAGE
        set_color_mode(color)
    verb = argv[0] if argv and argv[0] in COMMANDS else None
    if verb is None:
        parser = build_parser(None)
        if not argv:
            parser.print_help(sys.stderr)
            return EXIT_USAGE
        parser.parse_args(argv)  # prints --help/--version or a usage error
        return EXIT_USAGE
    mod = _load(verb)
    if mod is None:
        sys.stderr.write(f"sglwrap: {verb!r} is not available in this version\n")
        return EXIT_USAGE
    try:
        # A verb's own parse (launch, preflight, memory split their options from SGLang's) can already find a
        # user's mistake, so it runs under the same error handling as the command.
        verb_parser: Any = _LazyParser(lambda: build_parser([verb]))  # built only for --help or a usage error
        args = mod.parse(verb_parser, argv) if hasattr(mod, "parse") else verb_parser.parse_args(argv)
        return int(mod.run(args))
    except SglwrapError as e:
        sys.stderr.write(f"sglwrap: error: {e.message}\n")
        return e.exit_code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0
    except Exception:  # a bug in sglwrap, not the user's mistake: say so and where the details are
        path = _write_crash_log()
        sys.stderr.write(
            f"sglwrap: internal error ({sys.exc_info()[1]!r}); the traceback is in {path}. "
            "Please report it with that file.\n"
        )
        return EXIT_SOFTWARE


class _LazyParser:
    """The argparse parser, built on first use: verbs that split their own options only need it for --help."""

    def __init__(self, build: Callable[[], argparse.ArgumentParser]) -> None:
        self._build = build
        self._parser: argparse.ArgumentParser | None = None

    def __getattr__(self, name: str) -> Any:
        if self._parser is None:
            self._parser = self._build()
        return getattr(self._parser, name)


def _global_options(argv: list[str]) -> tuple[list[str], str | None]:
    """Take ``--color WHEN`` / ``--color=WHEN`` from before the verb; returns the rest and the value (or None)."""
    color: str | None = None
    while argv and (argv[0] == "--color" or argv[0].startswith("--color=")):
        if argv[0] == "--color":
            if len(argv) < 2:
                return argv, None  # argparse reports the missing value
            color, argv = argv[1], argv[2:]
        else:
            color, argv = argv[0].split("=", 1)[1], argv[1:]
    return argv, color


def _write_crash_log() -> str:
    import os
    import tempfile
    import traceback

    fd, path = tempfile.mkstemp(prefix="sglwrap-crash-", suffix=".log")
    with os.fdopen(fd, "w") as fh:
        fh.write(f"sglwrap {__version__} python {sys.version}\nargv: {sys.argv!r}\n\n")
        fh.write(traceback.format_exc())
    return path
