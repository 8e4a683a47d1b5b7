"""diagnose on the output of a real `sglwrap launch --profile fewchan` of SGLang 0.5.23 on a CPU-only machine.

The fixture is the captured stderr+stdout of: sglwrap launch --profile fewchan -- --model-path <Qwen3-0.6B config>
--load-format dummy --skip-tokenizer-init --device cpu (2026-11-30, this repository's CI machine). SGLang spawned
its scheduler processes and stopped at "Load weight begin" (no vllm on CPU).
"""

from __future__ import annotations

import json

import pytest

from sglwrap.cli import main

from .conftest import REPO

LOG = REPO / "tests" / "fixtures" / "logs" / "real_sglang-0.5.23_cpu_fewchan.log"


def test_diagnose_reports_each_real_process_and_its_nccl_env(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["diagnose", "--json", str(LOG)])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 1
    assert doc["outcome"] == "error" and doc["stage"] == "weight_load"
    assert "vllm" in doc["error"]
    roles = [w["role"] for w in doc["workers"]]
    assert roles.count("module:sglang.launch_server") == 1 and roles.count("spawn-worker") >= 1
    launcher = next(w for w in doc["workers"] if w["role"] == "module:sglang.launch_server")
    for w in doc["workers"]:
        assert w["profile"] == "fewchan" and w["hash"] == launcher["hash"]
        if w["role"] == "spawn-worker":
            assert w["ppid"] == launcher["pid"]
            assert w["nccl_env"]["NCCL_MIN_NCHANNELS"] == "1"
            assert w["nccl_env"]["NCCL_CUMEM_ENABLE"] == "0"  # SGLang's own default reached the workers
    assert doc["env_disagreements"] == []
    assert doc["ranks"][0]["avail_before_weights_gib"] == pytest.approx(20.97)
