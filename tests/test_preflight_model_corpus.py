"""The model checks' corpus (tests/corpus/preflight/m*.yaml) held to the issue's bar, and the issue's examples.

``tests/test_preflight_corpus.py`` runs every case through the CLI (it reads the ``m*`` schema too); here each
failure must be blocked *by the check it names* (status block, not merely present), at least 90% of them, and no
working setup may be blocked by any check. The examples of the issue run against the installed SGLang 0.5.23, and
SGLang's own checks run for real once (a cold child of the installed release, then a cache hit).
"""

from __future__ import annotations

import io
import json
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import requires_sglang
from tests.test_preflight_corpus import bare_python, corpus_env, run_case  # noqa: F401 - fixtures and the runner

CORPUS = Path(__file__).resolve().parent / "corpus" / "preflight"
FAILURES = sorted(p for p in CORPUS.glob("m*.yaml") if yaml.safe_load(p.read_text())["kind"] == "failure")
WORKING = sorted(p for p in CORPUS.glob("m*.yaml") if yaml.safe_load(p.read_text())["kind"] == "working")
MODEL_CHECKS = {"model-arch", "model-quant", "model-parallel", "context-length", "speculative", "sglang-selfcheck",
                "python-deps"}


def by_id(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in result["checks"]}


def test_corpus_has_cases_of_each_kind() -> None:
    assert len(FAILURES) >= 6 and len(WORKING) >= 4
    for p in FAILURES + WORKING:
        doc = yaml.safe_load(p.read_text())
        assert doc["source"].startswith("https://github.com/"), p.name
        assert doc.get("date_checked") and doc.get("gpus") and doc.get("stack") and doc.get("flags"), p.name
    for p in FAILURES:
        doc = yaml.safe_load(p.read_text())
        assert doc.get("error") and doc.get("fix") and doc["expect"]["check"], p.name


@pytest.mark.usefixtures("corpus_env")
def test_failures_are_blocked_by_the_named_check(monkeypatch: pytest.MonkeyPatch) -> None:
    hits, misses = [], []
    for p in FAILURES:
        doc = yaml.safe_load(p.read_text())
        code, result, _ = run_case(doc, monkeypatch)
        named = by_id(result).get(doc["expect"]["check"])
        if result["verdict"] == "blocked" and code == 78 and named and named["status"] == "block":
            hits.append(p.stem)
        else:
            misses.append(f"{p.stem}: {named}")
    assert len(hits) / len(FAILURES) >= 0.9, misses


@pytest.mark.usefixtures("corpus_env")
def test_working_setups_are_not_blocked(monkeypatch: pytest.MonkeyPatch) -> None:
    for p in WORKING:
        doc = yaml.safe_load(p.read_text())
        _, result, _ = run_case(doc, monkeypatch)
        blocks = [c for c in result["checks"] if c["status"] == "block"]
        assert result["verdict"] != "blocked", (p.stem, blocks)
        mine = {c["id"]: c["status"] for c in result["checks"] if c["id"] in MODEL_CHECKS}
        assert mine.get("model-arch") == "pass", (p.stem, mine)  # every working model is registered by its release


@pytest.mark.usefixtures("corpus_env")
def test_the_block_names_the_first_release_that_registers_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    doc = yaml.safe_load((CORPUS / "m002_nemotron-super-49b_decilm-arch.yaml").read_text())
    _, result, _ = run_case(doc, monkeypatch)
    arch = by_id(result)["model-arch"]
    bundled = json.loads((Path(__file__).resolve().parents[1] / "sglwrap" / "data" / "sglang" /
                          "sglang-0.5.1.json").read_text())
    assert "DeciLMForCausalLM" in bundled["architectures"]  # the release data the block is read from
    assert "first in 0.5.1" in arch["reason"] and ">= 0.5.1" in arch["fix"]


def preflight(*argv: str) -> tuple[int, dict[str, Any], str]:
    from sglwrap.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(["preflight", "--json", *argv])
    return code, json.loads(out.getvalue()), err.getvalue()


@requires_sglang
def test_issue_example_tp6_on_llama_8b_blocks_with_the_cited_rule() -> None:
    code, result, _ = preflight("--assume", "8xH200", "--", "--model-path", "Llama-3.1-8B", "--tp-size", "6")
    v = by_id(result)["model-parallel"]
    assert code == 78 and v["status"] == "block"
    assert "32 attention heads" in v["reason"] and "total_num_heads % tp_size == 0" in v["reason"]
    assert "srt/models/llama.py:183" in v["reason"] and "1, 2, 4, 8" in v["fix"]


@requires_sglang
def test_issue_example_context_length_blocks_with_sglangs_words() -> None:
    code, result, _ = preflight("--assume", "8xH200", "--", "--model-path", "Llama-3.1-8B", "--context-length",
                                "1000000")
    v = by_id(result)["context-length"]
    assert code == 78 and v["status"] == "block"
    assert "User-specified context_length (1000000) is greater than the derived context_length (131072)" in v["reason"]


@requires_sglang
def test_sglangs_own_checks_run_for_real_then_from_the_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plain preflight does not start the child; --deep does, and its child of the installed SGLang raises
    ModelConfig's ValueError; a later plain run reads the kept result, also with another --port."""
    monkeypatch.setenv("SGLWRAP_SELFCHECK", "1")
    argv = ("--assume", "8xH200", "--", "--model-path", "Llama-3.1-8B", "--context-length", "1000000")
    code, result, err = preflight(*argv)
    assert by_id(result)["sglang-selfcheck"]["status"] == "skip" and "running SGLang" not in err
    assert "--deep" in by_id(result)["sglang-selfcheck"]["reason"]
    code, result, err = preflight("--deep", *argv)
    v = by_id(result)["sglang-selfcheck"]
    assert code == 78 and v["status"] == "block", v
    # SGLang's own message, raised by its own code (not sglwrap's copy of it)
    assert "User-specified context_length (1000000) is greater than the derived context_length (131072)" in v["reason"]
    assert "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1" in v["reason"] and "model_config.py" in v["reason"]
    assert "running SGLang" in err
    t0 = time.monotonic()
    _, again, err2 = preflight(*argv, "--port", "31234", "--log-level", "debug")
    w = by_id(again)["sglang-selfcheck"]
    assert w["status"] == "block" and "(cached)" in w["reason"] and "running SGLang" not in err2
    assert time.monotonic() - t0 < 30  # no SGLang import on a cache hit
    # the env override SGLang reads reaches the child: with it, SGLang accepts the command line
    monkeypatch.setenv("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", "1")
    _, allowed, _ = preflight("--deep", *argv)
    assert by_id(allowed)["sglang-selfcheck"]["status"] == "pass"
    # a changed option that can change the verdict is a new key: not answered from the kept result
    _, other, _ = preflight(*argv[:-1], "900000")
    assert by_id(other)["sglang-selfcheck"]["status"] == "skip"


@requires_sglang
def test_launch_is_gated_by_the_model_checks(capsys: pytest.CaptureFixture[str]) -> None:
    from sglwrap.cli import main

    code = main(["launch", "--dry-run", "--assume", "8xH200", "--", "--model-path", "Llama-3.1-8B", "--tp-size", "6"])
    err = capsys.readouterr().err
    assert code == 78 and "model-parallel" in err and "32 attention heads" in err and "nothing was started" in err
