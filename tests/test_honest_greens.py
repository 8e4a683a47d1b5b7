"""No green where SGLang would fail or serve less than asked: a model path that is not there, a context the KV pool
cannot hold, a port no socket takes, a captured host without GPUs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglwrap.cli import main
from sglwrap.host import capture
from sglwrap.host.catalogue import resolve_assume
from sglwrap.host.facts import HostFacts, load_facts
from sglwrap.preflight import Status, run_preflight
from sglwrap.preflight import checks_model as cm
from sglwrap.record import replace
from sglwrap.sglang.flags import bundled_table

from .conftest import REPO

MODEL = str(REPO / "sglwrap" / "data" / "models" / "Llama-3.1-8B")


def _checks(facts: HostFacts, argv: list[str]) -> dict[str, object]:
    r = run_preflight(facts, None, argv, flags=bundled_table("0.5.23"), checks=(cm.check_model_arch,))
    return {v.id: v for v in r.checks}


def _live(spec: str = "8xH100") -> HostFacts:
    """The facts of a live host as NVML would give them (the GPU boundary)."""
    return replace(resolve_assume(spec), source="nvml", packages={"sglang": "0.5.23"})


@pytest.mark.parametrize("path", ["/models/no-such-model", "./weights/llama", "~/no/such/dir/model"])
def test_a_missing_local_model_path_warns_when_planned_and_blocks_live(path: str) -> None:
    planned = _checks(replace(resolve_assume("8xH100"), packages={"sglang": "0.5.23"}),
                      ["--model-path", path])["model-arch"]
    live = _checks(_live(), ["--model-path", path])["model-arch"]
    assert planned.status == Status.WARN and live.status == Status.BLOCK  # type: ignore[attr-defined]
    for v in (planned, live):
        assert path in v.reason and "gemma-2-9b" not in v.reason  # type: ignore[attr-defined]


def test_a_directory_without_config_json_blocks_live(tmp_path: Path) -> None:
    live = _checks(_live(), ["--model-path", str(tmp_path)])["model-arch"]
    assert live.status == Status.BLOCK and "config.json" in live.reason  # type: ignore[attr-defined]


def test_a_hub_id_not_in_the_cache_is_not_blocked() -> None:
    v = _checks(_live(), ["--model-path", "some-org/some-model-not-cached"])["model-arch"]
    assert v.status == Status.SKIP  # type: ignore[attr-defined]


def test_memory_for_a_missing_path_names_it_without_the_whole_catalogue(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["memory", "--assume", "8xH100", "--", "--model-path", "/models/Qwen3-9B"])
    err = capsys.readouterr().err
    assert rc == 64 and "/models/Qwen3-9B" in err
    assert "gemma-2-9b" not in err and "Qwen3-8B" in err  # close names, not all of them
    rc = main(["memory", "--assume", "8xH100", "--", "--model-path", "/srv/weights/my-finetune"])
    err = capsys.readouterr().err
    assert rc == 64 and "/srv/weights/my-finetune" in err and "gemma-2-9b" not in err


def _memory(capsys: pytest.CaptureFixture[str], *sglang: str) -> tuple[int, dict, str]:
    rc = main(["memory", "--json", "--assume", "1xL4", "--", "--model-path", "Qwen3-8B", *sglang])
    out = capsys.readouterr()
    return rc, json.loads(out.out), out.err


def test_an_explicit_context_the_pool_cannot_hold_is_reported_capped_with_a_fix(
        capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--kv-cache-dtype", "fp8_e4m3", "--mem-fraction-static", "0.8", "--context-length", "40960"]
    rc, doc, err = _memory(capsys, *argv)
    assert rc == 0 and doc["kv_tokens"] < 40960
    cap = doc["context_capped"]
    assert cap["context_length"] == 40960 and cap["max_request_tokens"] == doc["kv_tokens"] - 1
    assert "capped" in err and f"{doc['kv_tokens'] - 1:,}" in err
    fix = cap["fix"].split()  # "--mem-fraction-static X": taking it holds one full-length request
    assert fix[0] == "--mem-fraction-static"
    rc2, doc2, _ = _memory(capsys, *argv, *fix)
    assert rc2 == 0 and doc2["kv_tokens"] >= 40960 and doc2["context_capped"] is None


def test_a_context_the_pool_holds_is_not_capped(capsys: pytest.CaptureFixture[str]) -> None:
    rc, doc, _ = _memory(capsys, "--kv-cache-dtype", "fp8_e4m3", "--mem-fraction-static", "0.8",
                         "--context-length", "4096")
    assert rc == 0 and doc["context_capped"] is None


@pytest.mark.parametrize("port", ["0", "99999", "-1", "65536"])
def test_a_port_no_socket_can_bind_is_refused(port: str, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["preflight", "--assume", "8xH100", "--", "--model-path", MODEL, "--port", port])
    err = capsys.readouterr().err
    assert rc == 64 and f"--port {port}" in err and "65535" in err


def test_the_highest_port_is_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["preflight", "--assume", "8xH100", "--", "--model-path", MODEL, "--port", "65535"]) != 64


def test_a_capture_without_gpus_warns_and_plans_as_the_live_host_would(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    empty = HostFacts(source="nvml", gpus=(), links=(), nvswitch=False, provenance="test",
                      notes=("NVML could not start (NVML Shared Library Not Found): no NVIDIA driver or no GPU",))
    monkeypatch.setattr(capture, "probe_nvml", lambda: empty)
    out = tmp_path / "host.json"
    assert capture.main(["--out", str(out), "--no-stack-probe"]) == 0
    err = capsys.readouterr().err
    assert "warning" in err.lower() and "0 GPU" in err
    captured = load_facts(out)
    argv = ["--model-path", MODEL]
    live = run_preflight(replace(empty, packages=captured.packages), None, argv,
                         flags=bundled_table("0.5.23"))
    planned = run_preflight(captured, None, argv, flags=bundled_table("0.5.23"))
    assert live.verdict == planned.verdict == "blocked"
    status = {v.id: v.status for v in planned.checks}
    assert status["nvml"] == {v.id: v.status for v in live.checks}["nvml"] == Status.BLOCK


def test_a_launch_plan_says_the_context_is_capped(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["launch", "--dry-run", "--assume", "1xL4", "--", "--model-path", "Qwen3-8B", "--kv-cache-dtype",
               "fp8_e4m3", "--mem-fraction-static", "0.8", "--context-length", "40960"])
    out = capsys.readouterr().out
    assert rc == 0 and "context capped at" in out and "--context-length 40,960" in out
