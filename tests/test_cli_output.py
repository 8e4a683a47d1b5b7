"""What operators see: reports on stdout, logs and hints on stderr, --json alone on stdout, colour only when it
can be seen, usage mistakes at 64, and every command a message suggests really works when run.

Every test runs sglwrap as a separate process (``python -m sglwrap``), as a shell pipeline would.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO, requires_sglang, run_sglwrap

STORY = "sglang=0.5.23,torch=2.14.1+cu130,flashinfer-python=0.7.2,driver=580.95.05"  # as 0.5.23 pins it
PRE = ("preflight", "--assume", "8xRTX-PRO-6000", "--assume-stack", STORY)
LOGS = REPO / "tests" / "fixtures" / "logs"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def suggested(message: str, prefix: str) -> list[str]:
    """The command a message suggests: from ``prefix`` (e.g. 'sglwrap memory') to the end of the sentence."""
    m = re.search(re.escape(prefix) + r"[^;`]*", message)
    assert m, f"no {prefix!r} in {message!r}"
    return shlex.split(m.group(0).strip().rstrip(".").replace("`", ""))


@pytest.mark.parametrize(("argv", "on_stdout"), [
    pytest.param([*PRE, "--", "--tp-size", "8"], "gpu-count", id="preflight"),
    pytest.param(["memory", "--assume", "8xH200", "--", "--model-path", "Llama-3.1-8B", "--tp-size", "8"],
                 "verdict:", id="memory"),
    pytest.param(["launch", "--dry-run", "--assume", "2xH200", "--", "--model-path", "m", "--tp-size", "2"],
                 "exec ", id="launch-dry-run"),
    pytest.param(["diagnose", str(LOGS / "v0.4.8_docker_tp4_mla_ok.log")], "outcome:", id="diagnose"),
    pytest.param(["profiles", "list"], "fewchan", id="profiles"),
])
def test_the_report_is_on_stdout_and_not_on_stderr(argv: list[str], on_stdout: str) -> None:
    res = run_sglwrap(*argv)
    assert res.returncode in (0, 1), res.stderr
    assert on_stdout in res.stdout
    assert on_stdout not in res.stderr
    assert "\x1b[" not in res.stdout, "no colour into a pipe"


@pytest.mark.parametrize("argv", [
    pytest.param([*PRE, "--json", "--", "--tp-size", "8"], id="preflight"),
    pytest.param(["memory", "--json", "--assume", "8xH200", "--", "--model-path", "Llama-3.1-8B", "--tp-size", "8"],
                 id="memory"),
    pytest.param(["launch", "--dry-run", "--json", "--assume", "2xH200", "--", "--model-path", "m"], id="launch"),
    pytest.param(["diagnose", "--json", str(LOGS / "v0.4.8_docker_tp4_mla_ok.log")], id="diagnose"),
])
def test_json_is_one_object_alone_on_stdout(argv: list[str]) -> None:
    res = run_sglwrap(*argv, env={**os.environ, "SGLWRAP_LOG_FORMAT": "json"})
    assert res.returncode in (0, 1), res.stderr
    assert isinstance(json.loads(res.stdout), dict)  # nothing else on stdout, or this fails


def test_bench_comm_table_on_stdout_progress_on_stderr() -> None:
    pytest.importorskip("torch")
    res = run_sglwrap("bench-comm", "--backend", "gloo", "--world-size", "2", "--sizes", "4K", "--budget", "0.01",
                      "--min-samples", "2", "--timeout", "120", timeout=300)
    assert res.returncode == 0, res.stderr
    assert "busbw" in res.stdout and "busbw" not in res.stderr
    assert "[1/1]" in res.stderr and "[1/1]" not in res.stdout  # progress, one line per configuration off a tty


def test_color_flag_and_no_color() -> None:
    args = [*PRE, "--", "--tp-size", "8"]
    always = run_sglwrap("--color", "always", *args)
    assert "\x1b[32mPASS\x1b[0m" in always.stdout
    assert ANSI.sub("", always.stdout) == run_sglwrap(*args).stdout  # colour adds codes, changes no text
    assert "\x1b[" not in run_sglwrap("--color=never", *args).stdout
    assert "\x1b[" not in run_sglwrap("--color", "auto", *args).stdout  # a pipe is no terminal
    forced = run_sglwrap("--color", "always", *args, env={**os.environ, "NO_COLOR": "1"})
    assert "\x1b[32m" in forced.stdout  # asked for on the command line: wins over NO_COLOR
    bad = run_sglwrap("--color", "sometimes", *args)
    assert bad.returncode == 64 and "--color" in bad.stderr


def test_blocked_check_is_red_and_downgrade_yellow() -> None:
    res = run_sglwrap("--color", "always", *PRE, "--", "--tp-size", "8", "--enable-symm-mem")
    assert res.returncode == 78
    assert "\x1b[31mBLOCK\x1b[0m" in res.stdout


def test_columns_wraps_the_report() -> None:
    res = run_sglwrap(*PRE, "--", "--tp-size", "8", env={**os.environ, "COLUMNS": "72"})
    lines = res.stdout.splitlines()
    assert all(len(ln) <= 72 for ln in lines if " " in ln.strip()), [ln for ln in lines if len(ln) > 72]
    wide = run_sglwrap(*PRE, "--", "--tp-size", "8", env={**os.environ, "COLUMNS": "140"})
    assert max(map(len, wide.stdout.splitlines())) > 72


@pytest.mark.parametrize("argv", [
    pytest.param(["memory", "--plot", "{tmp}/p.txt", "--assume", "2xH200", "--", "--model-path", "Qwen3-8B",
                  "--tp-size", "2"], id="memory"),
    pytest.param(["diagnose", "--plot", "{tmp}/p.txt", str(LOGS / "v0.4.8_docker_tp4_mla_ok.log")], id="diagnose"),
    pytest.param(["bench-comm", "--backend", "gloo", "--sizes", "4K", "--plot", "{tmp}/p.txt"], id="bench-comm"),
])
def test_plot_to_a_non_png_name_is_refused_with_64(argv: list[str], tmp_path: Path) -> None:
    res = run_sglwrap(*(a.replace("{tmp}", str(tmp_path)) for a in argv))
    assert res.returncode == 64, res.stderr
    assert "p.txt" in res.stderr and ".png" in res.stderr
    assert not (tmp_path / "p.txt").exists()


@pytest.mark.parametrize("verb", [["preflight"], ["memory"], ["launch", "--dry-run"]])
def test_assume_without_a_count_is_a_usage_error_that_suggests_one_that_works(verb: list[str]) -> None:
    res = run_sglwrap(*verb, "--assume", "H200", "--", "--model-path", "Qwen3-8B", "--tp-size", "2")
    assert res.returncode == 64, res.stderr
    assert "8xH200" in res.stderr
    ok = run_sglwrap(*verb, "--assume", "2xH200", "--", "--model-path", "Qwen3-8B", "--tp-size", "2")
    assert ok.returncode in (0, 1), ok.stderr


def test_a_bad_hostfacts_file_suggests_a_capture_command_that_writes_a_good_one(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"gpus": "none"}')
    res = run_sglwrap(*PRE[:1], "--assume", str(bad), "--", "--tp-size", "1")
    assert res.returncode == 78
    cmd = suggested(res.stderr, "python3 -m sglwrap.host.capture")
    assert cmd[:3] == ["python3", "-m", "sglwrap.host.capture"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    made = subprocess.run([sys.executable, *cmd[1:]], cwd=tmp_path, capture_output=True, text=True, env=env,
                          timeout=300)
    assert made.returncode == 0, made.stderr
    again = run_sglwrap("preflight", "--assume", str(tmp_path / cmd[-1]), "--", "--tp-size", "1")
    if "0 GPUs captured" in made.stderr:  # a host without GPUs: the captured facts block as the live host does
        assert again.returncode == 78 and "nvml" in again.stdout, again.stderr
    else:
        assert again.returncode in (0, 1), again.stderr


@pytest.mark.parametrize(("argv", "prefix", "extra"), [
    pytest.param(["memory", "--assume", "8xH200"], "sglwrap memory", [], id="memory"),
    pytest.param(["launch"], "sglwrap launch", ["--dry-run", "--assume", "8xH200"], id="launch"),
    pytest.param(["systemd-unit"], "sglwrap systemd-unit", [], id="systemd-unit"),
])
def test_the_example_in_a_no_arguments_message_runs(argv: list[str], prefix: str, extra: list[str]) -> None:
    res = run_sglwrap(*argv)
    assert res.returncode == 64
    cmd = suggested(res.stderr, prefix)
    ran = run_sglwrap(*cmd[1:2], *extra, *cmd[2:])
    assert ran.returncode in (0, 1, 78), ran.stderr  # runs (78: a predicted OOM is an answer, not a usage error)
    assert ran.returncode == 78 or "verdict: fits" in ran.stdout or cmd[1] != "memory"
    assert "abbreviation" not in ran.stdout + ran.stderr
    assert "error" not in ran.stderr.lower() or ran.returncode == 78


def test_a_name_mismatch_suggests_a_rename_that_works(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text("name: other\ndescription: x\n")
    res = run_sglwrap("profiles", "show", str(tmp_path / "bad.yaml"))
    assert res.returncode == 78
    new = re.search(r"rename the file to (\S+\.yaml)", res.stderr)
    assert new, res.stderr
    (tmp_path / "bad.yaml").rename(tmp_path / new.group(1))
    assert run_sglwrap("profiles", "show", str(tmp_path / new.group(1))).returncode == 0


def test_diagnose_lists_ranks_in_numeric_order(tmp_path: Path) -> None:
    order = [2, 10, 3, 1, 0]  # the order a log names them in
    lines = [f"[2025-06-20 09:00:05 TP{r}] Load weight begin. avail mem={70 + r}.00 GB" for r in order]
    lines += [f"[2025-06-20 09:00:16 TP{r}] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, "
              f"avail mem={60 + r}.00 GB, mem usage=8.30 GB." for r in order]
    log = tmp_path / "ranks.log"
    log.write_text("\n".join(lines) + "\n")
    res = run_sglwrap("diagnose", str(log))
    listed = [int(m.group(1)) for m in re.finditer(r"^TP(\d+)\s", res.stdout, re.M)]
    assert listed == sorted(order), res.stdout
    doc = json.loads(run_sglwrap("diagnose", "--json", str(log)).stdout)
    assert [r["label"] for r in doc["ranks"]] == [f"TP{r}" for r in sorted(order)]


@requires_sglang
def test_launch_execs_sglang_serve_in_its_own_pid_without_the_deprecation_warning(tmp_path: Path) -> None:
    """SGLang 0.5.23 says `python -m sglang.launch_server` is only "still supported"; sglwrap execs `sglang serve`
    (the same process: its PID, its exit code) and that warning is gone."""
    missing = str(tmp_path / "no-such-model")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    old = subprocess.run([sys.executable, "-m", "sglang.launch_server", "--model-path", missing],
                         capture_output=True, text=True, timeout=300)
    assert "'sglang serve' is the recommended entrypoint" in old.stderr  # what the old entry prints
    script = Path(sys.executable).parent / "sglang"
    if not script.exists():
        pytest.skip(f"no {script} console script to compare with")
    args = ["--model-path", missing, "--device", "cpu"]  # this test machine has no GPU
    plain = subprocess.run([str(script), "serve", *args], capture_output=True, text=True, timeout=300)
    # --force: preflight blocks the missing model path live; the launch is still compared with plain SGLang's
    proc = subprocess.Popen([sys.executable, "-m", "sglwrap", "launch", "--force", "--", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == plain.returncode != 0, err[-2000:]
    assert "recommended entrypoint" not in err
    lines = [json.loads(ln[ln.index("{"):]) for ln in err.splitlines() if '"sglwrap": "worker-env"' in ln]
    launcher = [ln for ln in lines if ln["role"] == "module:sglang.cli.main"]
    assert len(launcher) == 1 and launcher[0]["pid"] == proc.pid, err[-2000:]


def test_server_module_override_still_execs_that_module(tmp_path: Path) -> None:
    env = {**os.environ, "SGLWRAP_SERVER_MODULE": "fake_sglang_server"}
    res = run_sglwrap("launch", "--dry-run", "--json", "--assume", "2xH200", "--", "--model-path", "m", env=env)
    argv = json.loads(res.stdout)["argv"]
    assert argv[1:3] == ["-m", "fake_sglang_server"] and argv[3:5] == ["--model-path", "m"]


def test_releases_before_serve_keep_launch_server() -> None:
    res = run_sglwrap("launch", "--dry-run", "--json", "--assume", "2xH200", "--assume-stack", "sglang=0.5.9", "--",
                      "--model-path", "m")
    assert json.loads(res.stdout)["argv"][1:3] == ["-m", "sglang.launch_server"]


def test_a_blocked_launch_suggests_preflight_and_force_and_both_do_what_it_says() -> None:
    args = ["--assume", "8xRTX-PRO-6000", "--assume-stack", STORY, "--", "--model-path", "Qwen3-8B", "--tp-size", "8",
            "--enable-symm-mem"]
    res = run_sglwrap("launch", "--dry-run", *args)
    assert res.returncode == 78 and "symm-mem" in res.stderr
    assert "`sglwrap preflight` shows every check" in res.stderr and "--force launches anyway" in res.stderr
    pre = run_sglwrap("preflight", *args)
    assert pre.returncode == 78
    assert re.search(r"^symm-mem\s+BLOCK", pre.stdout, re.M) and re.search(r"^gpu-count\s+PASS", pre.stdout, re.M)
    forced = run_sglwrap("launch", "--dry-run", "--force", *args)
    assert forced.returncode == 0, forced.stderr


def test_profile_did_you_mean_names_one_that_loads() -> None:
    res = run_sglwrap("profiles", "show", "fewchn")
    assert res.returncode == 78
    m = re.search(r"Did you mean '([^']+)'", res.stderr)
    assert m, res.stderr
    assert run_sglwrap("profiles", "show", m.group(1)).returncode == 0


def test_memory_without_a_gpu_suggests_an_assume_that_works() -> None:
    res = run_sglwrap("memory", "--", "--model-path", "Qwen3-8B", "--tp-size", "2")
    if res.returncode == 0:
        pytest.skip("this machine has a GPU: nothing to suggest")
    assert res.returncode == 64
    m = re.search(r"e\.g\. (--assume \S+)", res.stderr)
    assert m, res.stderr
    ok = run_sglwrap("memory", *m.group(1).split(), "--", "--model-path", "Qwen3-8B", "--tp-size", "2")
    assert ok.returncode in (0, 1) and "verdict:" in ok.stdout, ok.stderr


@pytest.mark.parametrize(("verb", "own"), [
    (["launch", "--dry-run"], "--dry-run"), (["preflight"], "--json"), (["memory"], "--json"),
    (["systemd-unit"], "--notify")])
def test_an_own_option_after_the_double_dash_is_named_and_moving_it_works(verb: list[str], own: str) -> None:
    tail = ["--model-path", "Qwen3-8B", "--tp-size", "2"]
    res = run_sglwrap(*verb, "--assume", "2xH200", "--", *tail, own) if verb[0] != "systemd-unit" else \
        run_sglwrap(*verb, "--", *tail, own)
    assert res.returncode == 64
    assert "before `--`" in res.stderr and own in res.stderr and "did you mean" not in res.stderr
    moved = run_sglwrap(*verb, own, *(["--assume", "2xH200"] if verb[0] != "systemd-unit" else []), "--", *tail)
    assert moved.returncode in (0, 1), moved.stderr
