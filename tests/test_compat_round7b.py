"""Round 7b entries (communication and parallelism), each checked at its edges: the release range, the model family
and the user's own flags that decide whether it fires."""

from __future__ import annotations

from sglwrap.preflight import Status
from tests.compat_helpers import compat as _run
from tests.compat_helpers import fires as _fires


QWEN3_MOE = ("--model-path", "Qwen/Qwen3-30B-A3B", "--tp-size", "4")


def test_moe_dense_tp_size_other_than_one_is_refused_until_0_5_13() -> None:
    v = _run("4xH100", "0.5.9", *QWEN3_MOE, "--moe-dense-tp-size", "4")
    assert v.status is Status.BLOCK and "[moe-dense-tp-size-refused]" in v.reason
    assert _fires("moe-dense-tp-size-refused", "4xH100", "0.4.6.post4", *QWEN3_MOE, "--moe-dense-tp-size", "2")
    assert _fires("moe-dense-tp-size-refused", "4xH100", "0.5.12", *QWEN3_MOE, "--moe-dense-tp-size", "4")
    # 1 is what DP-attention recipes pass; no flag at all is None; 0.5.13 accepts the TP size.
    assert not _fires("moe-dense-tp-size-refused", "4xH100", "0.5.9", *QWEN3_MOE, "--moe-dense-tp-size", "1")
    assert not _fires("moe-dense-tp-size-refused", "4xH100", "0.5.9", *QWEN3_MOE)
    assert not _fires("moe-dense-tp-size-refused", "4xH100", "0.5.13", *QWEN3_MOE, "--moe-dense-tp-size", "4")


def test_dense_qwen35_family_fp8_fails_at_tp8_without_ep() -> None:
    argv = ("--model-path", "Qwen/Qwen3.8-27B-FP8", "--tp-size", "8")
    v = _run("8xH100", "0.5.18", *argv)
    assert v.status is Status.BLOCK and "[qwen35-dense-fp8-phantom-moe-tp8]" in v.reason and "--ep-size 2" in v.fix
    assert _fires("qwen35-dense-fp8-phantom-moe-tp8", "8xH100", "0.5.9", "--model-path", "Qwen/Qwen3.5-27B-FP8",
                  "--tp-size", "8")
    assert _fires("qwen35-dense-fp8-phantom-moe-tp8", "8xH100", "0.5.23", *argv)
    # The workaround (EP 2), TP 4, a BF16 checkpoint, a MoE checkpoint of the family and 0.5.8 (no Qwen3.5 config).
    assert not _fires("qwen35-dense-fp8-phantom-moe-tp8", "8xH100", "0.5.18", *argv, "--ep-size", "2")
    assert not _fires("qwen35-dense-fp8-phantom-moe-tp8", "8xH100", "0.5.18", "--model-path", "Qwen/Qwen3.8-27B-FP8",
                      "--tp-size", "4")
    assert not _fires("qwen35-dense-fp8-phantom-moe-tp8", "8xH100", "0.5.18", "--model-path", "Qwen/Qwen3.8-27B",
                      "--tp-size", "8")
    assert not _fires("qwen35-dense-fp8-phantom-moe-tp8", "8xH100", "0.5.18", "--model-path",
                      "Qwen/Qwen3.5-35B-A3B-FP8", "--tp-size", "8")
    assert not _fires("qwen35-dense-fp8-phantom-moe-tp8", "8xH100", "0.5.8", "--model-path", "Qwen/Qwen3.5-27B-FP8",
                      "--tp-size", "8")
