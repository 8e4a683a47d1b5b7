"""sglang-selfcheck's harness: what a failure of the child itself becomes (never a block), the verdict of each
outcome, and when it does not run. The real SGLang run is in test_preflight_model_corpus.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglwrap.host.catalogue import resolve_assume
from sglwrap.preflight import Status, run_preflight
from sglwrap.preflight.sglang_selfcheck import check_sglang_selfcheck, run_child, selfcheck_verdict
from sglwrap.record import replace
from sglwrap.sglang.flags import bundled_table

SPEC = {"argv": ["--model-path", "/nonexistent"], "gpus": 8, "cc": [9, 0], "mem_bytes": 150 * 2**30,
        "gpu_name": "NVIDIA H200", "env": {}}


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    venv = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    return str(venv / "bin" / "python")


def test_an_interpreter_without_sglang_is_a_harness_failure_not_a_block(bare_python: str) -> None:
    res = run_child(bare_python, SPEC, dict(os.environ), timeout=120)
    assert res["ok"] is False and res["kind"] in ("ModuleNotFoundError", "ImportError") and not res["sglang"]
    v = selfcheck_verdict(res, "0.5.23")
    assert v.status is Status.WARN and "could not be run" in v.reason and "generated rules stand in" in v.reason


def test_a_child_past_its_time_box_is_a_warning(bare_python: str) -> None:
    res = run_child(bare_python, SPEC, dict(os.environ), timeout=0.001)
    assert res["ok"] is None and res["kind"] == "timeout"
    assert selfcheck_verdict(res, "0.5.23").status is Status.WARN


def test_verdicts_of_each_outcome() -> None:
    ok = selfcheck_verdict({"ok": True}, "0.5.23", cached=True)
    assert ok.status is Status.PASS and "(cached)" in ok.reason
    refused = {"ok": False, "kind": "ValueError", "message": "tp_size must be divisible by number of nodes",
               "where": "/x/site-packages/sglang/srt/arg_groups/validation_hook.py:180", "sglang": True,
               "stage": "resolve_once"}
    v = selfcheck_verdict(refused, "0.5.23")
    assert v.status is Status.BLOCK and "tp_size must be divisible by number of nodes" in v.reason
    assert "sglang/srt/arg_groups/validation_hook.py:180" in v.reason
    # a device query SGLang raises on a CPU host is the harness's gap, not the user's mistake
    device = dict(refused, kind="RuntimeError", message="No accelerator (CUDA, XPU, ...) is available")
    assert selfcheck_verdict(device, "0.5.23").status is Status.WARN


def test_not_run_for_an_assumed_release_nor_without_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLWRAP_SELFCHECK", "1")
    facts = replace(resolve_assume("8xH200"), packages={"sglang": "0.4.9"})
    r = run_preflight(facts, None, ["--model-path", "Llama-3.1-8B"], flags=bundled_table("0.4.9"),
                      checks=(check_sglang_selfcheck,))
    assert r.checks[0].status is Status.SKIP and "generated rules" in r.checks[0].reason
    # the bundled table of the installed release is not "installed": the selfcheck needs the introspected one
    r = run_preflight(replace(facts, packages={"sglang": "0.5.23"}), None,
                      ["--model-path", "Llama-3.1-8B"], flags=bundled_table("0.5.23"),
                      checks=(check_sglang_selfcheck,))
    assert r.checks[0].status is Status.SKIP


@pytest.mark.real_sglang
def test_off_switch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from sglwrap.sglang.flags import flag_table

    table = flag_table(sys.executable)  # the installed release, introspected (or its cache)
    assert table.source.startswith(("introspected:", "cache:")), table.source
    facts = replace(resolve_assume("8xH200"), packages={"sglang": table.version})
    monkeypatch.setenv("SGLWRAP_SELFCHECK", "0")
    r = run_preflight(facts, None, ["--model-path", "Llama-3.1-8B"], flags=table, checks=(check_sglang_selfcheck,))
    assert r.checks[0].status is Status.SKIP and "SGLWRAP_SELFCHECK=0" in r.checks[0].reason


def test_a_bare_assert_is_shown_by_its_source_line() -> None:
    res = {"ok": False, "kind": "AssertionError", "message": "", "sglang": True, "stage": "resolve_once",
           "where": "/x/sglang/srt/arg_groups/parallel_hook.py:326",
           "line": "assert cfg.tp_size % cfg.dp_size == 0"}
    v = selfcheck_verdict(res, "0.5.23")
    assert v.status is Status.BLOCK and "assert cfg.tp_size % cfg.dp_size == 0" in v.reason


def test_the_kept_result_is_keyed_by_what_can_change_the_verdict() -> None:
    """--port, --host, log options and an API key's value do not change SGLang's verdict; --port beside another
    port (--grpc-port must differ from it), an API key's presence (refused with --grpc-port) and
    --served-model-name (no ':') do (0.5.23 srt/arg_groups/validation_hook.py, serving_hook.py)."""
    from sglwrap.preflight.sglang_selfcheck import verdict_options

    base = {"model_path": "m", "tp_size": 2}
    same = verdict_options({**base, "port": 30001, "host": "0.0.0.0", "log_level": "debug", "api_key": "a"})
    assert same == verdict_options({**base, "port": 30002, "log_requests": True, "api_key": "b"})
    assert same != verdict_options({**base, "port": 30001})  # a key given or not
    assert verdict_options({**base, "port": 1, "grpc_port": 5}) != verdict_options({**base, "port": 5, "grpc_port": 5})
    assert verdict_options({**base, "served_model_name": "a:b"}) != verdict_options({**base, "served_model_name": "a"})


def test_a_kept_result_answers_only_under_the_release_stamps_it_was_kept_with(tmp_path: Path) -> None:
    from sglwrap.preflight.sglang_selfcheck import keep, read_kept, release_stamps

    stamps = release_stamps(sys.executable)
    assert stamps and stamps[0][0] == os.path.realpath(sys.executable)
    env = {"XDG_CACHE_HOME": str(tmp_path)}
    keep("k", stamps, {"ok": True}, env)
    assert read_kept("k", stamps, env) == {"ok": True}
    reinstalled = [[p, size, mtime + 1, ino] for p, size, mtime, ino in stamps]  # a reinstall rewrites the files
    assert read_kept("k", reinstalled, env) is None
