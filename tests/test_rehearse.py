"""`sglwrap rehearse` and `launch --rehearse` against a stand-in SGLang (tests/fixtures/fakeserver/standin_sglang.py:
SGLang's own log lines, /health and /generate on 127.0.0.1) and, at the end, the real SGLang 0.5.23 on CPU.

Every test checks that nothing the rehearsal started is still alive afterwards. GPU facts come through a fake
pynvml (tests/test_host_nvml.py's FakeNvml, answering from a real 2x H200 capture) where a test needs GPUs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sglwrap.cli import main
from sglwrap.diagnose import diagnose
from sglwrap.host import nvml

from .conftest import REPO, requires_sglang
from .test_host_nvml import RAW, FakeNvml

FAKE = REPO / "tests" / "fixtures" / "fakeserver"
CONFIG = REPO / "tests" / "fixtures" / "models" / "qwen3-0.6b.json"


@pytest.fixture(autouse=True)
def no_real_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """No GPU by default (this machine has none); tests that need GPUs inject a fake pynvml."""

    def missing() -> Any:
        raise ImportError("no pynvml in this test")

    monkeypatch.setattr(nvml, "_load_pynvml", missing)


@pytest.fixture
def model(tmp_path: Path) -> Path:
    d = tmp_path / "Qwen3-0.6B"
    d.mkdir()
    (d / "config.json").write_text(CONFIG.read_text())
    return d


@pytest.fixture
def standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The stand-in is what the launch plan execs; its records go under the returned directory."""
    rec = tmp_path / "standin"
    rec.mkdir()
    monkeypatch.setenv("PYTHONPATH", f"{REPO}{os.pathsep}{FAKE}")
    monkeypatch.setenv("SGLWRAP_SERVER_MODULE", "standin_sglang")
    monkeypatch.setenv("SGLWRAP_STOP_GRACE", "2")
    monkeypatch.setenv("STANDIN_PIDFILE", str(rec / "pids.json"))
    monkeypatch.setenv("STANDIN_STARTS", str(rec / "starts.jsonl"))
    monkeypatch.setenv("STANDIN_REQUESTS", str(rec / "requests.jsonl"))
    return rec


def _rehearse(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any], str]:
    rc = main(["rehearse", "--json", *args])
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if out.strip() else {}), err


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def _group_alive(pgid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as fh:
                    fields = fh.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != b"Z":
                out.append(int(name))
    return out


def _assert_nothing_left(rec: Path) -> None:
    """Every process the stand-in started (server, its scheduler child, their process group) is gone."""
    pids = json.loads((rec / "pids.json").read_text()) if (rec / "pids.json").exists() else {}
    starts = [json.loads(ln) for ln in (rec / "starts.jsonl").read_text().splitlines()] \
        if (rec / "starts.jsonl").exists() else []
    for pid in [pids.get("server"), *pids.get("children", []), *[s["pid"] for s in starts]]:
        if pid:
            assert not _alive(pid), f"process {pid} outlived the rehearsal"
    for s in starts:
        if "dummy" in s["argv"]:  # a rehearsal's own session (a real launch stays in its caller's group)
            assert _group_alive(s["pgid"]) == [], f"process group {s['pgid']} still has members"


def _starts(rec: Path) -> list[list[str]]:
    path = rec / "starts.jsonl"
    return [json.loads(ln)["argv"] for ln in path.read_text().splitlines()] if path.exists() else []


# --- pass ---------------------------------------------------------------------------------------------------


def test_a_passing_rehearsal_runs_the_launch_argv_with_dummy_weights_and_one_request(
        capsys: pytest.CaptureFixture[str], standin: Path, model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STANDIN_MODE", "pass")
    before = sorted((p.name, p.stat().st_mtime_ns) for p in model.iterdir())
    rc, doc, err = _rehearse(capsys, "--profile", "fewchan", "--", "--model-path", str(model), "--device", "cpu")
    assert rc == 0, err
    assert doc["verdict"] == "passed" and doc["stage"] is None and doc["request"]["status"] == 200
    # the launch's own argv (user args + profile) with the rehearsal's additions after it, argparse-last-wins
    (argv,) = _starts(standin)
    assert argv[:4] == ["--model-path", str(model), "--device", "cpu"]
    assert argv[argv.index("--load-format") + 1] == "dummy" and argv[argv.index("--host") + 1] == "127.0.0.1"
    (req,) = [json.loads(ln) for ln in (standin / "requests.jsonl").read_text().splitlines()]
    assert req["path"] == "/generate" and req["body"]["sampling_params"]["max_new_tokens"] > 0
    assert req["body"]["input_ids"]  # token ids: works with --skip-tokenizer-init too
    # SGLang's real numbers as diagnose reads them from the stand-in's log lines
    (rank,) = doc["ranks"]
    assert rank["avail_before_weights_gib"] == pytest.approx(78.5) and rank["weight_mem_gib"] == pytest.approx(0.98)
    assert rank["kv_tokens"] == 20480 and rank["cuda_graph_mem_gib"] == pytest.approx(0.07)
    assert doc["stopped"]["how"] == "SIGTERM" and doc["stopped"]["leftover_processes"] == 0
    assert doc["profile"]["name"] == "fewchan"
    assert "initialising torch.distributed" in err and "capturing CUDA graphs" in err  # progress on stderr
    _assert_nothing_left(standin)
    assert sorted((p.name, p.stat().st_mtime_ns) for p in model.iterdir()) == before, "the model dir was written"


def test_the_injector_reaches_the_rehearsed_server(capsys: pytest.CaptureFixture[str], standin: Path,
                                                   model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STANDIN_MODE", "fail_weights")
    rc, doc, _ = _rehearse(capsys, "--profile", "fewchan", "--", "--model-path", str(model), "--device", "cpu")
    assert rc == 78
    start = json.loads((standin / "starts.jsonl").read_text().splitlines()[0])
    assert start["env"]["NCCL_MAX_NCHANNELS"] == "2"  # the profile's variables, as in the real launch
    assert '"sglwrap": "worker-env"' in Path(doc["log"]).read_text()


def test_the_human_report_prints_real_numbers(capsys: pytest.CaptureFixture[str], standin: Path, model: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STANDIN_MODE", "pass")
    rc = main(["rehearse", "--", "--model-path", str(model), "--device", "cpu"])
    out = capsys.readouterr().out
    assert rc == 0
    assert out.startswith("rehearse  PASS")
    assert "20,480" in out and "78.50 GiB" in out
    _assert_nothing_left(standin)


# --- each failure stage, in diagnose's words -------------------------------------------------------------------

FAILURES = [
    # mode, stage, words of the error line, outcome
    ("fail_import", "init", "No module named 'sgl_kernel'", "error"),
    ("fail_args", "startup", "invalid choice: 'dummy'", None),
    ("fail_weights", "weight_load", "KeyError: 'lm_head.weight'", "error"),
    ("fail_kv", "kv_pool", "Loaded weights leave no GPU memory for the KV cache", "oom"),
    ("fail_graph", "cuda_graph", "Capture cuda graph failed: CUDA out of memory", "oom"),
    ("crash_request", "first_request", "Committed KV cache already freed", "error"),
]


@pytest.mark.parametrize(("mode", "stage", "words", "outcome"), FAILURES)
def test_each_failure_is_reported_at_its_stage_with_diagnoses_cause(
        mode: str, stage: str, words: str, outcome: str | None, capsys: pytest.CaptureFixture[str], standin: Path,
        model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STANDIN_MODE", mode)
    rc, doc, _ = _rehearse(capsys, "--", "--model-path", str(model), "--device", "cpu")
    assert rc == 78
    assert doc["verdict"] == "failed" and doc["stage"] == stage
    assert words in doc["error"]
    finding = diagnose([doc["log"]]).finding
    if outcome is not None:  # diagnose found SGLang's error line: its outcome, cause and fix are the report's
        assert finding.outcome == outcome
        assert finding.cause in doc["cause"] and doc["fix"] == finding.fix
    else:  # SGLang exited before any startup line: the report says so and shows the last line
        assert "before its first startup line" in doc["cause"] and words in doc["cause"]
    _assert_nothing_left(standin)


def test_kv_pool_failure_carries_diagnoses_arithmetic(capsys: pytest.CaptureFixture[str], standin: Path,
                                                      model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STANDIN_MODE", "fail_kv")
    rc, doc, _ = _rehearse(capsys, "--", "--model-path", str(model), "--device", "cpu")
    assert rc == 78
    # 137.90 GB free before, 125.65 GB of weights, --mem-fraction-static 0.88: the budget is negative
    assert "125.7 GiB" in doc["cause"] and "0.88" in doc["cause"]
    assert doc["ranks"][0]["weight_mem_gib"] == pytest.approx(125.65)


def test_a_hang_is_killed_at_the_timeout_and_reported_at_the_stage_it_reached(
        capsys: pytest.CaptureFixture[str], standin: Path, model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STANDIN_MODE", "hang")
    t0 = time.monotonic()
    rc, doc, _ = _rehearse(capsys, "--timeout", "3", "--", "--model-path", str(model), "--device", "cpu")
    assert rc == 78 and time.monotonic() - t0 < 60
    assert doc["reason"] == "hang" and doc["stage"] == "cuda_graph"
    assert "no /health 200 within the 3 s timeout" in doc["cause"] and doc["timeout_s"] == 3
    _assert_nothing_left(standin)


def test_a_server_that_ignores_sigterm_is_killed_with_its_whole_tree(
        capsys: pytest.CaptureFixture[str], standin: Path, model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STANDIN_MODE", "ignore_term")
    rc, doc, _ = _rehearse(capsys, "--", "--model-path", str(model), "--device", "cpu")
    assert rc == 0  # it came up and answered: the verdict is about starting, the stop is reported
    assert "SIGKILL" in doc["stopped"]["how"]
    assert doc["stopped"]["leftover_processes"] >= 1  # its scheduler child ignored SIGTERM too
    _assert_nothing_left(standin)


def test_shared_memory_left_by_the_server_is_removed(capsys: pytest.CaptureFixture[str], standin: Path, model: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    if not Path("/dev/shm").is_dir():
        pytest.skip("no /dev/shm here")
    name = f"sglwrap-test-{os.getpid()}-{time.monotonic_ns()}"
    monkeypatch.setenv("STANDIN_MODE", "ignore_term")  # SIGKILLed: nothing of its own cleans up
    monkeypatch.setenv("STANDIN_SHM", name)
    rc, doc, _ = _rehearse(capsys, "--", "--model-path", str(model), "--device", "cpu")
    assert rc == 0
    assert name in doc["stopped"]["shm_removed"]
    assert not (Path("/dev/shm") / name).exists()


@pytest.mark.parametrize("verb", [["rehearse", "--timeout", "120"], ["launch", "--rehearse"]])
def test_ctrl_c_kills_the_child_tree_and_exits_130(verb: list[str], standin: Path, model: Path) -> None:
    env = {**os.environ, "STANDIN_MODE": "hang", "STANDIN_REAL_EXIT": "5"}
    proc = subprocess.Popen([sys.executable, "-m", "sglwrap", *verb, "--", "--model-path", str(model), "--device",
                             "cpu"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (standin / "pids.json").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert (standin / "pids.json").exists(), "the stand-in never started"
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert len(_starts(standin)) == 1  # the rehearsal only: launch --rehearse did not go on to launch
    _assert_nothing_left(standin)


# --- refusals ---------------------------------------------------------------------------------------------------


def test_assume_is_refused_as_a_usage_error(capsys: pytest.CaptureFixture[str], model: Path) -> None:
    rc = main(["rehearse", "--assume", "8xH200", "--", "--model-path", str(model)])
    err = capsys.readouterr().err
    assert rc == 64 and "--assume 8xH200" in err and "this machine's GPUs" in err
    assert main(["launch", "--rehearse", "--assume", "8xH200", "--", "--model-path", str(model)]) == 64


def test_multi_node_is_refused(capsys: pytest.CaptureFixture[str], standin: Path, model: Path) -> None:
    rc = main(["rehearse", "--", "--model-path", str(model), "--device", "cpu", "--nnodes", "2", "--node-rank", "0",
               "--dist-init-addr", "10.0.0.1:5000"])
    err = capsys.readouterr().err
    assert rc == 78 and "multi-node" in err and "--nnodes 2" in err
    assert _starts(standin) == []


def _fake_gpus(monkeypatch: pytest.MonkeyPatch, procs: dict[int, list[Any]] | None = None) -> None:
    monkeypatch.setattr(nvml, "_load_pynvml", lambda: FakeNvml(RAW, procs=procs))
    monkeypatch.setattr(nvml, "_read_proc_name", lambda pid: "python3")


def test_gpus_held_by_another_process_are_refused_naming_it(capsys: pytest.CaptureFixture[str], standin: Path,
                                                            model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_gpus(monkeypatch, {0: [SimpleNamespace(pid=4242, usedGpuMemory=70 * 2**30)]})
    rc = main(["rehearse", "--force", "--", "--model-path", str(model)])
    err = capsys.readouterr().err
    assert rc == 78
    assert "GPU 0 (NVIDIA H200) by pid 4242 (python3), 70.0 GiB" in err
    assert _starts(standin) == []


def test_a_held_gpu_the_launch_does_not_use_is_no_obstacle(capsys: pytest.CaptureFixture[str], standin: Path,
                                                           model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_gpus(monkeypatch, {1: [SimpleNamespace(pid=4242, usedGpuMemory=70 * 2**30)]})
    monkeypatch.setenv("STANDIN_MODE", "pass")
    rc, doc, err = _rehearse(capsys, "--force", "--", "--model-path", str(model))  # TP 1: GPU 0 only
    assert rc == 0, err
    # on (fake) H200s the accountant planned: its prediction stands beside SGLang's numbers
    pred = doc["predicted"]
    assert pred is not None and pred["kv_tokens"] > 0 and pred["avail_before_weights_gib"] > 100
    assert doc["ranks"][0]["kv_tokens"] == 20480
    assert "x 28 layers" in doc["timeout_why"]  # the default timeout is sized from the model's config
    _assert_nothing_left(standin)


def test_no_gpu_for_a_cuda_launch_is_refused(capsys: pytest.CaptureFixture[str], standin: Path,
                                             model: Path) -> None:
    rc = main(["rehearse", "--force", "--", "--model-path", str(model)])
    err = capsys.readouterr().err
    assert rc == 78 and "no NVIDIA GPU here" in err and "--device cpu" in err
    assert _starts(standin) == []


@pytest.mark.parametrize(("args", "words"), [(["--timeout", "0"], "--timeout"), (["--timeout", "soon"], "--timeout"),
                                             (["--layers", "0"], "--layers"), (["--layers", "1.5"], "--layers")])
def test_bad_own_values_are_usage_errors(capsys: pytest.CaptureFixture[str], model: Path, args: list[str],
                                         words: str) -> None:
    rc = main(["rehearse", *args, "--", "--model-path", str(model), "--device", "cpu"])
    assert rc == 64 and words in capsys.readouterr().err


def test_layers_merges_into_the_users_model_override(capsys: pytest.CaptureFixture[str], standin: Path,
                                                     model: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STANDIN_MODE", "pass")
    rc, doc, _ = _rehearse(capsys, "--layers", "2", "--", "--model-path", str(model), "--device", "cpu",
                           "--json-model-override-args", '{"rope_theta": 10000}')
    assert rc == 0
    (argv,) = _starts(standin)
    last = argv[len(argv) - 1 - argv[::-1].index("--json-model-override-args") + 1]
    assert json.loads(last) == {"rope_theta": 10000, "num_hidden_layers": 2}
    assert any("do not hold for the real model" in n for n in doc["notes"])
    _assert_nothing_left(standin)


# --- launch --rehearse and the verdict cache --------------------------------------------------------------------


def _launch(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sglwrap", "launch", "--rehearse", *args], env=env,
                          capture_output=True, text=True, timeout=120)


def test_launch_rehearse_launches_after_a_pass_and_skips_the_same_fingerprint_next_time(
        standin: Path, model: Path) -> None:
    env = {**os.environ, "STANDIN_MODE": "pass", "STANDIN_REAL_EXIT": "5"}
    args = ("--", "--model-path", str(model), "--device", "cpu")
    first = _launch(*args, env=env)
    assert first.returncode == 5, first.stderr  # the real launch ran after the pass (the stand-in's exit code)
    assert "rehearse  PASS" in first.stderr and first.stdout == ""
    starts = _starts(standin)
    assert len(starts) == 2 and "dummy" in starts[0] and "dummy" not in starts[1]
    second = _launch(*args, env=env)
    assert second.returncode == 5, second.stderr
    assert "skipped, this fingerprint" in second.stderr and "nothing was started" in second.stderr
    starts = _starts(standin)
    assert len(starts) == 3 and "dummy" not in starts[2], "a second rehearsal was started"
    # an environment variable SGLang/NCCL reads is part of the fingerprint: it rehearses again, and says why
    third = _launch(*args, env={**env, "NCCL_ALGO": "Ring"})
    assert third.returncode == 5
    assert "changed since the last one: env NCCL_ALGO" in third.stderr
    starts = _starts(standin)
    assert len(starts) == 5 and "dummy" in starts[3]
    _assert_nothing_left(standin)


def test_launch_rehearse_does_not_launch_after_a_failure(standin: Path, model: Path) -> None:
    env = {**os.environ, "STANDIN_MODE": "fail_graph", "STANDIN_REAL_EXIT": "5"}
    res = _launch("--", "--model-path", str(model), "--device", "cpu", env=env)
    assert res.returncode == 78, res.stderr
    assert "the rehearsal failed at cuda graph, so SGLang was not launched" in res.stderr
    starts = _starts(standin)
    assert len(starts) == 1 and "dummy" in starts[0]
    # a failed fingerprint is not skipped the next time: the operator may have fixed something outside it
    res = _launch("--", "--model-path", str(model), "--device", "cpu", env=env)
    assert res.returncode == 78 and len(_starts(standin)) == 2
    _assert_nothing_left(standin)


def test_launch_rehearse_with_dry_run_is_a_usage_error(capsys: pytest.CaptureFixture[str], model: Path) -> None:
    assert main(["launch", "--rehearse", "--dry-run", "--", "--model-path", str(model)]) == 64
    assert "sglwrap rehearse" in capsys.readouterr().err


def test_systemd_unit_rehearse_runs_launch_rehearse_with_a_longer_start_timeout(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from .test_systemd_unit import verify

    assert main(["systemd-unit", "--rehearse", "--notify", "--", "--model-path", "/models/M", "--tp-size", "8"]) == 0
    unit = capsys.readouterr().out
    verify(tmp_path, unit)
    (exec_start,) = [ln for ln in unit.splitlines() if ln.startswith("ExecStart=")]
    assert " launch --notify --rehearse -- --model-path /models/M --tp-size 8" in exec_start
    assert "TimeoutStartSec=75min" in unit and "RestartPreventExitStatus=2 64 78" in unit
    assert main(["systemd-unit", "--", "--model-path", "/models/M"]) == 0
    plain = capsys.readouterr().out
    assert "--rehearse" not in plain and "TimeoutStartSec=45min" in plain


# --- the real SGLang 0.5.23 on CPU ------------------------------------------------------------------------------


@requires_sglang
def test_real_sglang_on_cpu_is_rehearsed_and_its_failure_told_in_diagnoses_words(
        capsys: pytest.CaptureFixture[str], model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SGLang 0.5.23 on a CPU-only machine starts its launcher and scheduler and stops at "Load weight begin"
    (its rotary embedding imports vllm, absent here): the rehearsal runs that real launcher through the injector
    and reports the stage and cause diagnose reads from the log."""
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    before = sorted((p.name, p.stat().st_mtime_ns) for p in model.iterdir())
    rc, doc, err = _rehearse(capsys, "--timeout", "400", "--", "--model-path", str(model), "--skip-tokenizer-init",
                             "--device", "cpu")
    assert rc == 78, err
    assert doc["argv"][0].endswith("/bin/sglang") and doc["argv"][1] == "serve"  # the venv's `sglang serve`, as launch
    assert doc["stage"] == "weight_load" and doc["reason"] == "SGLang exited"
    assert "vllm" in doc["error"]
    finding = diagnose([doc["log"]]).finding
    assert finding.stage == "weight_load" and finding.cause in doc["cause"]
    assert doc["ranks"] and doc["ranks"][0]["avail_before_weights_gib"] is not None  # "Load weight begin. avail mem"
    assert sorted((p.name, p.stat().st_mtime_ns) for p in model.iterdir()) == before
    log = Path(doc["log"]).read_text()
    pids = [json.loads(ln[ln.index("{"):])["pid"] for ln in log.splitlines() if '"sglwrap": "worker-env"' in ln]
    assert len(pids) >= 2  # the launcher and its scheduler, each through the injector
    for pid in pids:
        assert not _alive(pid), f"SGLang process {pid} outlived the rehearsal"


def test_own_options_are_never_sglang_flags_nor_close_to_one() -> None:
    """Drop-in rule (as for launch): `rehearse`'s own options and `launch --rehearse` never clash with, and are
    never taken for a typo of, a flag of any bundled SGLang release."""
    import difflib

    from sglwrap.argsplit import OWN_TYPO_CUTOFF
    from sglwrap.commands import launch, rehearse
    from sglwrap.sglang.flags import bundled_table, bundled_versions

    own = set(rehearse.OWN_OPTIONS) | {"--rehearse"}
    assert "--rehearse" in launch.OWN_OPTIONS
    for version in bundled_versions():
        flags = bundled_table(version).flags
        assert not own & set(flags), version
        for flag in flags:
            assert not difflib.get_close_matches(flag, own, n=1, cutoff=OWN_TYPO_CUTOFF), (version, flag)


def test_an_api_key_is_used_for_the_request_and_never_stored(capsys: pytest.CaptureFixture[str], standin: Path,
                                                             model: Path, monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path) -> None:
    monkeypatch.setenv("STANDIN_MODE", "pass")
    secret = "sk-rehearse-secret-0451"
    rc, doc, _ = _rehearse(capsys, "--", "--model-path", str(model), "--device", "cpu", "--api-key", secret)
    assert rc == 0
    (req,) = [json.loads(ln) for ln in (standin / "requests.jsonl").read_text().splitlines()]
    assert req["authorization"] == f"Bearer {secret}"
    assert secret not in json.dumps(doc) and "<redacted>" in doc["argv"]
    from sglwrap.rehearse.cache import cache_dir

    for f in cache_dir().glob("*.json"):
        assert secret not in f.read_text(), f
    assert Path(doc["log"]).stat().st_mode & 0o077 == 0  # the log itself is private


def test_the_launch_waits_until_nvml_shows_the_gpus_released(monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver frees a killed process's memory a moment after it is gone; the real launch must not start
    before, or it would measure less free memory than the rehearsal did."""
    from sglwrap.rehearse.session import wait_gpus_released
    from sglwrap.sglang.cmdline import parse_cmdline
    from sglwrap.sglang.flags import bundled_table

    reads = []

    def load() -> FakeNvml:
        reads.append(1)
        held = [SimpleNamespace(pid=4242, usedGpuMemory=2**30)] if len(reads) < 3 else []
        return FakeNvml(RAW, procs={0: held})

    monkeypatch.setattr(nvml, "_load_pynvml", load)
    cmd = parse_cmdline(["--model-path", "m"], bundled_table("0.5.23"))
    assert wait_gpus_released(cmd, {}, timeout_s=10) is None
    assert len(reads) == 3
    reads.clear()
    monkeypatch.setattr(nvml, "_load_pynvml", lambda: FakeNvml(RAW, procs={0: [SimpleNamespace(pid=7, usedGpuMemory=1)]}))
    note = wait_gpus_released(cmd, {}, timeout_s=0.6)
    assert note is not None and "GPU 0: pid 7" in note


def test_the_memory_table_of_many_ranks_shows_the_tightest_and_loosest() -> None:
    from sglwrap.rehearse.report import memory_table

    ranks = [{"rank": i, "label": f"TP{i}", "avail_before_weights_gib": 90.0 + i, "kv_tokens": 1000 * (i + 1)}
             for i in range(8)]
    lines = memory_table({"ranks": ranks, "predicted": {"avail_before_weights_gib": 91.5, "kv_tokens": 4000}})
    assert "min of 8" in lines[1] and "max of 8" in lines[1] and "predicted" in lines[1]
    (free,) = [ln for ln in lines if "free before weights" in ln]
    assert free.split()[3:] == ["90.00", "GiB", "97.00", "GiB", "91.50", "GiB"]
    (kv,) = [ln for ln in lines if "KV tokens" in ln]
    assert kv.split()[2:] == ["1,000", "8,000", "4,000"]
    two = memory_table({"ranks": ranks[:2], "predicted": None})
    assert "TP0" in two[1] and "TP1" in two[1]
