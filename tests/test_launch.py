"""`sglwrap launch`: planning, the drop-in form, user-wins precedence, and exec semantics."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sglwrap.cli import main
from sglwrap.commands.launch import OWN_OPTIONS, split_own_args
from sglwrap.launch import plan_launch
from sglwrap.profiles import load_profile
from sglwrap.sglang.cmdline import parse_cmdline
from sglwrap.sglang.flags import bundled_table

from .conftest import REPO, requires_sglang, run_sglwrap

FAKE = REPO / "tests" / "fixtures" / "fakeserver"
MODEL = REPO / "sglwrap" / "data" / "models" / "Llama-3.1-8B"


def dry_run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    rc = main(["launch", "--dry-run", "--keep", "--json", "--assume", "8xRTX-PRO-6000", *argv])
    out = capsys.readouterr()
    assert rc == 0, out.err
    return json.loads(out.out)


def test_dry_run_writes_nothing_without_keep(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = tmp_path / "xdg"
    runtime.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    rc = main(["launch", "--dry-run", "--json", "--assume", "8xRTX-PRO-6000", "--profile", "fewchan", "--",
               "--model-path", str(MODEL), "--tp-size", "8"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["written"] is False
    assert list(runtime.iterdir()) == [] and list((tmp_path / "tmp").iterdir()) == []
    assert doc["manifest"].startswith(str(runtime)), "it says where a real launch would write"
    rc = main(["launch", "--dry-run", "--assume", "8xRTX-PRO-6000", "--profile", "fewchan", "--",
               "--model-path", str(MODEL), "--tp-size", "8"])
    out = capsys.readouterr().out
    assert rc == 0 and "not written" in out and list(runtime.iterdir()) == []


def test_dry_run_json_has_the_contract_keys_and_writes_the_files(capsys: pytest.CaptureFixture[str]) -> None:
    doc = dry_run_json(capsys, "--profile", "fewchan", "--", "--model-path", str(MODEL), "--tp-size", "8")
    assert {"argv", "env", "sitecustomize", "manifest", "profile"} <= set(doc)
    # SGLang 0.5.23 (installed, or the newest bundled table): `sglang serve`, with the LLM backend chosen explicitly
    serve = doc["argv"].index("serve")
    assert doc["argv"][0].endswith("/bin/sglang") and serve == 1  # the target venv's console script: pgrep-able
    assert doc["argv"][serve + 1:serve + 3] == ["--model-type", "llm"]
    assert doc["argv"][serve + 3:] == ["--model-path", str(MODEL), "--tp-size", "8"]
    site = Path(doc["sitecustomize"])
    assert doc["env"]["PYTHONPATH"].split(os.pathsep)[0] == str(site.parent)
    assert doc["env"]["NCCL_MAX_NCHANNELS"] == "2"
    assert doc["profile"]["name"] == "fewchan" and doc["profile"]["hash"] == load_profile("fewchan").hash
    manifest = json.loads(Path(doc["manifest"]).read_text())
    assert manifest["sglwrap_manifest"] == 1 and manifest["argv"] == doc["argv"]
    assert manifest["profile"]["hash"] == doc["profile"]["hash"]
    assert "NCCL_BUFFSIZE" in site.read_text()


def test_drop_in_form_passes_unknown_options_through_and_keeps_json_model_override(
        capsys: pytest.CaptureFixture[str]) -> None:
    doc = dry_run_json(capsys, "--model-path", str(MODEL), "--profile", "lowgraph", "--tp-size", "2",
                       "--json-model-override-args", '{"rope_scaling": null}')
    args = doc["argv"][doc["argv"].index("--model-path"):]
    assert args[:6] == ["--model-path", str(MODEL), "--tp-size", "2", "--json-model-override-args",
                        '{"rope_scaling": null}']
    assert args[6:] == ["--cuda-graph-max-bs-decode", "128"]


def test_sglwrap_profile_environment_variable_picks_the_profile(capsys: pytest.CaptureFixture[str],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLWRAP_PROFILE", "pcie-ring")
    doc = dry_run_json(capsys, "--model-path", str(MODEL))
    assert doc["profile"]["name"] == "pcie-ring"
    assert "--disable-custom-all-reduce" in doc["argv"]
    assert doc["env"]["NCCL_PROTO"] == "LL,Simple"


def test_users_own_args_win_over_the_profile(capsys: pytest.CaptureFixture[str]) -> None:
    doc = dry_run_json(capsys, "--profile", "lowgraph", "--", "--model-path", "m",
                       "--cuda-graph-max-bs-decode", "256")
    assert doc["argv"].count("--cuda-graph-max-bs-decode") == 1
    assert doc["argv"][-1] == "256"
    assert any("cuda_graph_max_bs" in o for o in doc["overridden"])


def test_users_sglang_config_file_wins_over_the_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "server.yaml"
    cfg.write_text("cuda-graph-max-bs-decode: 64\n")
    doc = dry_run_json(capsys, "--profile", "lowgraph", "--", "--model-path", "m", "--config", str(cfg))
    assert "--cuda-graph-max-bs-decode" not in doc["argv"]


def test_users_environment_wins_unless_the_profile_forces(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NCCL_MIN_NCHANNELS", "8")
    doc = dry_run_json(capsys, "--profile", "fewchan", "--", "--model-path", "m")
    assert "NCCL_MIN_NCHANNELS" not in doc["env"]
    assert doc["env_kept"] == {"NCCL_MIN_NCHANNELS": "8"}
    forced = tmp_path / "forced.yaml"
    forced.write_text("name: forced\ndescription: x\nextends: fewchan\nenv:\n  NCCL_MIN_NCHANNELS: {value: 1, force: true}\n")
    doc = dry_run_json(capsys, "--profile", str(forced), "--", "--model-path", "m")
    assert doc["env"]["NCCL_MIN_NCHANNELS"] == "1"


def test_ambiguous_abbreviation_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["launch", "--dry-run", "--assume", "2xH200", "--", "--model-path", "m", "--cuda-graph-max-bs", "8"])
    err = capsys.readouterr().err
    assert rc == 64
    assert "ambiguous" in err and "--cuda-graph-max-bs-decode" in err and "--cuda-graph-max-bs-prefill" in err


def test_unknown_sglang_flag_is_a_usage_error_with_a_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["launch", "--dry-run", "--assume", "2xH200", "--", "--model-pth", "m"])
    assert rc == 64 and "--model-path" in capsys.readouterr().err


def test_no_sglang_args_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["launch", "--profile", "fewchan", "--dry-run"]) == 64
    assert "no SGLang arguments" in capsys.readouterr().err


def test_bad_assume_is_a_usage_error_listing_known_gpus(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["launch", "--dry-run", "--assume", "8xH2OO", "--", "--model-path", "m"]) == 64
    err = capsys.readouterr().err
    assert "unknown GPU 'H2OO'" in err and "RTX-PRO-6000" in err


def test_setting_without_a_flag_in_this_sglang_version_is_a_clear_error() -> None:
    table = bundled_table("0.5.23")
    stripped = type(table)(version="0.4.0", flags={k: v for k, v in table.flags.items()
                                                    if not k.startswith("--cuda-graph-max-bs")}, source="test")
    from sglwrap.errors import ConfigError

    with pytest.raises(ConfigError, match=r"sglang.cuda_graph_max_bs' has no flag in SGLang 0.4.0"):
        plan_launch(load_profile("lowgraph"), parse_cmdline(["--model-path", "m"], stripped), python="python",
                    environ={})


def test_split_own_args_never_eats_an_sglang_value_equal_to_an_own_option() -> None:
    table = bundled_table("0.5.23")
    own, rest = split_own_args(["--served-model-name", "--json", "--profile", "fewchan", "--model-path", "m"], table)
    assert own == {"--profile": "fewchan"}
    assert rest == ["--served-model-name", "--json", "--model-path", "m"]


def test_own_option_names_never_equal_an_sglang_flag() -> None:
    table = bundled_table("0.5.23")
    assert not set(OWN_OPTIONS) & set(table.flags)


# --- exec semantics -----------------------------------------------------------------------------------------


def _fake_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{REPO}{os.pathsep}{FAKE}"
    env["SGLWRAP_SERVER_MODULE"] = "fake_sglang_server"
    env.update(extra)
    return env


def _launch_fake(env: dict[str, str]) -> subprocess.Popen[str]:
    # --force: on this GPU-less host preflight blocks a CUDA launch (NVML gives no GPU); the fake server needs none
    return subprocess.Popen([sys.executable, "-m", "sglwrap", "launch", "--force", "--profile", "fewchan", "--",
                             "--model-path", "m"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)


def test_launch_execs_in_the_same_pid_and_returns_the_servers_exit_code() -> None:
    proc = _launch_fake(_fake_env(FAKE_EXIT_CODE="3"))
    first = json.loads(proc.stdout.readline())
    assert proc.wait(timeout=60) == 3
    assert first["pid"] == proc.pid, "exec must keep the PID"
    assert first["env"]["NCCL_MAX_NCHANNELS"] == "2"
    assert first["argv"] == ["--model-path", "m"]
    err = proc.stderr.read()
    assert '"sglwrap": "worker-env"' in err
    events = [json.loads(ln) for ln in err.splitlines() if ln.startswith("{") and '"event"' in ln]
    names = [e["event"] for e in events]
    assert names.index("launch.preflight") < names.index("launch.exec"), "journal shows the gates before exec"
    assert next(e for e in events if e["event"] == "launch.exec")["hash"] == load_profile("fewchan").hash


def test_sigterm_to_the_launch_pid_reaches_the_server() -> None:
    proc = _launch_fake(_fake_env(FAKE_WAIT_TERM="1"))
    first = json.loads(proc.stdout.readline())
    assert first["pid"] == proc.pid
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 17
    assert "got-term" in proc.stdout.read()


@requires_sglang
def test_exit_code_of_real_sglang_is_passed_through(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-model")
    plain = subprocess.run([sys.executable, "-m", "sglang.launch_server", "--model-path", missing],
                           capture_output=True, text=True, timeout=300)
    # --force: preflight blocks a CUDA launch on a GPU-less host; forced, SGLang's own exit code must come through
    wrapped = run_sglwrap("launch", "--force", "--profile", "baseline", "--", "--model-path", missing, timeout=300)
    assert plain.returncode != 0
    assert wrapped.returncode == plain.returncode
    assert '"sglwrap": "worker-env"' in wrapped.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@requires_sglang
def test_injection_reaches_real_sglang_scheduler_processes_on_cpu(tmp_path: Path) -> None:
    """How far real SGLang 0.5.23 gets on a CPU-only machine: with --device cpu and --load-format dummy it
    resolves its args, writes its own NCCL defaults, spawns its scheduler process(es) and reaches
    "Load weight begin" before failing (it needs vllm on CPU). Each of its processes logs sglwrap's line."""
    model = tmp_path / "tiny"
    model.mkdir()
    (model / "config.json").write_text((REPO / "tests" / "fixtures" / "models" / "qwen3-0.6b.json").read_text())
    proc = subprocess.Popen(
        [sys.executable, "-m", "sglwrap", "launch", "--profile", "fewchan", "--", "--model-path", str(model),
         "--load-format", "dummy", "--skip-tokenizer-init", "--device", "cpu", "--port", str(_free_port())],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        out, _ = proc.communicate(timeout=240)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    lines = [json.loads(ln[ln.index("{"):]) for ln in out.splitlines() if '"sglwrap": "worker-env"' in ln]
    launcher = [ln for ln in lines if ln["role"] == "module:sglang.cli.main"]  # `sglang serve`, exec'd
    workers = [ln for ln in lines if ln["role"] == "spawn-worker"]
    assert len(launcher) == 1 and launcher[0]["pid"] == proc.pid
    assert workers, f"no scheduler process reported; output tail:\n{out[-3000:]}"
    for w in workers:
        assert w["ppid"] == proc.pid
        assert w["env"]["NCCL_MIN_NCHANNELS"] == "1" and w["env"]["NCCL_BUFFSIZE"] == "131072"
        # SGLang's own launcher decisions are visible, not undone by the injector:
        assert w["env"]["NCCL_CUMEM_ENABLE"] == "0" and w["env"]["CUDA_DEVICE_MAX_CONNECTIONS"] == "8"
    assert "Load weight begin" in out


def test_assume_stack_plans_for_an_older_sglang_with_its_own_flag_spelling(capsys: pytest.CaptureFixture[str]) -> None:
    doc = dry_run_json(capsys, "--assume-stack", "sglang=0.5.9", "--profile", "lowgraph", "--", "--model-path", "m")
    assert doc["sglang_version"] == "0.5.9" and doc["flag_table"] == "bundled:sglang-0.5.9.json"
    assert doc["argv"][-2:] == ["--cuda-graph-max-bs", "128"]
    # 0.5.9 still has only the one spelling, so the old flag is exact there, not ambiguous.
    doc = dry_run_json(capsys, "--assume-stack", "sglang=0.5.9", "--", "--model-path", "m", "--cuda-graph-max-bs", "8")
    assert doc["argv"][-2:] == ["--cuda-graph-max-bs", "8"]


# --- memory gate ---------------------------------------------------------------------------------------------


def test_predicted_oom_blocks_the_launch_with_sglangs_own_words_and_a_fix(capsys: pytest.CaptureFixture[str],
                                                                          tmp_path: Path) -> None:
    """The reference story at 0.55: a sure OOM blocks once the checkpoint's size is read (its index); with the size
    only estimated from config.json the launch goes ahead with a warning."""
    import shutil

    from sglwrap.host.catalogue import resolve_assume
    from sglwrap.memory import plan

    model = tmp_path / "Kimi-K2.5"
    shutil.copytree(REPO / "sglwrap" / "data" / "models" / "Kimi-K2.5", model)
    tail = ["--tp-size", "8", "--mem-fraction-static", "0.55"]
    argv = ["launch", "--dry-run", "--assume", "8xRTX-PRO-6000", "--profile", "fewchan", "--",
            "--model-path", str(model), *tail]
    assert main(argv) == 0
    out = capsys.readouterr()
    assert "kv_pool_oom" in out.out + out.err and "estimated" in out.out + out.err
    total = plan(resolve_assume("8xRTX-PRO-6000"), {}, ["--model-path", str(model), *tail]).weights_info.total_bytes
    (model / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": total},
                                                                     "weight_map": {}}))
    assert main(argv) == 78
    err = capsys.readouterr().err
    assert "kv_pool_oom" in err and "Loaded weights leave no GPU memory" in err
    assert re.search(r"fix: --mem-fraction-static 0\.[789]\d* \(re-planned on this host: fits", err), err
    assert main(argv[:1] + ["--force", "--json"] + argv[1:]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["gates"]["memory"]["verdict"] == "kv_pool_oom"


def test_memory_gate_records_a_fitting_budget_in_the_manifest(capsys: pytest.CaptureFixture[str]) -> None:
    doc = dry_run_json(capsys, "--profile", "fewchan", "--", "--model-path", str(MODEL), "--tp-size", "8")
    mem = doc["gates"]["memory"]
    assert mem["verdict"] == "fits" and mem["kv_tokens"] > 0
    manifest = json.loads(Path(doc["manifest"]).read_text())
    assert manifest["gates"]["memory"]["kv_tokens"] == mem["kv_tokens"]


def test_memory_gate_never_blocks_what_it_cannot_plan(capsys: pytest.CaptureFixture[str]) -> None:
    doc = dry_run_json(capsys, "--", "--model-path", "some-org/not-in-any-local-cache", "--tp-size", "8")
    assert "skipped" in doc["gates"]["memory"]


def test_dry_run_text_shows_the_gates_verdicts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["launch", "--dry-run", "--assume", "8xRTX-PRO-6000", "--profile", "fewchan", "--",
                 "--model-path", str(MODEL), "--tp-size", "8"]) == 0
    err = capsys.readouterr().out  # the plan is the report: stdout
    assert "preflight ok" in err
    mem_line = next(ln for ln in err.splitlines() if ln.startswith("memory"))
    assert "fits" in mem_line and "tokens" in mem_line and "--mem-fraction-static 0.8" in mem_line


def test_assume_stack_picks_the_newest_bundled_table_not_newer_than_the_version(
        capsys: pytest.CaptureFixture[str]) -> None:
    from packaging.version import Version

    from sglwrap.sglang.flags import bundled_versions

    shipped = [Version(v) for v in bundled_versions()]
    for asked in ("0.4.6.post2", "0.5.2", "0.5.5", "0.5.20", "0.5.23rc1", "0.5.23"):
        older = [v for v in shipped if v <= Version(asked)]
        used = str(max(older)) if older else str(min(shipped))
        doc = dry_run_json(capsys, "--assume-stack", f"sglang={asked}", "--", "--model-path", "m")
        assert doc["flag_table"] == f"bundled:sglang-{used}.json", asked
        assert doc["sglang"]["version"] == asked and doc["sglang"]["source"] == "assumed"