"""Split sglwrap's own options from SGLang's on one command line (launch, preflight, memory share the rule).

Only sglwrap's exact option names are its own (no abbreviations). Everything else goes to SGLang unchanged, with or
without ``--``; given SGLang's flag table, the values of SGLang options are skipped, so a value that happens to
look like one of sglwrap's options (``--served-model-name --json``) stays SGLang's.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sglwrap.errors import UsageError

if TYPE_CHECKING:
    from sglwrap.sglang.flags import FlagTable

OWN_TYPO_CUTOFF = 0.85  # difflib ratio above which an unknown option is taken for a typo of sglwrap's own
GLOBAL_OPTIONS = {"--color": True}  # sglwrap's own, before the verb only (sglwrap.cli)


def parser_options(parser: argparse.ArgumentParser) -> dict[str, bool]:
    """The options ``parser`` declares, ``-h``/``--help`` aside: name -> takes a value (argparse's nargs != 0)."""
    return {name: action.nargs != 0 for action in parser._actions
            if not isinstance(action, argparse._HelpAction) for name in action.option_strings}


def own_options(add_options: Callable[[argparse.ArgumentParser], None]) -> dict[str, bool]:
    """A verb's own options, read from the options ``add_options`` gives its argparse parser (the one list: the
    drop-in split and ``--help`` cannot disagree)."""
    from sglwrap.sglang.cmdline import SilentParser  # the list is read, never printed

    parser = SilentParser(add_help=False)
    add_options(parser)
    return parser_options(parser)


def split_own_args(argv: Sequence[str], own_options: Mapping[str, bool], table: FlagTable | None,
                   verb: str) -> tuple[dict[str, Any], list[str]]:
    """``(own, sglang_args)``: ``own`` maps each given own option to its value (True for a switch)."""
    own: dict[str, Any] = {}
    rest: list[str] = []
    if "--" in argv:
        cut = list(argv).index("--")
        head, tail = list(argv[:cut]), list(argv[cut + 1:])
    else:
        head, tail = list(argv), []
    i = 0
    while i < len(head):
        tok = head[i]
        name, eq, inline = tok.partition("=")
        i += 1
        if name in own_options:
            if not own_options[name]:
                if eq:
                    raise UsageError(f"{verb}: {name} takes no value")
                own[name] = True
                continue
            if eq:
                value = inline
            elif i < len(head):
                value = head[i]
                i += 1
            else:
                raise UsageError(f"{verb}: {name} needs a value")
            if name in own and own[name] != value:
                raise UsageError(f"{verb}: {name} given twice ({own[name]!r} and {value!r}); give it once")
            own[name] = value
            continue
        if name in GLOBAL_OPTIONS and (table is None or name not in table.flags):
            shown = " ".join([name, head[i]] if GLOBAL_OPTIONS[name] and not eq and i < len(head) else [tok])
            raise UsageError(f"{verb}: {name} is a global option of sglwrap: put it before the verb, "
                             f"e.g. sglwrap {shown} {verb} ...")
        _refuse_own_typo(name, own_options, table, verb)
        rest.append(tok)
        if table is not None and tok.startswith("--") and not eq:
            i = _skip_values(head, i, table.flags.get(tok), rest)
    return own, rest + tail


def _refuse_own_typo(name: str, own_options: Mapping[str, bool], table: FlagTable | None, verb: str) -> None:
    """A near miss of one of sglwrap's own options (``--profle``) is that typo, not an SGLang flag: say so, rather
    than letting SGLang's parser report an unknown option of its own. No SGLang flag of the bundled versions is
    this close to an sglwrap option (checked in the tests)."""
    if not name.startswith("--") or table is not None and name in table.flags:
        return
    import difflib

    close = difflib.get_close_matches(name, list(own_options), n=1, cutoff=OWN_TYPO_CUTOFF)
    if close:
        raise UsageError(f"{verb}: unknown option {name}; did you mean sglwrap's {close[0]}?")
    # a truncation of one own option (--prof) that is no SGLang flag's start: sglwrap takes no abbreviations
    longer = [o for o in own_options if o.startswith(name) and len(name) >= 5]
    sglang_too = table is not None and any(f.startswith(name) for f in table.flags)
    if len(longer) == 1 and not sglang_too:
        raise UsageError(f"{verb}: unknown option {name}; did you mean sglwrap's {longer[0]}? (sglwrap's own "
                         "options are never abbreviated)")


def _skip_values(head: list[str], i: int, info: Any, rest: list[str]) -> int:
    """Copy the values of SGLang option ``info`` (starting at ``head[i]``) into ``rest``; return the next index."""
    n = info.nargs if info is not None else 0
    if n in ("*", "+"):
        while i < len(head) and not head[i].startswith("--"):
            rest.append(head[i])
            i += 1
        return i
    take = 1 if n in (1, "?") else (int(n) if isinstance(n, int) else 0)
    for _ in range(take):
        if i < len(head) and (n != "?" or not head[i].startswith("--")):
            rest.append(head[i])
            i += 1
    return i


def wants_help(argv: Sequence[str]) -> bool:
    """``-h``/``--help`` among the options before ``--``."""
    pre = list(argv[: list(argv).index("--")]) if "--" in argv else list(argv)
    return "-h" in pre or "--help" in pre


def refuse_misplaced_own(sglang_args: Sequence[str], own_options: Mapping[str, bool], verb: str) -> None:
    """One of sglwrap's own options among SGLang's arguments can only have come after ``--`` (before it, it is
    taken as sglwrap's), and SGLang has none of them (tested): say where it belongs instead of letting SGLang's
    parser guess a "did you mean" among its own flags."""
    for tok in sglang_args:
        name = tok.split("=", 1)[0]
        if name in own_options:
            raise UsageError(f"{verb}: {name} comes after `--`, where every argument is SGLang's, and SGLang has no "
                             f"{name}; put sglwrap's {name} before `--`")
