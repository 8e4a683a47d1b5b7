"""Logs unlike the corpus it was written on: other accelerators' out-of-memory wording, SGLang's own pool errors read
from the release source, flattened and cut excerpts, CPU-offload and memory-saver paths, and a log whose last launch
came up after an earlier one failed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglwrap.cli import main
from sglwrap.diagnose import diagnose_lines
from sglwrap.diagnose.catalogue import by_id
from sglwrap.diagnose.cause import Finding, decide

CORPUS = Path(__file__).parent / "corpus" / "diagnose"
SRT = '  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/'


def _finding(lines: list[str]) -> Finding:
    node = diagnose_lines("", lines)
    return decide((node,), node.ranks, None)


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    rc = main(["diagnose", "--json", *args])
    return rc, json.loads(capsys.readouterr().out)


# Published wording (ROCm/TheRock#1054, torch's HIP build; TheRock#2118 for the "Search for `hip…'" line;
# sgl-project/sglang#29838 for torch_npu; fzyzcjy/torch_memory_saver#99 for the driver's code).
HIP_OOM = ("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 16.00 GiB. GPU 0 has a total capacity of "
           "15.24 GiB of which 15.09 GiB is free. Of the allocated memory 0 bytes is allocated by PyTorch, and 0 bytes "
           "is reserved by PyTorch but unallocated.")
HIP_CODE = ("Search for `hipErrorOutOfMemory' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__HIPRT__TYPES.html "
            "for more information.")
NPU_OOM = ("torch.OutOfMemoryError: NPU out of memory. Tried to allocate 72.00 MiB (NPU 0; 61.27 GiB total capacity; "
           "56.05 GiB already allocated; 56.05 GiB current active; 5.04 MiB free; 58.39 GiB reserved in total by "
           "PyTorch).")
DRIVER_OOM = "[torch_memory_saver.cpp] cudaError error: 2 (out of memory)  file=csrc/core.cpp func=resume line=172"


def test_hip_and_npu_wording_is_an_out_of_memory_of_that_device() -> None:
    hip = _finding([HIP_OOM])
    assert hip.outcome == "oom" and "GPU (ROCm/HIP) memory" in hip.cause and "15.24 GiB" in hip.cause
    assert _finding([HIP_CODE]).outcome == "oom"
    assert _finding(["cuMemCreate failed: CUDA_ERROR_OUT_OF_MEMORY"]).outcome == "oom"
    musa = _finding(["torch.OutOfMemoryError: MUSA out of memory. Tried to allocate 2.00 GiB."])
    assert musa.outcome == "oom" and "GPU (MUSA) memory" in musa.cause
    npu = _finding([NPU_OOM])
    assert npu.outcome == "oom" and "NPU memory" in npu.cause
    assert "of 61.27 GiB on NPU 0" in npu.cause  # torch_npu's "(NPU 0; … total capacity; … free)" numbers are read


def test_an_out_of_memory_with_no_startup_step_does_not_blame_the_weights() -> None:
    finding = _finding([NPU_OOM])
    assert finding.stage == "init" and "loading weights" not in finding.cause
    assert "cannot tell" in finding.cause


def test_sglangs_own_pool_errors_come_from_the_release_source_and_are_not_a_device_oom() -> None:
    templates = [m.template for m in by_id()["kv_exhausted"]]
    assert any(t.startswith("Decode out of memory. Try to lower your batch size") for t in templates)
    for line in ("RuntimeError: Decode out of memory. Try to lower your batch size.",
                 "RuntimeError: alloc_req_slots runs out of memory. Please set a smaller number for "
                 "`--max-running-requests`. req_to_token_pool.available_size()=0, num_reqs=2,"):
        finding = _finding([line])
        assert (finding.outcome, finding.stage) == ("error", "serving"), line
        assert "not a failed device allocation" in finding.cause
    # the retraction warning of old releases ("Decode out of memory happened") is survived, not a failure
    assert _finding(["Decode out of memory happened. #retracted_reqs: 1, #new_token_ratio: 0.3 -> 0.5"]).outcome \
        == "incomplete"


def test_memory_saver_resume_is_a_running_server_and_its_retry_warning_is_not_fatal() -> None:
    warn = ("[torch_memory_saver.cpp] cuMemCreate CUDA_ERROR_OUT_OF_MEMORY (may not be an issue e.g. torch allocator "
            "will free cache and retry)")
    finding = _finding([warn, DRIVER_OOM])
    assert (finding.outcome, finding.stage) == ("oom", "serving")
    assert "--enable-memory-saver" in finding.cause and finding.error is not None and "func=resume" in finding.error
    assert _finding([warn]).outcome == "incomplete"


def test_an_oom_inside_the_cpu_offload_path_names_that_path() -> None:
    # frames as SGLang 0.5.23 names them (utils/offloader.py OffloaderV1.wrap_modules -> maybe_offload_to_cpu)
    lines = ["Traceback (most recent call last):",
             SRT + 'model_executor/model_runner.py", line 9, in initialize',
             SRT + 'utils/offloader.py", line 142, in wrap_modules',
             SRT + 'utils/offloader.py", line 175, in maybe_offload_to_cpu',
             "RuntimeError: CUDA error: out of memory"]
    finding = _finding(lines)
    assert (finding.outcome, finding.stage) == ("oom", "weight_load")
    assert "--cpu-offload-gb" in finding.cause and "offloader.maybe_offload_to_cpu" in finding.cause
    assert "--cpu-offload-gb" in (finding.fix or "")


def test_a_kv_pool_constructor_frame_names_the_kv_pool_but_its_per_batch_methods_do_not() -> None:
    oom = "RuntimeError: NPU out of memory. Tried to allocate 98.71 GiB (NPU 0; 60.96 GiB total capacity; 1 GiB free)"
    pool = [SRT + 'mem_cache/memory_pool.py", line 736, in __init__', "    self._create_buffers()", oom]
    assert _finding(pool).stage == "kv_pool"
    batch = [SRT + 'managers/scheduler.py", line 9, in event_loop_overlap',
             SRT + 'mem_cache/memory_pool.py", line 900, in set_kv_buffer', oom]
    assert _finding(batch).stage == "serving"


@pytest.mark.parametrize("fn", ["exposed_step", "forward_thread_func", "run_batch"])
def test_the_forward_loop_of_a_running_server_is_serving(fn: str) -> None:
    lines = ["Exception in ModelTpServer:", "Traceback (most recent call last):",
             SRT + f'managers/tp_worker.py", line 9, in {fn}', "RuntimeError: CUDA error: out of memory"]
    assert _finding(lines).stage == "serving"


def test_a_report_cut_inside_its_traceback_says_so_and_names_the_last_frame() -> None:
    lines = ["[2026-03-03 03:53:36 TP0] Scheduler hit an exception: Traceback (most recent call last):",
             SRT + 'managers/scheduler.py", line 9, in event_loop_overlap',
             SRT + 'mem_cache/common.py", line 412, in alloc_paged_token_slots_extend']
    finding = _finding(lines)
    assert (finding.outcome, finding.stage) == ("error", "serving")
    assert "cut off" in finding.cause and "common.alloc_paged_token_slots_extend" in finding.cause
    assert "not a memory error" not in finding.cause


def test_a_headerless_traceback_cut_before_its_error_is_incomplete_at_its_step() -> None:
    lines = ['File "/sgl-workspace/sglang/python/sglang/srt/model_loader/__init__.py", line 22, in get_model',
             "    return loader.load_model(", "           ^^^^^^^^^^^^^^^^^^"]
    finding = _finding(lines)
    assert (finding.outcome, finding.stage) == ("incomplete", "weight_load")


def test_a_flattened_worker_log_is_split_and_no_marker_line_is_quoted(capsys: pytest.CaptureFixture[str]) -> None:
    case = next(CORPUS.glob("87_*.log"))
    _rc, rep = _json(capsys, str(case))
    assert (rep["outcome"], rep["stage"]) == ("error", "cuda_graph")
    assert "Capture cuda graph failed" in rep["cause"] and rep["hint_correct"] is False
    assert "^^^" not in rep["cause"] and "^^^" not in rep["error"] and "pid=" not in rep["error"]


def test_no_cause_or_error_of_the_corpus_quotes_a_traceback_marker(capsys: pytest.CaptureFixture[str]) -> None:
    for log in sorted(CORPUS.glob("*.log")):
        _rc, rep = _json(capsys, str(log))
        for key in ("cause", "error"):
            assert "^^^" not in (rep[key] or ""), (log.name, key)


def test_a_later_launch_that_came_up_after_a_failed_one_is_the_outcome(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    failed = next(CORPUS.glob("75_*.log")).read_bytes()  # a KV-pool torch OOM, traceback only
    came_up = next(CORPUS.glob("06_*.log")).read_bytes()  # a launch that came up
    log = tmp_path / "appended.log"
    log.write_bytes(failed + came_up)
    rc, rep = _json(capsys, str(log))
    assert (rc, rep["outcome"], rep["launch_attempts"]) == (0, "ok", 2)
    assert [(e["outcome"], e["stage"]) for e in rep["earlier_attempts"]] == [("oom", "kv_pool")]
    assert main(["diagnose", str(log)]) == 0
    assert "earlier launch 1 of 2 in this log: oom at kv pool" in capsys.readouterr().out
    # and the other way round: a relaunch (its own server_args line) failed after a launch that came up
    fixtures = Path(__file__).parent / "fixtures" / "logs"
    log.write_bytes((fixtures / "v0.4.8_docker_tp4_mla_ok.log").read_bytes()
                    + (fixtures / "v0.2.7_tp2_not-enough-memory.log").read_bytes())
    rc, rep = _json(capsys, str(log))
    assert (rc, rep["outcome"]) == (1, "oom") and [e["outcome"] for e in rep["earlier_attempts"]] == ["ok"]


def test_a_kv_pool_larger_than_the_device_is_a_sizing_error_not_free_memory() -> None:
    lines = [SRT + 'mem_cache/memory_pool.py", line 736, in __init__',
             "RuntimeError: NPU out of memory. Tried to allocate 98.71 GiB (NPU 0; 60.96 GiB total capacity; 25.03 GiB "
             "already allocated; 25.03 GiB current active; 35.47 GiB free; 25.08 GiB reserved in total by PyTorch)"]
    finding = _finding(lines)
    assert (finding.outcome, finding.stage) == ("oom", "kv_pool")
    assert "larger than the whole NPU" in finding.cause and "--max-total-tokens" in (finding.fix or "")


def test_enomem_is_the_hosts_memory() -> None:
    finding = _finding(['  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2238, in '
                        "run_scheduler_process", "OSError: [Errno 12] Cannot allocate memory"])
    assert finding.outcome == "error" and "host ran out of memory" in finding.cause
    assert "not GPU memory" in finding.cause


def test_an_excerpt_cut_inside_a_traceback_says_so() -> None:
    finding = _finding([SRT + 'model_loader/loader.py", line 4, in load_model'])
    assert (finding.outcome, finding.stage) == ("incomplete", "weight_load")
    assert "inside a traceback" in finding.cause and "OOM killer" not in finding.cause


def test_a_log_cut_while_loading_shards_is_not_called_a_cut_traceback() -> None:
    finding = _finding(["[2025-07-29 15:04:51 TP0] Load weight begin. avail mem=46.21 GB",
                        "Loading safetensors checkpoint shards:   9% Completed | 4/47 [00:00<00:02, 14.66it/s]"])
    assert (finding.outcome, finding.stage) == ("incomplete", "weight_load")
    assert "traceback" not in finding.cause
    # frames followed by other lines: the traceback was not where the log ends
    finding = _finding([SRT + 'model_loader/loader.py", line 4, in load_model',
                        "[2025-07-29 15:04:51 TP0] Load weight begin. avail mem=46.21 GB"])
    assert "inside a traceback" not in finding.cause


def test_a_kernels_capitalised_cuda_error_in_a_threads_report_is_a_serving_error() -> None:
    # flashinfer's own "CUDA Error:" and Python's report of an uncaught exception in a thread (sglang PR #1738)
    lines = ["CUDA Error: device-side assert triggered (710) /tmp/x/flashinfer/attention/decode.cuh: line 749 at "
             "function cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_size)",
             "Exception in thread Thread-3 (forward_thread_func):", "Traceback (most recent call last):",
             SRT + 'managers/tp_worker_overlap_thread.py", line 99, in forward_thread_func']
    finding = _finding(lines)
    assert (finding.outcome, finding.stage) == ("error", "serving")
    assert "device-side assertion" in finding.cause and "about memory" not in finding.cause
    assert _finding(lines[1:]).outcome == "error"  # the thread's report alone is a crash, cut before its error


def test_a_restart_loop_reports_its_most_recent_earlier_attempts(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    fixtures = Path(__file__).parent / "fixtures" / "logs"
    log = tmp_path / "loop.log"
    log.write_bytes((fixtures / "v0.2.7_tp2_not-enough-memory.log").read_bytes() * 12)
    _rc, rep = _json(capsys, str(log))
    assert rep["launch_attempts"] == 12
    assert [e["attempt"] for e in rep["earlier_attempts"]] == list(range(4, 12))  # the last 8 before the last
    assert {e["outcome"] for e in rep["earlier_attempts"]} == {"oom"}
