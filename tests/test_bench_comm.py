"""`sglwrap bench-comm` end to end on CPU: the same harness with --backend gloo, real torch rank processes.

Each run starts fresh worker processes through the injector; these tests check the JSON contract, that the
profile's variables reached every rank, that a hung configuration is killed and reported, --write-profile,
--plot/--output (never overwriting) and that sglwrap's own process never imports torch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from sglwrap.profiles import load_profile

from .conftest import REPO, run_sglwrap

torch_missing = False
try:  # the rank processes need torch; sglwrap's process does not import it
    import importlib.util

    torch_missing = importlib.util.find_spec("torch") is None
except Exception:
    torch_missing = True

pytestmark = pytest.mark.skipif(torch_missing, reason="the rank processes need torch (gloo on CPU)")

GLOO = ("bench-comm", "--backend", "gloo", "--world-size", "2", "--budget", "0.02", "--min-samples", "5",
        "--no-progress")


def bench(*args: str, env_extra: dict[str, str] | None = None, timeout: float = 240
          ) -> tuple[subprocess.CompletedProcess[str], dict[str, Any] | None]:
    env = dict(os.environ)
    env.update(env_extra or {})
    proc = run_sglwrap(*GLOO, *args, env=env, timeout=timeout)
    doc = json.loads(proc.stdout) if "--json" in args and proc.stdout.strip() else None
    return proc, doc


@pytest.fixture(scope="module")
def two_profiles(tmp_path_factory: pytest.TempPathFactory, session_cache: Path) -> dict[str, Any]:
    """One gloo run of baseline + fewchan + a forcing user profile, shared by the contract tests."""
    tmp = tmp_path_factory.mktemp("bench")
    home = tmp / "home"
    (home / ".config").mkdir(parents=True)
    runtime = tmp / "run"
    runtime.mkdir(mode=0o700)
    profdir = tmp / "profiles"
    profdir.mkdir()
    # SGLang's launcher always sets CUDA_DEVICE_MAX_CONNECTIONS=8; only the injector's force can undo that in a
    # rank, so a rank reporting 4 proves the rendered sitecustomize ran inside it.
    (profdir / "forcer.yaml").write_text(yaml.safe_dump({
        "name": "forcer", "description": "test: forces a variable SGLang overwrites", "extends": "baseline",
        "env": {"CUDA_DEVICE_MAX_CONNECTIONS": {"value": 4, "force": True}, "NCCL_PROTO": "LL"}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "SGLWRAP_"))}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"), XDG_RUNTIME_DIR=str(runtime),
               XDG_CACHE_HOME=str(session_cache),
               SGLWRAP_PROFILE_PATH=str(profdir), SGLWRAP_SYSTEM_PROFILE_DIR=str(tmp / "etc"))
    env["PYTHONPATH"] = str(REPO)
    plot = tmp / "lat.png"
    out = tmp / "bench.json"
    argv = [sys.executable, "-m", "sglwrap", *GLOO, "--profile", "baseline", "--profile", "fewchan", "--profile",
            "forcer", "--sizes", "4K,16K", "--json", "--plot", str(plot), "--output", str(out)]
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300)
    return {"proc": proc, "doc": json.loads(proc.stdout), "plot": plot, "out": out, "env": env,
            "argv": argv, "profdir": profdir, "wall": time.monotonic() - t0}


def test_json_contract_one_object_rows_per_profile_and_size(two_profiles: dict[str, Any]) -> None:
    proc, doc = two_profiles["proc"], two_profiles["doc"]
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().startswith("{") and proc.stdout.strip().endswith("}")
    assert {"version", "start_time", "end_time", "config", "devices", "configs", "results"} <= set(doc)
    rows = doc["results"]
    assert {(r["profile"], r["size_bytes"]) for r in rows} == {
        (p, s) for p in ("baseline", "fewchan", "forcer") for s in (4096, 16384)}
    for r in rows:
        assert {"profile", "size_bytes", "latency_us", "latency_us_p90", "mode", "nccl_mem_bytes"} <= set(r)
        assert r["mode"] == "eager"
        assert r["nccl_mem_bytes"] is None  # gloo: no device memory
        assert 0 < r["latency_us_min"] <= r["latency_us"] <= r["latency_us_p90"]
        assert r["samples"] >= 5 and r["nwrong"] == 0
        assert r["count"] * 2 == r["size_bytes"] and r["type"] == "bfloat16"
        assert r["alg_bw"] == pytest.approx(r["size_bytes"] / (r["latency_us"] * 1e-6) / 1e9, rel=1e-3)
        assert r["bus_bw"] == pytest.approx(r["alg_bw"] * 2 * (2 - 1) / 2, rel=1e-3)
    assert [c["status"] for c in doc["configs"]] == ["ok", "ok", "ok"]


def test_stderr_has_the_nccl_tests_table_and_summary(two_profiles: dict[str, Any]) -> None:
    err = two_profiles["proc"].stderr
    assert "#       size         count      type   mode     time      p90    algbw    busbw  #wrong" in err
    data = [ln.split() for ln in err.splitlines() if ln and not ln.startswith("#") and ln.split()[0].isdigit()]
    assert [d[0] for d in data].count("4096") == 3  # one row per profile
    assert all(d[2] == "bfloat16" and d[3] == "eager" for d in data)
    assert "# Summary: median us per all-reduce" in err
    for name in ("baseline", "fewchan", "forcer"):
        assert any(ln.split()[:2] == [name, "eager"] for ln in err.splitlines()), name


def test_the_injector_reached_every_rank(two_profiles: dict[str, Any]) -> None:
    confs = {c["name"]: c for c in two_profiles["doc"]["configs"]}
    env = two_profiles["env"]
    for name in ("baseline", "fewchan", "forcer"):
        expected_hash = load_profile(name, env).hash
        ranks = confs[name]["ranks"]
        assert [r["rank"] for r in ranks] == [0, 1]
        assert len({r["pid"] for r in ranks}) == 2  # one fresh process per rank
        for r in ranks:
            assert r["injector"]["loaded"] is True
            assert r["injector"]["hash"] == expected_hash
            assert r["worker_env"]["profile"] == name and r["worker_env"]["pid"] == r["pid"]
            assert r["env"]["NCCL_CUMEM_ENABLE"] == "0"  # what SGLang's launcher sets before it spawns
            assert r["env"]["NCCL_NVLS_ENABLE"] == "0" and r["env"]["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    for r in confs["fewchan"]["ranks"]:
        assert {k: r["env"][k] for k in ("NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_BUFFSIZE")} == {
            "NCCL_MIN_NCHANNELS": "1", "NCCL_MAX_NCHANNELS": "2", "NCCL_BUFFSIZE": "131072"}
    for r in confs["baseline"]["ranks"]:
        assert "NCCL_MIN_NCHANNELS" not in r["env"] and r["env"]["CUDA_DEVICE_MAX_CONNECTIONS"] == "8"
    for r in confs["forcer"]["ranks"]:
        assert r["env"]["NCCL_PROTO"] == "LL"
        assert r["env"]["CUDA_DEVICE_MAX_CONNECTIONS"] == "4"  # only the sitecustomize in the rank can do this
        assert r["worker_env"]["applied"]["CUDA_DEVICE_MAX_CONNECTIONS"] == "forced(was 8)"


def test_plot_and_output_files_are_written_and_never_overwritten(two_profiles: dict[str, Any]) -> None:
    doc, plot, out = two_profiles["doc"], two_profiles["plot"], two_profiles["out"]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert doc["outputs"] == {"plot": str(plot), "json": str(out)}
    saved = json.loads(out.read_text())
    assert saved["results"] == doc["results"]
    assert not [p for p in plot.parent.iterdir() if p.name.endswith(".tmp")]


def test_sglwrap_process_never_imports_torch(tmp_path: Path) -> None:
    code = ("import sys\nfrom sglwrap.cli import main\n"
            f"rc = main({list(GLOO) + ['--sizes', '4K', '--json']!r})\n"
            "assert 'torch' not in sys.modules, 'torch imported in the sglwrap process'\n"
            "sys.stderr.write('RC=%d\\n' % rc)\n")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=240)
    assert proc.returncode == 0 and "RC=0" in proc.stderr, proc.stderr[-2000:]
    json.loads(proc.stdout)


def test_a_hung_configuration_is_killed_and_reported_and_the_rest_still_run() -> None:
    t0 = time.monotonic()
    proc, doc = bench("--profile", "baseline", "--profile", "fewchan", "--sizes", "4K", "--timeout", "8",
                      "--json", env_extra={"SGLWRAP_BENCH_FAULT": "hang:1@fewchan"})
    wall = time.monotonic() - t0
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert doc is not None
    confs = {c["name"]: c for c in doc["configs"]}
    assert confs["baseline"]["status"] == "ok"
    assert confs["fewchan"]["status"] == "timeout"
    assert "no result after 8 s" in confs["fewchan"]["error"] and "killed" in confs["fewchan"]["error"]
    assert {r["profile"] for r in doc["results"]} == {"baseline"}
    assert "TIMEOUT: no result after 8 s" in proc.stderr
    assert "1 configuration(s) not measured: fewchan" in proc.stderr
    assert wall < 90
    for r in confs["fewchan"]["ranks"]:  # every rank process of the hung configuration is gone
        assert r["pid"] is not None
        with pytest.raises(ProcessLookupError):
            os.kill(r["pid"], 0)


def test_a_crashed_rank_fails_its_configuration_fast() -> None:
    t0 = time.monotonic()
    proc, doc = bench("--profile", "baseline", "--sizes", "4K", "--timeout", "120", "--json",
                      env_extra={"SGLWRAP_BENCH_FAULT": "crash:1"})
    assert proc.returncode == 1
    assert doc is not None
    conf = doc["configs"][0]
    assert conf["status"] == "failed" and conf["error"].startswith("rank 1 failed")
    assert any("injected crash" in line for r in conf["ranks"] for line in r["tail"])
    assert time.monotonic() - t0 < 60  # not the 120 s timeout: the surviving rank was killed soon after


def test_write_profile_writes_a_valid_profile_that_extends_its_base(tmp_path: Path) -> None:
    profdir = tmp_path / "userprofiles"
    env = {"SGLWRAP_PROFILE_PATH": f"{profdir}:{tmp_path / 'other'}"}
    proc, doc = bench("--profile", "baseline", "--sweep-var", "channels=2", "--sizes", "4K,16K",
                      "--write-profile", "cpu-winner", "--json", env_extra=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert doc is not None
    path = profdir / "cpu-winner.yaml"
    assert doc["written_profile"]["path"] == str(path)
    raw = yaml.safe_load(path.read_text())
    assert raw["name"] == "cpu-winner" and raw["extends"] == "baseline"
    assert "bench-comm" in raw["description"] and " us (vs " in raw["description"]
    assert any("4 KiB (4096 B)" in e for e in raw["evidence"])
    prof = load_profile("cpu-winner", dict(os.environ, **env))
    assert prof.hash == doc["written_profile"]["hash"]
    if doc["winner"]["name"] == "baseline+ch=2":
        assert raw["env"] == {"NCCL_MIN_NCHANNELS": "2", "NCCL_MAX_NCHANNELS": "2"}
        assert prof.env["NCCL_MAX_NCHANNELS"].value == "2"
    else:
        assert doc["winner"]["name"] == "baseline" and "env" not in raw
    assert [c["name"] for c in doc["configs"]] == ["baseline", "baseline+ch=2"]
    assert doc["configs"][1]["kind"] == "sweep"
    for r in doc["configs"][1]["ranks"]:
        assert r["env"]["NCCL_MIN_NCHANNELS"] == "2" and r["env"]["NCCL_MAX_NCHANNELS"] == "2"
    before = path.read_text()
    proc2, _ = bench("--profile", "baseline", "--sizes", "4K", "--write-profile", "cpu-winner", env_extra=env)
    assert proc2.returncode == 78 and "already exists" in proc2.stderr
    assert "# [1/1]" not in proc2.stderr  # refused before any rank started
    assert path.read_text() == before
    assert not [p for p in profdir.iterdir() if p.name.startswith(".")]  # no staging left behind


def test_model_sizes_come_from_config_json() -> None:
    proc, doc = bench("--model-path", "Llama-3.1-8B", "--tp", "2", "--decode-bs", "1,8", "--spec-tokens", "4",
                      "--max-size", "1K", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert doc is not None
    sizes = {s["size_bytes"]: s["label"] for s in doc["config"]["sizes"]}
    assert sizes == {1024: "", 8192: "decode bs=1", 32768: "verify bs=1x4", 65536: "decode bs=8",
                     262144: "verify bs=8x4"}  # hidden 4096 x bf16 = 8 KiB per token
    assert doc["config"]["targets"] == [8192, 32768, 65536, 262144]
    assert doc["config"]["model"]["hidden_size"] == 4096 and doc["config"]["graph_ops"] == 64


@pytest.mark.parametrize("args, code, text", [
    (("--graph",), 64, "--graph needs --backend nccl"),
    (("--tp", "2", "--world-size", "4"), 64, "disagree"),
    (("--sizes", "4X"), 64, "is not a size"),
    (("--sweep-var", "NCCL_PROTO=Fast"), 64, "NCCL_PROTO=Fast"),
    (("--sweep-var", "NCCL_CHANELS=2"), 64, "unknown variable"),
    (("--profile", "nosuchprofile"), 78, "not found"),
    (("--model-path", "/nonexistent/model"), 78, "no config.json"),
    (("--write-profile", "../evil"), 64, "not valid"),
    (("--repeat", "0"), 64, "--repeat must be at least 1"),
])
def test_bad_command_lines_are_refused_before_any_rank_starts(args: tuple[str, ...], code: int, text: str) -> None:
    proc = run_sglwrap(*GLOO, *args, "--json", timeout=60)
    assert proc.returncode == code, proc.stderr
    assert text in proc.stderr
    assert proc.stdout == ""


def test_repeat_interleaves_fresh_runs_and_reports_run_medians(tmp_path: Path) -> None:
    profdir = tmp_path / "userprofiles"
    plot = tmp_path / "r3.png"
    proc, doc = bench("--profile", "baseline", "--sweep-var", "channels=2", "--sizes", "4K", "--repeat", "3",
                      "--write-profile", "cpu-r3", "--plot", str(plot), "--json",
                      env_extra={"SGLWRAP_PROFILE_PATH": str(profdir)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert doc is not None
    assert doc["config"]["repeat"] == 3 and doc["config"]["order"] == "interleaved"
    names = [c["name"] for c in doc["configs"]]
    assert names == ["baseline", "baseline+ch=2"]
    # Every rank of every run reported the sequence number it was started with: A B A B A B.
    ran = sorted((seq, c["name"]) for c in doc["configs"] for run in c["runs"] for seq in run["seq_reported"])
    assert [n for _, n in ran[::2]] == names * 3 and [s for s, _ in ran] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5]
    pids = [p for c in doc["configs"] for run in c["runs"] for p in run["pids"]]
    assert len(set(pids)) == 12  # fresh rank processes for every run
    assert [r["repeat_index"] for r in doc["configs"][0]["runs"]] == [0, 1, 2]
    assert len(doc["results"]) == 2
    for r in doc["results"]:
        runs = r["latency_us_runs"]
        assert r["repeat"] == 3 and len(runs) == 3 and all(x > 0 for x in runs)
        assert r["latency_us"] == sorted(runs)[1]  # the median of the run medians
        assert (r["latency_us_runs_p10"], r["latency_us_runs_p90"]) == (min(runs), max(runs))
        assert r["samples"] >= 15 and r["nwrong"] == 0 and r["nccl_mem_bytes"] is None
    w = doc["winner"]
    assert w["repeat"] == 3 and "3/4 of the interleaved pairs" in w["rule"]
    assert set(w["pairs_won"]) == {"baseline+ch=2"} and w["pairs_needed"] == 3
    assert "    runlo    runhi    N  label" in proc.stderr
    assert "over 3 interleaved runs" in proc.stderr and "(run order: 0 2 4)" in proc.stderr
    raw = yaml.safe_load((profdir / "cpu-r3.yaml").read_text())
    assert "ran 3 times in fresh processes, interleaved" in raw["description"]
    assert "Rule: N interleaved runs each" in raw["description"]
    assert "3 run(s) each" in raw["evidence"][0]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
