"""Multi-node: node rank from the flags or the orchestrator (and which one), the profile hash on every node,
`diagnose` across the nodes' logs, and `--use-ray`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglwrap.cli import main
from sglwrap.errors import ConfigError
from sglwrap.multinode import first_slurm_host, place
from sglwrap.profiles import load_profile
from sglwrap.sglang.cmdline import parse_cmdline
from sglwrap.sglang.flags import bundled_table

from .conftest import REPO

FAKE = REPO / "tests" / "fixtures" / "fakeserver"
MODEL = REPO / "sglwrap" / "data" / "models" / "Llama-3.1-8B"
TABLE = bundled_table("0.5.23")
SLURM = {"SLURM_NODEID": "1", "SLURM_PROCID": "1", "SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "gpu[07-08]"}
LWS = {"LWS_WORKER_INDEX": "1", "LWS_GROUP_SIZE": "2", "LWS_LEADER_ADDRESS": "sglang-0.sglang.ns.svc"}
SKY = {"SKYPILOT_NODE_RANK": "2", "SKYPILOT_NUM_NODES": "3", "SKYPILOT_NODE_IPS": "10.0.0.5\n10.0.0.6\n10.0.0.7\n"}


@pytest.mark.parametrize(("env", "source", "added"), [
    pytest.param(SLURM, "Slurm SLURM_NODEID", ["--node-rank", "1", "--dist-init-addr", "gpu07:20000"], id="slurm"),
    pytest.param(LWS, "LeaderWorkerSet LWS_WORKER_INDEX",
                 ["--node-rank", "1", "--dist-init-addr", "sglang-0.sglang.ns.svc:20000"], id="lws"),
    pytest.param(SKY, "SkyPilot SKYPILOT_NODE_RANK", ["--node-rank", "2", "--dist-init-addr", "10.0.0.5:20000"],
                 id="skypilot"),
])
def test_rank_and_rendezvous_come_from_the_orchestrator(env: dict[str, str], source: str,
                                                        added: list[str]) -> None:
    nnodes = env.get("SLURM_NNODES") or env.get("LWS_GROUP_SIZE") or env.get("SKYPILOT_NUM_NODES")
    args = ["--model-path", "m", "--nnodes", str(nnodes)]
    p = place(parse_cmdline(args, TABLE), env)
    assert p.source == source
    assert list(p.added) == added
    assert list(p.sglang_args) == args + added
    assert p.node_rank == int(added[1])


def test_users_flags_win_and_a_disagreeing_orchestrator_is_noted() -> None:
    p = place(parse_cmdline(["--nnodes", "2", "--node-rank", "0", "--dist-init-addr", "h:1"], TABLE), SLURM)
    assert (p.source, p.node_rank, p.added, p.dist_init_addr) == ("--node-rank", 0, (), "h:1")
    assert p.notes and "SLURM_NODEID=1 (yours wins)" in p.notes[0]


def test_users_dist_init_addr_is_kept_and_the_port_variable_is_used() -> None:
    assert place(parse_cmdline(["--nnodes", "2", "--dist-init-addr", "head:5000"], TABLE), LWS).added == ("--node-rank", "1")
    p = place(parse_cmdline(["--nnodes", "2"], TABLE), {**LWS, "SGLWRAP_DIST_INIT_PORT": "29500"})
    assert p.dist_init_addr == "sglang-0.sglang.ns.svc:29500"


def test_single_node_is_left_alone_even_inside_an_allocation() -> None:
    p = place(parse_cmdline(["--model-path", "m"], TABLE), SLURM)
    assert (p.nnodes, p.node_rank, p.added, p.source) == (1, 0, (), "single node")
    assert p.notes and "SLURM_NNODES=2" in p.notes[0]


@pytest.mark.parametrize(("args", "env", "message"), [
    pytest.param(["--nnodes", "2"], {}, r"--nnodes 2 needs this node's --node-rank.*SLURM_NODEID.*LWS_WORKER_INDEX"
                 r".*SKYPILOT_NODE_RANK", id="no-source"),
    pytest.param(["--nnodes", "2"], {**SLURM, "SLURM_PROCID": "5"}, r"SLURM_PROCID=5 but SLURM_NODEID=1: .*"
                 r"--ntasks-per-node=1", id="several-tasks-per-node"),
    pytest.param(["--nnodes", "4"], SLURM, r"--nnodes 4 but SLURM_NNODES=2", id="count-mismatch"),
    pytest.param(["--nnodes", "2"], {"LWS_WORKER_INDEX": "2", "LWS_LEADER_ADDRESS": "x"},
                 r"LWS_WORKER_INDEX=2 is not a node rank for --nnodes 2 \(allowed 0-1\)", id="rank-out-of-range"),
    pytest.param(["--nnodes", "2"], {"LWS_WORKER_INDEX": "one"}, r"LWS_WORKER_INDEX='one': expected a node index",
                 id="rank-not-a-number"),
    pytest.param(["--nnodes", "2"], {"SLURM_NODEID": "1"}, r"needs --dist-init-addr HOST:PORT", id="no-leader"),
    pytest.param(["--nnodes", "2"], {**LWS, "SGLWRAP_DIST_INIT_PORT": "0"}, r"SGLWRAP_DIST_INIT_PORT='0'",
                 id="bad-port"),
])
def test_unusable_placements_are_refused_with_the_reason(args: list[str], env: dict[str, str],
                                                         message: str) -> None:
    with pytest.raises(ConfigError, match=message) as e:
        place(parse_cmdline(["--model-path", "m", *args], TABLE), env)
    assert e.value.exit_code == 78


@pytest.mark.parametrize(("nodelist", "first"), [
    ("gpu[003-010,015],cpu1", "gpu003"), ("node7", "node7"), ("a1,a2", "a1"), ("rack2-n[9,11]", "rack2-n9"),
])
def test_first_slurm_host(nodelist: str, first: str) -> None:
    assert first_slurm_host(nodelist) == first


# --- through the CLI ---------------------------------------------------------------------------------------------


def dry_run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict, str]:
    rc = main(["launch", "--dry-run", "--json", "--assume", "2xH200", *argv])
    out = capsys.readouterr()
    return rc, (json.loads(out.out) if rc == 0 else {}), out.err


def test_dry_run_reports_the_node_and_its_source(capsys: pytest.CaptureFixture[str],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in SKY.items():
        monkeypatch.setenv(k, v)
    rc, doc, err = dry_run(capsys, "--profile", "fewchan", "--", "--model-path", str(MODEL), "--nnodes", "3")
    assert rc == 0, err
    assert doc["node"]["source"] == "SkyPilot SKYPILOT_NODE_RANK" and doc["node"]["node_rank"] == 2
    assert doc["argv"][-4:] == ["--node-rank", "2", "--dist-init-addr", "10.0.0.5:20000"]


def test_use_ray_with_profile_variables_is_blocked_with_78(capsys: pytest.CaptureFixture[str]) -> None:
    rc, _doc, err = dry_run(capsys, "--profile", "fewchan", "--", "--model-path", str(MODEL), "--use-ray")
    assert rc == 78
    assert "--use-ray" in err and "Ray actors" in err and "NCCL_MAX_NCHANNELS" in err and "--force" in err


def test_use_ray_is_allowed_when_the_profile_sets_no_variables_or_with_force(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert not load_profile("baseline").env
    rc, _doc, err = dry_run(capsys, "--profile", "baseline", "--", "--model-path", str(MODEL), "--use-ray")
    assert rc == 0, err
    rc, doc, err = dry_run(capsys, "--profile", "fewchan", "--force", "--", "--model-path", str(MODEL),
                           "--use-ray")
    assert rc == 0, err
    assert any("--force given: launching anyway" in w for w in doc["warnings"])


# --- every node logs the hash; diagnose compares the nodes -------------------------------------------------------


def launch_node(tmp_path: Path, name: str, profile: str, **extra: str) -> Path:
    env = dict(os.environ)
    env.update(SLURM)
    env.update(extra)
    env["PYTHONPATH"] = f"{REPO}{os.pathsep}{FAKE}"
    env["SGLWRAP_SERVER_MODULE"] = "fake_sglang_server"
    env["SGLWRAP_LOG_FORMAT"] = "json"
    run = tmp_path / f"run-{name}"
    run.mkdir(mode=0o700)
    env["XDG_RUNTIME_DIR"] = str(run)
    # --force: this GPU-less host fails preflight's CUDA checks; the fake server needs no GPU
    res = subprocess.run([sys.executable, "-m", "sglwrap", "launch", "--force", "--profile", profile, "--",
                          "--model-path", "m", "--nnodes", "2"], capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 0, res.stderr
    log = tmp_path / f"{name}.log"
    log.write_text(res.stderr)
    return log


def test_every_node_logs_the_hash_and_diagnose_names_the_node_that_differs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = launch_node(tmp_path, "node-a", "fewchan", SLURM_NODEID="0", SLURM_PROCID="0")
    b = launch_node(tmp_path, "node-b", "fewchan")
    c = launch_node(tmp_path, "node-c", "lowgraph", NCCL_MIN_NCHANNELS="4")
    want = load_profile("fewchan").hash
    for log, rank in ((a, 0), (b, 1)):
        lines = [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
        exec_line = next(x for x in lines if x.get("event") == "launch.exec")
        assert (exec_line["hash"], exec_line["node_rank"], exec_line["rank_source"]) == (want, rank,
                                                                                          "Slurm SLURM_NODEID")
        assert next(x for x in lines if x.get("sglwrap") == "worker-env")["hash"] == want

    assert main(["diagnose", "--json", str(a), str(b)]) in (0, 1)
    assert json.loads(capsys.readouterr().out)["env_disagreements"] == []

    # c is node 1 of the same launch with another profile (b and c both being node 1 would be two launches)
    main(["diagnose", "--json", str(a), str(c)])
    found = " | ".join(json.loads(capsys.readouterr().out)["env_disagreements"])
    assert "node-c.log" in found
    assert load_profile("lowgraph").hash[:12] in found, found
    assert "NCCL_MIN_NCHANNELS=4" in found, found
