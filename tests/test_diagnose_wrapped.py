"""Memory errors as people paste them: wrapped over lines, quoted, coloured, timestamped; unknown errors named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglwrap.cli import main

HEAD = (
    "[2025-03-08 12:29:13 TP0] Load weight begin. avail mem=78.50 GB\n"
    "[2025-03-08 12:29:40 TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=14.20 GB, "
    "mem usage=64.30 GB.\n"
)


def _run(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> tuple[int, dict]:
    p = tmp_path / "x.log"
    p.write_text(text)
    rc = main(["diagnose", "--json", str(p)])
    return rc, json.loads(capsys.readouterr().out)


NOT_ENOUGH_FORMS = {
    "one-line": "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.\n",
    "wrapped": "RuntimeError: Not enough memory. Please try to increase\n--mem-fraction-static.\n",
    "quoted": "> RuntimeError: Not enough memory. Please try to increase\n> --mem-fraction-static.\n",
    "ansi": "\x1b[31mRuntimeError: Not enough memory. Please try to increase\x1b[0m\n\x1b[31m--mem-fraction-static."
            "\x1b[0m\n",
    "docker-ts": "2025-03-08T12:29:41.123456789Z RuntimeError: Not enough memory. Please try to increase\n"
                 "2025-03-08T12:29:41.123456789Z --mem-fraction-static.\n",
    "rank-tag": "[2025-03-08 12:29:41 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
                "RuntimeError: Not enough memory. Please try to increase\n--mem-fraction-static. Current value: "
                "mem_fraction_static=0.8\n",
    "cut": "RuntimeError: Not enough memory. Please try to increase\n",
}


@pytest.mark.parametrize("form", NOT_ENOUGH_FORMS, ids=list(NOT_ENOUGH_FORMS))
def test_not_enough_memory_in_any_form_is_a_kv_pool_oom(form: str, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    rc, rep = _run(tmp_path, capsys, HEAD + NOT_ENOUGH_FORMS[form])
    assert (rc, rep["outcome"], rep["stage"]) == (1, "oom", "kv_pool")
    assert "not a memory error" not in rep["cause"]
    assert rep["hint"] == "increase --mem-fraction-static"


NO_KV = ("ValueError: Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.55. "
         "Raise --mem-fraction-static above 0.819 (minimum viable = 1 - available/pre = 0.8191).")


@pytest.mark.parametrize("text", [
    NO_KV,
    NO_KV.replace(" under ", "\nunder "),
    NO_KV.replace(" Raise ", "\nRaise "),
    "ValueError: Loaded weights leave no GPU memory for the KV cache",
    "> ValueError: Loaded weights leave no GPU memory for the KV cache\n> under --mem-fraction-static=0.55.",
], ids=["one-line", "wrapped-under", "wrapped-raise", "first-sentence-only", "quoted"])
def test_no_kv_budget_in_any_form_is_a_kv_pool_oom(text: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    rc, rep = _run(tmp_path, capsys, HEAD + text + "\n")
    assert (rc, rep["outcome"], rep["stage"]) == (1, "oom", "kv_pool")
    assert rep["error"].startswith("Loaded weights leave no GPU memory")
    assert "not a memory error" not in rep["cause"]
    # P = 78.50, A = 14.20 from HEAD: SGLang's minimum is 1 - A/P
    assert f"{1 - 14.20 / 78.50:.3f}" in rep["cause"] or rep["fix"].startswith("--mem-fraction-static")
    if "0.55" in text:
        assert rep["mem_fraction_static"] == 0.55 or "0.55" in rep["cause"]


def test_triton_shared_memory_is_named_with_its_numbers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = HEAD + ("[2025-03-08 12:30:00 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
                   "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 147456, "
                   "Hardware limit: 101376. Reducing block sizes or `num_stages` may help.\n")
    rc, rep = _run(tmp_path, capsys, text)
    assert (rc, rep["outcome"]) == (1, "error")
    assert "147456" in rep["cause"] and "101376" in rep["cause"] and "shared memory" in rep["cause"]
    assert "not a memory error" not in rep["cause"] and "OOM killer" not in rep["cause"]


@pytest.mark.parametrize("line, name", [
    ("KeyError: 'rope_scaling'", "KeyError"),
    ("torch.distributed.DistBackendError: NCCL error in: ../init.cpp:12, unhandled system error", "DistBackendError"),
    ("RuntimeError: CUDA error: an illegal memory access was encountered", "RuntimeError"),
    ("[2025-03-08 12:30:00 TP3] CUDA error: device-side assert triggered", "CUDA error"),
    ("AssertionError", "AssertionError"),
    ("my_pkg.ConfigException: bad value", "ConfigException"),
])
def test_unknown_errors_are_reported_as_what_they_are(line: str, name: str, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    rc, rep = _run(tmp_path, capsys, HEAD + line + "\n")
    assert (rc, rep["outcome"]) == (1, "error")
    assert name in rep["cause"]
    if "memory" in line:
        assert "not a memory error" not in rep["cause"]


def test_no_message_that_talks_about_memory_is_called_not_a_memory_error(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    for line in ("RuntimeError: pin memory failed", "ValueError: not enough host memory for the radix cache",
                 "torch.AcceleratorError: CUDA error: an illegal memory access was encountered"):
        _rc, rep = _run(tmp_path, capsys, HEAD + line + "\n")
        assert "not a memory error" not in rep["cause"], line


def test_bench_one_batch_output_is_a_completed_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = HEAD + ("Prefill. latency: 0.03562 s, throughput:  28748.94 token/s\n"
                   "Decode 0. Batch size: 1, latency: 0.00811 s, throughput:    123.31 token/s\n"
                   "Decode.  median latency: 0.00788 s, median throughput:    126.83 token/s\n"
                   "Total. latency:  0.158 s, throughput:   6542.08 token/s\n")
    rc, rep = _run(tmp_path, capsys, text)
    assert (rc, rep["outcome"]) == (0, "ok")
    assert "benchmark" in rep["cause"]


def test_a_new_timestamped_line_is_not_glued_to_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = HEAD + ("RuntimeError: Not enough memory. Please try to increase\n"
                   "[2025-03-08 12:29:42 TP0] Load weight begin. avail mem=78.50 GB\n")
    _rc, rep = _run(tmp_path, capsys, text)
    assert rep["ranks"][0]["avail_before_weights_gib"] == 78.5


def test_no_kv_without_readings_at_a_high_fraction_offers_the_last_step_then_weights(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _rc, rep = _run(tmp_path, capsys, "ValueError: Loaded weights leave no GPU memory for the KV cache under "
                                      "--mem-fraction-static=0.9.\n")
    assert (rep["outcome"], rep["stage"]) == ("oom", "kv_pool")
    assert rep["fix"].startswith("--mem-fraction-static 0.95") and "--tp" in rep["fix"]
    _rc, rep = _run(tmp_path, capsys, "ValueError: Loaded weights leave no GPU memory for the KV cache under "
                                      "--mem-fraction-static=0.6.\n")
    assert rep["fix"].startswith("raise --mem-fraction-static above 0.6")
