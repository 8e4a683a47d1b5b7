"""Traceback frames name the startup step that failed when the excerpt has no progress line for it."""

from __future__ import annotations

from sglwrap.diagnose import diagnose_lines
from sglwrap.diagnose.cause import decide, fatal_failures, primary

SRT = '  File "/usr/lib/python3/site-packages/sglang/srt/'


def _stage(lines: list[str]) -> str | None:
    node = diagnose_lines("n", lines)
    return decide((node,), node.ranks, None).stage


def test_frames_after_the_exception_line_move_the_failure_to_that_step() -> None:
    head = "[2025-01-01 00:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):"
    assert _stage([head, SRT + 'model_executor/model_runner.py", line 9, in load_model']) == "weight_load"
    assert _stage([head, SRT + 'model_executor/model_runner.py", line 9, in init_memory_pool']) == "kv_pool"
    assert _stage([head, SRT + 'model_executor/cuda_graph_runner.py", line 9, in capture']) == "cuda_graph"
    assert _stage([head, SRT + 'managers/scheduler.py", line 9, in event_loop_overlap']) == "serving"
    # the statement under a cut-off frame names the callee
    assert _stage([head, SRT + 'model_executor/model_runner.py", line 9, in initialize',
                   "    self.init_device_graphs()"]) == "cuda_graph"


def test_frames_before_a_headerless_error_line_count_too() -> None:
    lines = [SRT.strip() + 'model_loader/loader.py", line 4, in load_model', "KeyError: 'lm_head.weight'"]
    assert _stage(lines) == "weight_load"


def test_frames_never_move_a_failure_back_and_other_lines_end_the_traceback() -> None:
    lines = ["[2025-01-01 00:00:00 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=3 GB",
             "[2025-01-01 00:00:01 TP0] Scheduler hit an exception: Traceback (most recent call last):",
             SRT + 'model_executor/model_runner.py", line 9, in load_model']
    assert _stage(lines) == "cuda_graph"
    # a frame after an unrelated event does not touch an earlier failure
    lines = ["RuntimeError: boom", "[2025-01-01 00:00:00 TP0] Load weight begin. avail mem=70.00 GB",
             SRT + 'managers/scheduler.py", line 9, in event_loop_normal']
    node = diagnose_lines("n", lines)
    assert [f.stage for f in node.failures] == ["init"]


def test_the_parents_sigquit_line_does_not_outrank_the_childs_own_failure() -> None:
    lines = ["[2025-01-01 00:00:00] Received sigquit from a child process. It usually means the child failed.",
             "[2025-01-01 00:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):",
             SRT + 'model_executor/model_runner.py", line 9, in load_model']
    node = diagnose_lines("n", lines)
    main = primary(fatal_failures((node,)))
    assert main is not None and "hit an exception" in main.text and main.stage == "weight_load"


def test_loader_warnings_and_request_checks_name_their_step() -> None:
    assert _stage(["[2026-03-11 17:25:41] Parameter model.layers.0.x.input_scale not found in params_dict",
                   "[2026-03-11 17:25:41] Scheduler hit an exception: Traceback (most recent call last):"]) \
        == "weight_load"
    assert _stage(["[2025-03-03 06:49:28 TP5] Input length (160062 tokens) exceeds the maximum allowed length "
                   "(59862 tokens). Use a shorter input or enable --allow-auto-truncate.",
                   "[2025-03-03 06:49:28 TP5] Scheduler hit an exception: Traceback (most recent call last):"]) \
        == "serving"


def test_an_exception_line_printed_before_its_report_shares_the_reports_step() -> None:
    lines = ["AssertionError: Committed KV cache already freed (self.kv_committed_len=1)",
             "[2026-06-15 14:10:59 TP7] Scheduler hit an exception: Traceback (most recent call last):",
             SRT + 'managers/scheduler.py", line 9, in event_loop_overlap']
    node = diagnose_lines("n", lines)
    assert [f.stage for f in node.failures] == ["serving", "serving"]


def test_an_nccl_error_is_named_as_such() -> None:
    node = diagnose_lines("n", ["RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for "
                                "details)"])
    finding = decide((node,), node.ranks, None)
    assert "NCCL error" in finding.cause and "CUDA error" not in finding.cause


def test_a_traceback_cut_before_its_error_is_incomplete_at_the_step_its_frames_show() -> None:
    lines = ["Traceback (most recent call last):",
             SRT + 'model_executor/model_runner.py", line 9, in init_cuda_graphs']
    node = diagnose_lines("n", lines)
    finding = decide((node,), node.ranks, None)
    assert (finding.outcome, finding.stage) == ("incomplete", "cuda_graph")


def test_a_capture_that_failed_on_a_kernel_fault_is_not_called_out_of_memory() -> None:
    node = diagnose_lines("n", ["Exception: Capture cuda graph failed: Triton Error [CUDA]: an illegal memory access "
                                "was encountered"])
    finding = decide((node,), node.ranks, None)
    assert (finding.outcome, finding.stage) == ("error", "cuda_graph")
    assert "ran out of GPU memory" not in finding.cause and "memory access fault" in finding.cause
    assert "--cuda-graph-max-bs" not in (finding.fix or "")
