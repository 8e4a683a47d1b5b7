"""Small things an operator trips on: a truncated sglwrap option, a global option after the verb, an option or
stack key given twice, a version that is not one, a GPU name with its memory size, an empty --assume or a missing
HostFacts file, the systemd unit's user, bench-comm without torch, --plot without matplotlib, preflight's table."""

from __future__ import annotations

import builtins
import re
from pathlib import Path

import pytest

from sglwrap.cli import main
from sglwrap.errors import EXIT_CONFIG, EXIT_USAGE

from .conftest import REPO

MODEL = str(REPO / "sglwrap" / "data" / "models" / "Llama-3.1-8B")


def _err(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str]:
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = int(e.code or 0)
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("verb", ["launch", "preflight", "memory"])
def test_a_truncated_own_option_suggests_the_full_one(verb: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = _err(capsys, [verb, "--prof", "fewchan", "--assume", "8xH100", "--", "--model-path", MODEL])
    assert rc == EXIT_USAGE and "--profile" in err and "--port" not in err


@pytest.mark.parametrize("verb", ["launch", "preflight", "memory"])
def test_a_global_option_after_the_verb_says_where_it_goes(verb: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = _err(capsys, [verb, "--color", "never", "--assume", "8xH100", "--", "--model-path", MODEL])
    assert rc == EXIT_USAGE and f"sglwrap --color never {verb}" in err


@pytest.mark.parametrize("argv, words", [
    (["--profile", "fewchan", "--profile", "baseline"], "--profile"),
    (["--assume-stack", "torch=2.9.1,torch=2.8.0"], "torch"),
])
def test_an_option_or_stack_key_given_twice_is_refused(argv: list[str], words: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = _err(capsys, ["preflight", *argv, "--assume", "8xH100", "--", "--model-path", MODEL])
    assert rc == EXIT_USAGE and words in err and "twice" in err


@pytest.mark.parametrize("item", ["torch=2.x", "driver=abc", "flashinfer-python=latest", "sglang=0.5.x"])
def test_a_stack_version_that_is_not_one_is_refused(item: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = _err(capsys, ["preflight", "--assume-stack", item, "--assume", "8xH100", "--", "--model-path", MODEL])
    assert rc == EXIT_USAGE and "not a version" in err


@pytest.mark.parametrize("name, want", [("H100-80GB", "H100"), ("A100-80GB", "A100-80G"), ("H200-141GB", "H200"),
                                        ("RTX-4090-24GB", "RTX-4090")])
def test_a_gpu_name_with_its_memory_suggests_the_family(name: str, want: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    rc, err = _err(capsys, ["preflight", "--assume", f"8x{name}", "--", "--model-path", MODEL])
    assert rc == EXIT_USAGE and f"Did you mean '{want}'" in err


@pytest.mark.parametrize("verb", ["preflight", "memory", "launch"])
@pytest.mark.parametrize("assume", ["", " ", "/no/such/host.json", "host-missing.json"])
def test_an_empty_assume_or_a_missing_file_is_a_usage_error_like_a_bad_name(
        verb: str, assume: str, capsys: pytest.CaptureFixture[str]) -> None:
    dry = ["--dry-run"] if verb == "launch" else []
    rc_bad, _ = _err(capsys, [verb, *dry, "--assume", "8xNOPE", "--", "--model-path", MODEL])
    rc, err = _err(capsys, [verb, *dry, "--assume", assume, "--", "--model-path", MODEL])
    assert rc == rc_bad == EXIT_USAGE and "--assume" in err


def test_the_unit_header_regenerates_the_unit_exactly_and_it_says_who_runs_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    import shlex

    argv = ["systemd-unit", "--profile", "fewchan", "--notify", "--watchdog-sec", "120", "--sglwrap-bin",
            "/bin/true", "--description", "Llama 8B, 100% of the box", "--", "--model-path", MODEL,
            "--api-key", "s3cret"]
    assert main(argv) == 0
    unit = capsys.readouterr().out
    assert re.search(r"^User=", unit, re.M) or re.search(r"^# .*User=", unit, re.M)
    header = unit.splitlines()[0]
    again = shlex.split(header.split(": ", 1)[1])
    assert again[0] == "sglwrap"
    assert main(again[1:]) == 0
    assert capsys.readouterr().out == unit


def test_bench_comm_without_torch_exits_78_before_measuring(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    import subprocess
    import sys

    venv = tmp_path / "bare"
    subprocess.run([getattr(sys, "_base_executable", sys.executable), "-m", "venv", "--without-pip", str(venv)],
                   check=True, capture_output=True, timeout=120)
    rc, err = _err(capsys, ["bench-comm", "--backend", "gloo", "--python", str(venv / "bin" / "python"),
                            "--sizes", "4K", "--no-progress"])
    assert rc == EXIT_CONFIG and "torch" in err
    assert "baseline" not in err  # nothing was started


@pytest.mark.parametrize("argv", [
    ["memory", "--plot", "m.png", "--assume", "8xH100", "--", "--model-path", MODEL],
    ["bench-comm", "--backend", "gloo", "--plot", "b.png", "--sizes", "4K", "--no-progress"],
    ["diagnose", "--plot", "d.png", str(REPO / "README.md")],
])
def test_plot_without_matplotlib_is_a_usage_error_in_every_verb(argv: list[str], monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    real = builtins.__import__

    def no_matplotlib(name: str, *a: object, **k: object) -> object:
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(name)
        return real(name, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    rc, err = _err(capsys, argv)
    assert rc == EXIT_USAGE and "matplotlib" in err


def test_preflight_folds_skipped_checks_into_one_line_unless_verbose(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["preflight", "--assume", "8xH100", "--", "--model-path", MODEL, "--tp-size", "8"]
    assert main(argv) in (0, 1)
    short = capsys.readouterr().out.splitlines()
    rows = [ln for ln in short if re.match(r"^[a-z][a-z0-9-]+ +(PASS|WARN|DOWN|BLOCK|skip) ", ln)]
    assert rows and not any(re.match(r"^\S+ +skip ", ln) for ln in rows)
    folded = [ln for ln in short if ln.startswith("skipped")]
    assert len(folded) == 1 and "host-shm" in folded[0] and "--verbose" in folded[0]
    assert main(["preflight", "--verbose", *argv[1:]]) in (0, 1)
    full = capsys.readouterr().out.splitlines()
    assert any(re.match(r"^host-shm +skip ", ln) for ln in full)


def test_preflight_speaks_without_internal_document_names(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--assume", "8xH100", "--profile", "pcie-ring", "--", "--model-path", MODEL, "--tp-size", "8"],
                 ["--assume", "2xRTX-4090", "--", "--model-path", MODEL, "--tp-size", "2"]):
        assert main(["preflight", "--verbose", *argv]) in (0, 1, 78)
        out = capsys.readouterr().out
        assert "profile-fit" in out and "host-shm" in out
        assert not re.search(r"docs/|\.md\b|DESIGN|research-|failure-classes", out), out
