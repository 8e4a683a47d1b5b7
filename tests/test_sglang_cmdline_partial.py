"""A parser built for the tokens it will read (``build_parser(table, reading=...)``) reads them exactly as a parser
holding every option of the release: checked against a reference that adds all of a table's options and lets
argparse refuse the conflicting ones, on every bundled release, on every command line of the corpus and on the
forms argparse treats specially (abbreviations, ambiguous prefixes, ``=`` values, ``--no-`` switches, values that look
like options, unknown options)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
import yaml

from sglwrap.sglang import cmdline as C
from sglwrap.sglang.flags import FlagTable, bundled_table, bundled_versions

CORPUS = Path(__file__).parent / "corpus" / "preflight"


def _reference(table: FlagTable) -> argparse.ArgumentParser:
    """Every option of ``table`` offered to argparse, which refuses the conflicting ones itself."""
    p = C._Parser(prog="sglang serve", add_help=False, allow_abbrev=True)
    for info in table.unique():
        if info.action == "_HelpAction" or info.dest == "help":
            continue
        options = C._option_strings(info)
        try:
            p.add_argument(*options, **C._arguments(info, table))
        except (argparse.ArgumentError, ValueError, TypeError):
            continue
    return p


def _outcome(parser: argparse.ArgumentParser, argv: list[str]) -> tuple[Any, ...]:
    try:
        ns, extras = parser.parse_known_args(argv)
    except C._ParseError as e:
        return ("error", str(e))
    return ("ok", sorted(vars(ns).items(), key=lambda kv: kv[0]), extras)


@pytest.mark.parametrize("version", bundled_versions())
def test_the_whole_parser_registers_what_argparse_accepts(version: str) -> None:
    table = bundled_table(version)
    assert set(C.build_parser(table)._option_string_actions) == set(_reference(table)._option_string_actions)


def _corpus_argvs() -> list[tuple[str, list[str]]]:
    out = []
    for path in sorted(CORPUS.glob("*.yaml")):
        case = yaml.safe_load(path.read_text())
        flags = [str(f) for f in case.get("flags") or []]
        if flags:
            out.append((str((case.get("stack") or {}).get("sglang", "")), flags))
    return out


SPECIAL = [
    ["--tp", "2"], ["--tp-size=2", "--mem-frac", "0.8"], ["--model", "m"], ["--enable-dp-att", "--dp", "2"],
    ["--port=3000", "--host", "0.0.0.0"], ["--chunked-prefill-size", "-1"], ["--served-model-name", "--json"],
    ["--no-enable-custom-all-reduce"], ["--foo", "--model-path", "m"], ["-x", "3"], ["-tp", "2"], ["--", "--tp", "2"],
    ["--model-path", "m", "--json-model-override-args", "{\"a\": 1}"], ["--mem", "0.5"], ["--cuda-graph-max-bs", "8"],
    ["--disable-radix"], ["--enable-metrics", "--enable-metrics"], ["--tp-size"], ["--tp-size", "two"],
    ["--attention-backend", "nope"], ["--lora-paths", "a", "b", "--max-loras-per-batch", "2"],
]


@pytest.mark.parametrize("version", ["0.3.0", "0.4.6", "0.5.10", "0.5.23"])
def test_partial_parser_reads_like_the_whole_one(version: str) -> None:
    if version not in bundled_versions():
        pytest.skip(f"{version} is not bundled")
    table = bundled_table(version)
    whole = _reference(table)
    argvs = [flags for _, flags in _corpus_argvs()] + SPECIAL
    for argv in argvs:
        assert _outcome(C.build_parser(table, reading=argv), argv) == _outcome(whole, argv), argv


def test_corpus_lines_under_their_own_release() -> None:
    known = set(bundled_versions())
    checked = 0
    for version, argv in _corpus_argvs():
        if version not in known:
            continue
        table = bundled_table(version)
        assert _outcome(C.build_parser(table, reading=argv), argv) == _outcome(_reference(table), argv), argv
        checked += 1
    assert checked > 50


def test_partial_parser_holds_only_what_the_tokens_can_reach() -> None:
    table = bundled_table("0.5.23")
    few = C.build_parser(table, reading=["--tp-size", "2", "--model-path", "m"])
    whole = C.build_parser(table)
    assert "--tp-size" in few._option_string_actions and "--port" not in few._option_string_actions
    assert len(few._actions) < len(whole._actions) // 10
