"""`sglwrap systemd-unit`: the unit's keys, systemd's own verifier, and ExecStart quoting that round-trips."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sglwrap.cli import main
from sglwrap.systemd_unit import UnitSpec, exec_start, quote_word, render_unit

from .conftest import REPO, have

MODEL = REPO / "sglwrap" / "data" / "models" / "Llama-3.1-8B"
ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "s": " ", "a": "\a", "b": "\b",
           "f": "\f", "v": "\v"}


def parse_unit(text: str) -> dict[str, list[tuple[str, str]]]:
    """Sections -> (key, value) in order; systemd allows repeated keys, so no configparser."""
    out: dict[str, list[tuple[str, str]]] = {}
    section = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            out.setdefault(section, [])
            continue
        assert section is not None, f"key outside a section: {line}"
        key, sep, value = line.partition("=")
        assert sep, f"not a key=value line: {line}"
        out[section].append((key.strip(), value.strip()))
    return out


def one(unit: dict[str, list[tuple[str, str]]], section: str, key: str) -> str:
    vals = [v for k, v in unit[section] if k == key]
    assert len(vals) == 1, f"{section}.{key}: {vals}"
    return vals[0]


def systemd_words(value: str) -> list[str]:
    """ExecStart= as systemd reads it: %-specifiers, then quotes and C escapes, then $$ (systemd.service(5))."""
    assert "%" not in value.replace("%%", ""), "an unescaped % would be a specifier"
    value = value.replace("%%", "%")
    words: list[str] = []
    cur: list[str] | None = None
    quote = None
    i = 0
    while i < len(value):
        ch = value[i]
        if ch == "\\":
            nxt = value[i + 1]
            if nxt == "x":
                cur = (cur or []) + [chr(int(value[i + 2:i + 4], 16))]
                i += 4
                continue
            cur = (cur or []) + [ESCAPES[nxt]]
            i += 2
            continue
        if quote:
            if ch == quote:
                quote = None
            else:
                cur = (cur or []) + [ch]
        elif ch in "\"'":
            quote = ch
            cur = cur or []
        elif ch in " \t":
            if cur is not None:
                words.append("".join(cur))
            cur = None
        else:
            cur = (cur or []) + [ch]
        i += 1
    assert quote is None, "unbalanced quotes"
    if cur is not None:
        words.append("".join(cur))
    return [w.replace("$$", "$") for w in words]


def unit_text(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    rc = main(["systemd-unit", *argv])
    out = capsys.readouterr()
    assert rc == 0, out.err
    return out.out


def verify(tmp_path: Path, text: str, name: str = "sglang-test.service") -> None:
    if not have("systemd-analyze"):
        pytest.skip("systemd-analyze is not installed (apt-get install systemd); the keys were checked by parsing")
    path = tmp_path / name
    path.write_text(text)
    res = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "sglang-test.service" not in res.stderr, res.stderr  # no warnings about our unit either


COMMON = {"KillMode": "mixed", "Restart": "on-failure", "EnvironmentFile": "-/etc/sglwrap/%N.env",
          "RuntimeDirectory": "sglwrap/%N", "RuntimeDirectoryMode": "0700", "TimeoutStartSec": "45min"}


@pytest.mark.parametrize("notify", [False, True], ids=["exec", "notify"])
def test_unit_has_the_production_keys_and_passes_systemd_verify(capsys: pytest.CaptureFixture[str],
                                                                tmp_path: Path, notify: bool) -> None:
    text = unit_text(capsys, "--profile", "fewchan", *(["--notify"] if notify else []), "--",
                     "--model-path", str(MODEL), "--tp-size", "2")
    unit = parse_unit(text)
    for key, want in COMMON.items():
        assert one(unit, "Service", key) == want
    assert {"2", "64", "78"} <= set(one(unit, "Service", "RestartPreventExitStatus").split())
    assert one(unit, "Service", "Type") == ("notify" if notify else "exec")
    notify_access = [v for k, v in unit["Service"] if k == "NotifyAccess"]
    assert notify_access == (["main"] if notify else [])
    words = systemd_words(one(unit, "Service", "ExecStart"))
    exe = words[0]
    assert os.path.isabs(exe) and os.access(exe, os.X_OK)
    launch = words.index("launch")
    assert words[launch:launch + 3] == ["launch", "--profile", "fewchan"]
    assert ("--notify" in words) == notify
    assert words[words.index("--") + 1:] == ["--model-path", str(MODEL), "--tp-size", "2"]
    if notify:
        grace = [v for k, v in unit["Service"] if k == "Environment" and "SGLWRAP_STOP_GRACE" in v]
        assert grace and int(grace[0].strip('"').split("=")[1]) < int(one(unit, "Service", "TimeoutStopSec"))
    verify(tmp_path, text)


def test_awkward_arguments_survive_systemds_parser(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    nasty = ["--model-path", "/models/my model", "--served-model-name", 'a%b$c"d\'e', "--chat-template",
             "tab\there\\back;", "--served-model-name", ";", "--json-model-override-args", '{"rope_scaling": null}',
             "--tokenizer-path", ""]
    text = unit_text(capsys, "--profile", "baseline", "--", *nasty)
    words = systemd_words(one(parse_unit(text), "Service", "ExecStart"))
    assert words[words.index("--") + 1:] == nasty
    verify(tmp_path, text)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"),
                        max_size=12), max_size=5))
def test_exec_start_quoting_round_trips(args: list[str]) -> None:
    spec = UnitSpec(profile="p", sglang_args=tuple(args), command=("/usr/bin/sglwrap",))
    assert systemd_words(exec_start(spec)) == ["/usr/bin/sglwrap", "launch", "--profile", "p", "--", *args]


def test_quote_word_leaves_plain_words_bare_and_quotes_the_rest() -> None:
    assert quote_word("--tp-size") == "--tp-size"
    assert quote_word("") == '""'
    assert quote_word(";") == '";"'
    assert quote_word("50%") == "50%%"
    assert quote_word("a b") == '"a b"'


def test_the_units_command_line_really_runs_sglwrap(capsys: pytest.CaptureFixture[str]) -> None:
    """Run ExecStart's words as systemd would (plus --dry-run --json): the args must reach SGLang's argv intact."""
    args = ["--model-path", str(MODEL), "--served-model-name", "my model $HOME 100%", "--tp-size", "2"]
    text = unit_text(capsys, "--profile", "fewchan", "--notify", "--", *args)
    unit = parse_unit(text)
    words = systemd_words(one(unit, "Service", "ExecStart"))
    env = dict(os.environ)
    for k, v in unit["Service"]:
        if k == "Environment":
            name, _, value = v.strip('"').partition("=")
            env[name] = value
    launch = words.index("launch")
    cmd = words[:launch + 1] + ["--dry-run", "--json", "--assume", "2xH200"] + words[launch + 1:]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    import json

    doc = json.loads(res.stdout)
    start = doc["argv"].index("--model-path")
    assert doc["argv"][start:start + len(args)] == args
    assert doc["mode"] == "supervise" and doc["health"] == "http://127.0.0.1:30000/health"


def test_bad_profile_is_refused_now_with_exit_78(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["systemd-unit", "--profile", "no-such-profile", "--", "--model-path", "m"]) == 78
    assert "no-such-profile" in capsys.readouterr().err


def test_unknown_sglang_flag_is_refused_now_with_exit_64(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["systemd-unit", "--profile", "baseline", "--", "--model-pth", "m"]) == 64
    assert "--model-path" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [
    pytest.param(["--watchdog-sec", "60", "--", "--model-path", "m"], id="watchdog-without-notify"),
    pytest.param(["--"], id="no-sglang-args"),
])
def test_usage_mistakes_exit_64(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    assert main(["systemd-unit", "--profile", "baseline", *argv]) == 64
    assert "systemd-unit:" in capsys.readouterr().err


def test_notify_unit_with_grpc_mode_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["systemd-unit", "--notify", "--", "--model-path", "m", "--grpc-mode"]) == 78
    assert "--grpc-mode" in capsys.readouterr().err


def test_watchdog_sec_and_explicit_binary(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    text = unit_text(capsys, "--profile", "baseline", "--notify", "--watchdog-sec", "120", "--sglwrap-bin",
                     sys.executable, "--", "--model-path", "m")
    unit = parse_unit(text)
    assert one(unit, "Service", "WatchdogSec") == "120"
    assert systemd_words(one(unit, "Service", "ExecStart"))[0] == sys.executable
    assert main(["systemd-unit", "--sglwrap-bin", "relative/sglwrap", "--", "--model-path", "m"]) == 64


def test_render_unit_escapes_percent_in_description() -> None:
    spec = UnitSpec(profile="p", sglang_args=("--model-path", "m"), command=("/x",), description="100% fast")
    assert "Description=100%% fast" in render_unit(spec)


def expand_like_systemd(words: list[str], env: dict[str, str]) -> list[str]:
    """systemd's ${NAME} in ExecStart: the variable's exact value as one word (systemd.service(5))."""
    import re

    return [re.sub(r"\$\{(\w+)\}", lambda m: env.get(m.group(1), ""), w) for w in words]


def run_exec_start(text: str, env_file: dict[str, str]) -> dict:
    """Run the unit's ExecStart as systemd would (Environment=, the env file, ${NAME}), plus --dry-run --json."""
    import json

    unit = parse_unit(text)
    env = {k: v for k, v in os.environ.items() if k not in ("SGLWRAP_PROFILE",)}
    for k, v in unit["Service"]:
        if k == "Environment":
            name, _, value = v.strip('"').partition("=")
            env[name] = value
    env.update(env_file)
    words = expand_like_systemd(systemd_words(one(unit, "Service", "ExecStart")), env)
    launch = words.index("launch")
    cmd = words[:launch + 1] + ["--dry-run", "--json", "--assume", "2xH200"] + words[launch + 1:]
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def test_without_profile_the_env_file_chooses(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    text = unit_text(capsys, "--", "--model-path", str(MODEL), "--tp-size", "2")
    words = systemd_words(one(parse_unit(text), "Service", "ExecStart"))
    assert "--profile" not in words
    assert run_exec_start(text, {"SGLWRAP_PROFILE": "fewchan"})["profile"]["name"] == "fewchan"
    assert run_exec_start(text, {})["profile"]["name"] == "baseline"
    verify(tmp_path, text)


def test_drop_in_form_without_double_dash_is_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--model-path", str(MODEL), "--tp-size", "8", "--served-model-name", "llm"]
    with_dash = unit_text(capsys, "--profile", "fewchan", "--", *args)
    without = unit_text(capsys, "--model-path", str(MODEL), "--profile", "fewchan", *args[2:])
    words = systemd_words(one(parse_unit(without), "Service", "ExecStart"))
    assert words[words.index("--") + 1:] == args
    assert words[words.index("launch"):words.index("--")] == ["launch", "--profile", "fewchan"]
    assert one(parse_unit(without), "Service", "ExecStart") == one(parse_unit(with_dash), "Service", "ExecStart")


def test_a_typo_of_an_own_option_is_reported_as_such(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["systemd-unit", "--profle", "fewchan", "--model-path", "m"]) == 64
    assert "--profile" in capsys.readouterr().err


def test_secrets_stay_out_of_the_unit_and_reach_sglang_from_the_env_file(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc = main(["systemd-unit", "--model-path", str(MODEL), "--tp-size", "2", "--api-key", "s3cr3t-A",
               "--admin-api-key=s3cr3t-B", "--ssl-keyfile", "/etc/ssl/k.pem"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    text = out.out
    assert "s3cr3t" not in text and "s3cr3t" not in out.err
    assert "SGLWRAP_API_KEY" in out.err and "SGLWRAP_ADMIN_API_KEY" in out.err
    unit = parse_unit(text)
    words = systemd_words(one(unit, "Service", "ExecStart"))
    assert "${SGLWRAP_API_KEY}" in words and "/etc/ssl/k.pem" in words  # a key *file* path is no secret
    assert any("secrets" in ln.lower() and "--api-key" in ln for ln in text.splitlines() if ln.startswith("#"))
    doc = run_exec_start(text, {"SGLWRAP_API_KEY": "s3cr3t-A", "SGLWRAP_ADMIN_API_KEY": "two words"})
    argv = doc["argv"]
    assert argv[argv.index("--api-key") + 1] == "s3cr3t-A"
    assert argv[argv.index("--admin-api-key") + 1] == "two words"
    # the unit refuses to start (78, no restart) while a secret is missing: an empty --api-key would mean no auth
    pre = systemd_words(one(unit, "Service", "ExecStartPre").replace("%N", "llm"))  # %N: the unit's name
    assert pre[0] == "/bin/sh"
    missing = subprocess.run(pre, env={"SGLWRAP_API_KEY": "x"}, capture_output=True, text=True, timeout=10)
    assert missing.returncode == 78 and "/etc/sglwrap/llm.env" in missing.stderr
    both = subprocess.run(pre, env={"SGLWRAP_API_KEY": "x", "SGLWRAP_ADMIN_API_KEY": "y"}, timeout=10)
    assert both.returncode == 0
    verify(tmp_path, text)


def test_a_unit_whose_python_lacks_sglang_and_sglwrap_is_written_with_a_warning(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bare = Path(sys.base_prefix) / "bin" / "python3"
    probe = subprocess.run([str(bare), "-c", "import sglang"], capture_output=True, timeout=60)
    if probe.returncode == 0:
        pytest.skip(f"{bare} has SGLang")
    script = tmp_path / "sglwrap"
    script.write_text(f"#!{bare}\nimport sys\n")
    script.chmod(0o755)
    rc = main(["systemd-unit", "--sglwrap-bin", str(script), "--model-path", "m"])
    out = capsys.readouterr()
    assert rc == 0 and "ExecStart=" in out.out
    assert f"SGLang is not installed for {bare}" in out.err
    assert f"sglwrap is not installed for {bare}" in out.err


@pytest.mark.real_sglang
def test_no_warning_when_the_interpreter_has_both(capsys: pytest.CaptureFixture[str]) -> None:
    unit_text(capsys, "--model-path", "m")
    assert "warning" not in capsys.readouterr().err


def test_own_options_are_not_sglang_flags() -> None:
    from sglwrap.commands.systemd_unit import OWN_OPTIONS
    from sglwrap.sglang.flags import bundled_table, bundled_versions

    for v in bundled_versions():
        clash = set(OWN_OPTIONS) & set(bundled_table(v).flags)
        assert not clash, f"SGLang {v} has {clash}"
