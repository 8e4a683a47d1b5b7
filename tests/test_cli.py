"""The front end: exit codes, help, internal errors, and log format."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sglwrap.cli import main

from .conftest import REPO


def test_no_arguments_prints_help_and_exits_64(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 64
    assert "COMMAND" in capsys.readouterr().err


def test_unknown_verb_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["lanch"])
    assert e.value.code == 64
    assert "invalid choice" in capsys.readouterr().err


def test_own_options_are_never_abbreviated(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["profiles", "list", "--js"])
    assert e.value.code == 64


def test_an_internal_bug_is_one_line_plus_a_crash_log_not_a_traceback(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    import sglwrap.commands.profiles as profiles_cmd

    def boom(args: object) -> int:
        raise KeyError("bug")

    monkeypatch.setattr(profiles_cmd, "run", boom)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    assert main(["profiles", "list"]) == 70
    err = capsys.readouterr().err
    assert "internal error" in err and "Traceback" not in err
    log = Path(err.split("traceback is in ")[1].split(".log")[0] + ".log")
    assert "KeyError" in log.read_text()


def test_logs_are_json_lines_when_stderr_is_not_a_terminal(tmp_path: Path) -> None:
    code = "from sglwrap.log import get_logger; get_logger().info('launch.exec', profile='fewchan')"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    rec = json.loads(proc.stderr.strip())
    assert rec["event"] == "launch.exec" and rec["profile"] == "fewchan" and rec["level"] == "info"
    assert proc.stdout == ""


def test_profiles_list_json_goes_to_stdout_only(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["profiles", "list", "--json"]) == 0
    out = capsys.readouterr()
    names = [p["name"] for p in json.loads(out.out)["profiles"]]
    assert names == ["baseline", "fewchan", "lowgraph", "pcie-ipc", "pcie-ring"]
    assert out.err == ""


@pytest.mark.parametrize("argv", [
    ["launch", "--dry-run", "--assume-stack", "sglang", "--", "--model-path", "m"],
    ["launch", "--dry-run", "--profile"],
    ["memory", "--assume"],
    ["preflight", "--json=yes"],
])
def test_mistakes_found_while_splitting_options_are_one_line_and_exit_64(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 64
    err = capsys.readouterr().err
    assert err.startswith("sglwrap: error: ") and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize(("argv", "meant"), [
    (["launch", "--profle", "fewchan", "--", "--model-path", "m"], "--profile"),
    (["launch", "--dryrun", "--", "--model-path", "m"], "--dry-run"),
    (["memory", "--asume", "2xH200", "--", "--model-path", "m"], "--assume"),
    (["preflight", "--jsn", "--", "--tp-size", "2"], "--json"),
])
def test_a_typo_of_an_own_option_names_the_option_meant(argv: list[str], meant: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 64
    assert f"did you mean sglwrap's {meant}?" in capsys.readouterr().err


def test_no_sglang_flag_is_close_enough_to_be_taken_for_an_own_option_typo() -> None:
    import difflib

    from sglwrap.argsplit import OWN_TYPO_CUTOFF
    from sglwrap.commands import launch, memory, preflight
    from sglwrap.sglang.flags import bundled_table, bundled_versions

    own = set(launch.OWN_OPTIONS) | set(memory.OWN_OPTIONS) | set(preflight.OWN_OPTIONS)
    for version in bundled_versions():
        for flag in bundled_table(version).flags:
            assert not difflib.get_close_matches(flag, own, n=1, cutoff=OWN_TYPO_CUTOFF), (version, flag)


@pytest.mark.parametrize("verb", ["launch", "preflight", "memory", "rehearse", "systemd-unit"])
def test_own_options_are_what_the_verb_parser_accepts(verb: str) -> None:
    """Each drop-in verb's OWN_OPTIONS is its --help parser's options: a switch parses alone and refuses a value,
    an option with a value takes the next word, and the split of sglwrap's options from SGLang's agrees."""
    import argparse
    import importlib

    from sglwrap.argsplit import split_own_args
    from sglwrap.cli import COMMANDS, build_parser

    mod = importlib.import_module(f"sglwrap.commands.{COMMANDS[verb][0]}")
    sub = next(a for a in build_parser([verb])._actions if isinstance(a, argparse._SubParsersAction))
    parser = sub.choices[verb]
    declared = {s for a in parser._actions for s in a.option_strings} - {"-h", "--help"}
    assert set(mod.OWN_OPTIONS) == declared
    assert {"--profile"} <= declared
    for name, takes_value in mod.OWN_OPTIONS.items():
        dest = name[2:].replace("-", "_")
        if takes_value:
            ns = parser.parse_args([name, "3"])
            assert getattr(ns, dest) in ("3", 3, 3.0), name
            own, rest = split_own_args([name, "3", "--tp-size", "2"], mod.OWN_OPTIONS, None, verb)
            assert own == {name: "3"} and rest == ["--tp-size", "2"], name
        else:
            assert getattr(parser.parse_args([name]), dest) is True, name
            with pytest.raises(SystemExit):
                parser.parse_args([f"{name}=x"])
            own, rest = split_own_args([name, "3"], mod.OWN_OPTIONS, None, verb)
            assert own == {name: True} and rest == ["3"], name
