"""A server spread over nodes (`--tp-size 16 --nnodes 2` on 8-GPU nodes) is planned per node: memory per rank on
one node's GPUs, preflight's GPU count per node; Slurm/LWS ranks as before."""

from __future__ import annotations

import json

import pytest

from sglwrap.cli import main

from .conftest import REPO

LLAMA_405B = str(REPO / "sglwrap" / "data" / "models" / "Llama-3.1-405B")
SLURM = {"SLURM_NODEID": "1", "SLURM_PROCID": "1", "SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "gpu[07-08]"}


def _memory(capsys: pytest.CaptureFixture[str], *sglang: str) -> tuple[int, dict, str]:
    rc = main(["memory", "--json", "--assume", "8xH100", "--", "--model-path", LLAMA_405B, *sglang])
    out = capsys.readouterr()
    return rc, (json.loads(out.out) if out.out else {}), out.err


def test_memory_plans_tp16_over_two_8_gpu_nodes_per_node(capsys: pytest.CaptureFixture[str]) -> None:
    rc, two, err = _memory(capsys, "--tp-size", "16", "--nnodes", "2")
    assert rc in (0, 1), err
    assert two["parallel"]["tp"] == 16 and two["parallel"]["nnodes"] == 2 and two["gpu"]["count"] == 8
    _, one, _ = _memory(capsys, "--tp-size", "8")
    # a rank of TP 16 holds half the weights of a rank of TP 8
    assert two["weights_bytes_per_rank"] < 0.6 * one["weights_bytes_per_rank"]
    # the TP group spans the nodes: SGLang turns its custom all-reduce off ("spans across nodes")
    assert two["terms"]["custom_allreduce"] == 0 and one["terms"]["custom_allreduce"] > 0


def test_more_gpus_per_node_than_the_host_has_is_still_refused(capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, err = _memory(capsys, "--tp-size", "32", "--nnodes", "2")
    assert rc == 64 and "per node" in err and "16" in err


def test_launch_dry_run_plans_memory_for_the_node(capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in SLURM.items():
        monkeypatch.setenv(k, v)
    rc = main(["launch", "--dry-run", "--json", "--assume", "8xH100", "--", "--model-path", LLAMA_405B,
               "--tp-size", "16", "--nnodes", "2"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert doc["node"]["node_rank"] == 1 and doc["node"]["nnodes"] == 2
    assert "verdict" in doc["gates"]["memory"], doc["gates"]["memory"]
    assert doc["gates"]["preflight"]["verdict"] == "ok"


def test_preflight_counts_gpus_and_all_reduce_per_node(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["preflight", "--json", "--assume", "8xH100", "--", "--model-path", LLAMA_405B, "--tp-size", "16",
               "--nnodes", "2"])
    checks = {c["id"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert rc in (0, 1)
    assert checks["gpu-count"]["status"] == "pass" and "8 of 8" in checks["gpu-count"]["reason"]
    assert checks["custom-allreduce"]["status"] == "pass" and "nodes" in checks["custom-allreduce"]["reason"]
    assert checks["memory"]["status"] != "skip", checks["memory"]
