"""One release model: every version goes through ``sglwrap.versions``, the newest known release comes from the
bundled data, every flag spelling from the target release's flag table, and every fix sglwrap prints parses under
the release it is printed for.

The references here are independent of the code under test: the release data files read as plain JSON, and the
package's own source read with ``ast``.
"""

from __future__ import annotations

import ast
import json
import re

import pytest

from sglwrap.cli import main
from sglwrap.errors import SglwrapError
from sglwrap.host.catalogue import resolve_assume
from sglwrap.record import replace
from sglwrap.sglang.cmdline import parse_cmdline
from sglwrap.sglang.flags import bundled_table, release_flag

from .conftest import REPO

PKG = REPO / "sglwrap"
DATA = PKG / "data" / "sglang"
CORPUS = REPO / "tests" / "corpus" / "diagnose"


def _data_versions() -> list[str]:
    """The bundled releases, from the file names (sorted by the numbers in them, independently of versions.py)."""
    def key(v: str) -> tuple[int, ...]:
        head, _, post = v.partition(".post")
        return (*map(int, head.split(".")), int(post or -1))

    return sorted((p.name[len("sglang-"):-len(".json")] for p in DATA.glob("sglang-*.json")), key=key)


def _graph_spelling(version: str) -> str | None:
    """The decode-graph max-bs option of ``version`` read off its data file: the non-deprecated option storing into
    cuda_graph_max_bs(_decode)."""
    raw = json.loads((DATA / f"sglang-{version}.json").read_text())
    for f in raw["flags"]:
        if f["dest"] in ("cuda_graph_max_bs", "cuda_graph_max_bs_decode") and not f.get("new_flag"):
            return str(f["options"][0])
    return None


# --- the rc bug that started this: an ad-hoc parser read 0.5.3rc0 as (0, 5, -1) ----------------------------


def _context_check(version: str, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    main(["preflight", "--json", "--assume", "8xH200", "--assume-stack", f"sglang={version}", "--",
          "--model-path", "Llama-3.1-8B", "--context-length", "1000000"])
    out = json.loads(capsys.readouterr().out)
    return next(c for c in out["checks"] if c["id"] == "context-length")


@pytest.mark.parametrize(("rc", "final", "status"), [("0.5.3rc0", "0.5.3", "block"), ("0.4.6rc1", "0.4.6", "warn"),
                                                      ("0.5.1.post1", "0.5.1", "block")])
def test_a_pre_or_post_release_is_checked_as_its_release(rc: str, final: str, status: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """A release candidate ships its release's code: 0.5.3rc0 refuses a longer --context-length as 0.5.3 does
    (model_config.py; the check was allowed by default only in 0.4.6-0.4.10)."""
    assert _context_check(final, capsys)["status"] == status
    assert _context_check(rc, capsys)["status"] == status


# --- the --cuda-graph-max-bs rename comes from the release tables ----------------------------------------


def test_graph_flag_is_the_spelling_each_release_parses() -> None:
    seen = {}
    for v in _data_versions():
        want = _graph_spelling(v)
        if want is None:
            continue
        assert release_flag("cuda_graph_max_bs", v) == want, v
        seen[v] = want
    # what the data says about the rename: -decode from 0.5.14, the plain spelling until 0.5.13
    assert seen["0.5.13"] == "--cuda-graph-max-bs" and seen["0.5.14"] == "--cuda-graph-max-bs-decode"
    assert seen["0.5.21"] == "--cuda-graph-max-bs-decode"


@pytest.mark.parametrize("version", ["0.5.10", "0.5.12", "0.5.13", "0.5.14", "0.5.20", "0.5.22", "0.5.23"])
def test_diagnose_names_the_graph_flag_of_the_logs_release(version: str) -> None:
    from sglwrap.diagnose.cause import graph_flag

    flag = graph_flag((), version)
    assert flag == _graph_spelling(version)
    parse_cmdline(["--model-path", "m", flag, "64"], bundled_table(version))  # SGLang's parser takes it


@pytest.mark.parametrize("version", ["0.5.20", "0.5.21", "0.5.22"])
def test_the_graph_fix_spelling_parses_where_the_plain_flag_is_refused(version: str) -> None:
    """0.5.20-0.5.22 have only -decode/-prefill: the plain spelling is an ambiguous prefix there (SGLang exits 2),
    so a fix tried with it was dropped by the fix search; the spelling from the release's table parses."""
    from sglwrap.errors import UsageError

    table = bundled_table(version)
    with pytest.raises(UsageError):
        parse_cmdline(["--model-path", "m", "--cuda-graph-max-bs", "64"], table)
    cmd = parse_cmdline(["--model-path", "m"], table)
    assert cmd.with_args([release_flag("cuda_graph_max_bs", version), "64"]).get("cuda_graph_max_bs_decode") == 64


@pytest.mark.parametrize("version", ["0.5.12", "0.5.21"])
def test_memory_offers_graph_fixes_on_every_release(version: str) -> None:
    """The fallback advice names the release's own graph flag; on 0.5.20-0.5.22 the plain spelling is an
    ambiguous prefix there, which used to drop every graph-size fix without a word."""
    from sglwrap.memory import Observed, plan

    flag = _graph_spelling(version)
    assert flag is not None
    p = plan(resolve_assume("1xH100"), {}, ["--model-path", "Llama-3.1-8B", "--mem-fraction-static", "0.99",
                                            flag, "1024"],
             sglang_version=version, observed=Observed(70 << 30, 16 << 30))
    assert p.verdict == "graph_oom_risk"
    other = {"--cuda-graph-max-bs", "--cuda-graph-max-bs-decode"} - {flag}
    assert not any(o + " " in (p.result.fix or "") for o in other)


# --- every fix printed parses under the release it is printed for -----------------------------------------

# sglwrap's own options that fixes may name (they are not SGLang's)
OWN = {"--assume", "--assume-stack", "--profile", "--model-path-override", "--avail-before-weights-gib",
       "--weights-gib", "--deep", "--json"}
FLAG_RE = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*[a-z0-9])(?:[ =](-?\d+(?:\.\d+)?|[a-z][a-z0-9_]*))?")


def _takes(flag: str, table) -> bool:  # type: ignore[no-untyped-def]
    """Whether SGLang's parser (argparse, allow_abbrev=True) binds ``flag``: exactly, or as the prefix of one option."""
    return flag in table.flags or len([o for o in table.flags if o.startswith(flag)]) == 1


def _assert_fix_parses(fix: str, version: str, base: list[str], where: str) -> None:
    table = bundled_table(version)
    for flag, value in FLAG_RE.findall(fix):
        if flag in OWN:
            continue
        assert _takes(flag, table), f"{where}: SGLang {version}'s parser refuses {flag} (fix: {fix})"
        if value and value[0].isdigit() or value.startswith("-"):
            parse_cmdline([*base, flag, value], table)


RELEASES = ["0.4.6", "0.4.9", "0.5.2", "0.5.9", "0.5.12", "0.5.14", "0.5.21", "0.5.23"]
MEMORY_CASES = [("1xH100", ["--model-path", "Llama-3.1-8B", "--mem-fraction-static", "0.99"]),
                ("1xL4", ["--model-path", "Qwen3-8B", "--mem-fraction-static", "0.60"]),
                ("2xH100", ["--model-path", "Llama-3.1-70B", "--mem-fraction-static", "0.80"])]


@pytest.mark.parametrize("version", RELEASES)
def test_memory_fixes_parse_under_their_release(version: str) -> None:
    from sglwrap.memory import Observed, plan

    for spec, argv in MEMORY_CASES:
        for observed in (None, Observed(70 << 30, 16 << 30)):
            try:
                p = plan(resolve_assume(spec), {}, argv, sglang_version=version, observed=observed)
            except SglwrapError:
                continue
            if p.result.fix:
                _assert_fix_parses(p.result.fix, version, argv, f"memory {spec} {argv}")


PREFLIGHT_CASES = [["--model-path", "Llama-3.1-8B", "--context-length", "1000000"],
                   ["--model-path", "Llama-3.1-8B", "--tp-size", "3"],
                   ["--model-path", "Llama-3.1-8B", "--mem-fraction-static", "0.99"],
                   ["--model-path", "Llama-3.1-70B", "--tp-size", "1", "--mem-fraction-static", "0.9"],
                   ["--model-path", "DeepSeek-V3", "--tp-size", "8", "--enable-dp-attention", "--dp-size", "3"],
                   ["--model-path", "Qwen3-8B", "--speculative-algorithm", "EAGLE"]]


@pytest.mark.parametrize("version", RELEASES)
def test_preflight_fixes_parse_under_their_release(version: str) -> None:
    from sglwrap.preflight import run_preflight

    facts = replace(resolve_assume("8xH200"), packages={"sglang": version})
    table = bundled_table(version)
    for argv in PREFLIGHT_CASES:
        try:
            parse_cmdline(argv, table)
        except SglwrapError:
            continue  # a flag this release does not have: nothing to check a fix against
        r = run_preflight(facts, None, argv, flags=table)
        for v in r.checks:
            if v.fix:
                _assert_fix_parses(v.fix, version, argv, f"preflight {v.id} {argv}")


def test_diagnose_fixes_parse_under_the_logs_release(capsys: pytest.CaptureFixture[str]) -> None:
    """Each corpus log's fix, against the newest release whose messages match the log (the logs name none)."""
    checked = 0
    for log in sorted(CORPUS.glob("*.log")):
        main(["diagnose", "--json", str(log)])
        rep = json.loads(capsys.readouterr().out)
        span = rep.get("sglang_release_range")
        version = rep.get("sglang_version") or (span[-1] if span else None)
        if not rep.get("fix") or version is None:
            continue
        _assert_fix_parses(str(rep["fix"]), str(version), ["--model-path", "m"], f"diagnose {log.name}")
        checked += 1
    assert checked >= 3


# --- the source itself: no second parser, no copied newest release ---------------------------------------

# maintainer scripts run in the target interpreter with the standard library only (no packaging there)
STDLIB_ONLY = {"sglang/generate.py"}
ADHOC = [re.compile(r"int\(\w+\)(?: if \w+\.isdigit\(\) else -?\d+)? for \w+ in [^\n]*split\((?:r?\"\[?\.|\"\.\")"),
         re.compile(r"\.split\(\"\+\"\)\[0\]\.split\(\"\.\"\)")]


def _modules() -> list[tuple[str, ast.Module, str]]:
    out = []
    for p in sorted(PKG.rglob("*.py")):
        rel = p.relative_to(PKG).as_posix()
        if rel.startswith("data/") or rel == "versions.py" or rel in STDLIB_ONLY:
            continue
        text = p.read_text()
        out.append((rel, ast.parse(text), text))
    return out


def _docstrings(tree: ast.Module) -> set[int]:
    ids = set()
    for n in ast.walk(tree):
        if isinstance(n, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and n.body:
            first = n.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def test_versions_are_parsed_only_by_sglwrap_versions() -> None:
    bad = []
    for rel, tree, text in _modules():
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom) and n.module == "packaging.version":
                bad.append(f"{rel}:{n.lineno} imports packaging.version (use sglwrap.versions)")
            if isinstance(n, ast.Compare) and any(isinstance(o, ast.Lt | ast.LtE | ast.Gt | ast.GtE) for o in n.ops):
                for side in (n.left, *n.comparators):
                    if (isinstance(side, ast.Tuple) and len(side.elts) >= 2
                            and all(isinstance(e, ast.Constant) and type(e.value) is int for e in side.elts)
                            and "version_info" not in ast.unparse(n)):
                        bad.append(f"{rel}:{n.lineno} compares with a version tuple: {ast.unparse(n)}")
        for i, line in enumerate(text.splitlines(), 1):
            if any(p.search(line) for p in ADHOC):
                bad.append(f"{rel}:{i} parses a version by hand: {line.strip()}")
    assert not bad, "\n".join(bad)


def test_the_newest_release_is_never_written_in_code() -> None:
    """The newest bundled release appears in code only as the floor of a feature gate (``at_least(v, "X")``):
    "the newest" itself is ``sglwrap.versions.newest_known()``."""
    newest = _data_versions()[-1]
    bad = []
    for rel, tree, _ in _modules():
        if rel.startswith("sglang/rules/"):
            continue  # each rules module is one release range transcribed, cited line by line
        docs = _docstrings(tree)
        gate_args = {id(a) for n in ast.walk(tree) if isinstance(n, ast.Call)
                     and (getattr(n.func, "id", None) or getattr(n.func, "attr", None)) in ("at_least", "before")
                     for a in n.args[1:]}
        for n in ast.walk(tree):
            if (isinstance(n, ast.Constant) and n.value == newest and id(n) not in docs
                    and id(n) not in gate_args):
                bad.append(f"{rel}:{n.lineno}")
            if isinstance(n, ast.Tuple) and [getattr(e, "value", None) for e in n.elts] == \
                    [int(x) for x in newest.split(".")]:
                bad.append(f"{rel}:{n.lineno} (as a tuple)")
    assert not bad, f"the newest release {newest} written in code: {bad}"


def test_newest_known_is_the_newest_data_file() -> None:
    from sglwrap.versions import newest_known
    from sglwrap.memory.defaults import NEWEST_RULES

    assert newest_known() == _data_versions()[-1] == NEWEST_RULES
