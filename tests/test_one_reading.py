"""preflight and launch --dry-run read SGLang's args with the same reader: every spelling SGLang accepts gives the
same answer in both, and what SGLang would refuse is refused by both with the same usage error."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from sglwrap.cli import main

from .conftest import REPO

MODEL = str(REPO / "sglwrap" / "data" / "models" / "Llama-3.1-8B")
SPELLINGS = [["--tp-size", "4"], ["--tp", "4"], ["--tensor-parallel", "4"], ["--tensor-parallel-size", "4"],
             ["--tp-size=4"], ["--tp=4"], ["--tensor-parallel-size=4"]]


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("spelling", SPELLINGS, ids=lambda s: "".join(s))
def test_every_tp_spelling_needs_four_gpus_in_both_verbs(spelling: list[str]) -> None:
    rc, out, _ = _run(["preflight", "--json", "--assume", "2xH200", "--", "--model-path", MODEL, *spelling])
    gpu = next(c for c in json.loads(out)["checks"] if c["id"] == "gpu-count")
    assert rc == 78 and gpu["status"] == "block" and "needs 4 GPU" in gpu["reason"]
    rc, _, err = _run(["launch", "--dry-run", "--assume", "2xH200", "--", "--model-path", MODEL, *spelling])
    assert rc == 78 and "needs 4 GPU" in err


def test_a_config_file_spelling_counts_too(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = tmp_path / "serve.yaml"
    cfg.write_text(f"model-path: {MODEL}\ntensor-parallel-size: 4\n")
    rc, out, _ = _run(["preflight", "--json", "--assume", "2xH200", "--", "--config", str(cfg)])
    assert rc == 78 and any(c["id"] == "gpu-count" and c["status"] == "block" for c in json.loads(out)["checks"])
    rc, _, err = _run(["launch", "--dry-run", "--assume", "2xH200", "--", "--config", str(cfg)])
    assert rc == 78 and "needs 4 GPU" in err


@pytest.mark.parametrize("bad", [["--port", "abc"], ["--mem-fraction-static", "85%"], ["--kv-cache-dtype", "bogus"],
                                 ["--cuda-graph-max-bs", "8"], ["--no-such-flag"]])
def test_what_sglang_refuses_is_the_same_usage_error_everywhere(bad: list[str]) -> None:
    errors = set()
    for verb in (["preflight", "--assume", "2xH200"], ["launch", "--dry-run", "--assume", "2xH200"],
                 ["memory", "--assume", "2xH200"]):
        rc, _, err = _run([*verb, "--", "--model-path", MODEL, *bad])
        assert rc == 64, (verb, err)
        errors.add(err.strip().splitlines()[-1])
    assert len(errors) == 1, errors
    assert bad[0] in errors.pop()


_OPENED: dict[str, int] = {}


def _count_opens(event: str, args: tuple[object, ...]) -> None:
    if event == "open" and isinstance(args[0], str) and args[0] in _OPENED:
        _OPENED[args[0]] += 1


def test_the_models_config_is_read_once_per_preflight(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The checks, the release rules, the knowledge base and the accountant share one reading of config.json."""
    import shutil
    import sys

    model = tmp_path / "m"
    shutil.copytree(MODEL, model)
    config = str(model / "config.json")
    _OPENED[config] = 0
    if _count_opens not in getattr(sys, "_sglwrap_test_hooks", ()):
        sys.addaudithook(_count_opens)  # audit hooks cannot be removed; this one only counts the path above
        sys._sglwrap_test_hooks = (_count_opens,)  # type: ignore[attr-defined]
    try:
        rc, out, _ = _run(["preflight", "--json", "--assume", "8xH200", "--", "--model-path", str(model),
                           "--tp-size", "2"])
        assert rc == 0 and json.loads(out)["verdict"] == "ok"
        assert _OPENED[config] == 1
    finally:
        del _OPENED[config]
