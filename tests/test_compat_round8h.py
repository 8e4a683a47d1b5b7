"""Round 8h entries (dependency pins of the host stack: outlines, transformers, torch-memory-saver), each checked at
its edges: the release range, the package version that breaks, the model family and the flag that decides it."""

from __future__ import annotations

from sglwrap.host.probe import parse_assume_stack
from sglwrap.preflight import Status
from tests.compat_helpers import compat as _run
from tests.compat_helpers import fires as _fires


LLAMA = ("--model-path", "meta-llama/Meta-Llama-3-8B-Instruct")


def test_outlines_and_torch_memory_saver_are_stack_names() -> None:
    assert parse_assume_stack("outlines=0.1.1,torch-memory-saver=0.0.4") == {
        "outlines": "0.1.1", "torch-memory-saver": "0.0.4"}


def test_outlines_build_regex_from_object_only_on_0_1_12() -> None:
    e = "sglang-0.1-outlines-build-regex-from-object"
    v = _run("1xA100-80G", "0.1.12", *LLAMA, outlines="0.0.32")
    assert v.status is Status.BLOCK and f"[{e}]" in v.reason
    assert not _fires(e, "1xA100-80G", "0.1.12", *LLAMA, outlines="0.0.31")
    assert not _fires(e, "1xA100-80G", "0.1.13", *LLAMA, outlines="0.0.34")
    assert not _fires(e, "1xA100-80G", "0.1.12", *LLAMA)  # outlines version unknown: not judged


def test_outlines_fsm_regex_from_0_1_13_until_0_4_0() -> None:
    e = "sglang-0.3-outlines-0.1-fsm-regex"
    v = _run("1xA100-PCIe-80G", "0.3.5", *LLAMA, outlines="0.1.0")
    assert v.status is Status.BLOCK and f"[{e}]" in v.reason
    assert _fires(e, "1xA100-PCIe-80G", "0.3.6.post3", *LLAMA, outlines="0.1.11")
    assert _fires(e, "1xA100-PCIe-80G", "0.1.13", *LLAMA, outlines="0.1.1")
    assert not _fires(e, "1xA100-PCIe-80G", "0.3.5", *LLAMA, outlines="0.0.46")
    assert not _fires(e, "1xA100-PCIe-80G", "0.4.0", *LLAMA, outlines="0.1.11")
    assert not _fires(e, "1xA100-PCIe-80G", "0.1.12", *LLAMA, outlines="0.1.1")


def test_memory_saver_flag_without_the_package() -> None:
    e = "enable-memory-saver-without-torch-memory-saver"
    argv = (*LLAMA, "--enable-memory-saver")
    v = _run("1xH100", "0.4.4.post3", *argv, **{"torch-memory-saver": "none"})
    assert v.status is Status.BLOCK and f"[{e}]" in v.reason
    assert _run("1xH100", "0.4.4.post3", *argv).status is Status.WARN  # not named: unknown, no block
    assert _fires(e, "1xH100", "0.5.2", *argv)
    assert not _fires(e, "1xH100", "0.4.4.post3", *argv, **{"torch-memory-saver": "0.0.4"})
    assert not _fires(e, "1xH100", "0.4.4.post3", *LLAMA)  # no flag
    assert not _fires(e, "1xH100", "0.5.3", *argv)  # a plain dependency from 0.5.3
    assert not _fires(e, "1xH100", "0.5.9", *argv)


def test_glm5_family_needs_transformers_5_2() -> None:
    e = "glm-moe-dsa-needs-transformers-5.2"
    glm5 = ("--model-path", "zai-org/GLM-5-FP8", "--tp-size", "8")
    v = _run("8xH200", "0.5.9", *glm5, transformers="4.57.1")
    assert v.status is Status.BLOCK and f"[{e}]" in v.reason
    assert _fires(e, "8xH200", "0.5.9", "--model-path", "zai-org/GLM-5.1-FP8", "--tp-size", "8", transformers="5.1.0")
    assert _fires(e, "8xH200", "0.5.9", "--model-path", "/models/GLM5-FP8", "--tp-size", "8", transformers="4.57.1")
    assert not _fires(e, "8xH200", "0.5.9", *glm5, transformers="5.2.0")
    # transformers not named: 0.5.9 pins 4.57.1, but a GLM-5 user may have upgraded it, so the entry only warns
    unnamed = _run("8xH200", "0.5.9", *glm5)
    assert unnamed.status is Status.WARN and "transformers's version (the planned SGLang pins 4.57.1" in unnamed.reason
    # GLM-5.3-Flash is Glm5Next (another model type); GLM-4.5 is glm4_moe.
    assert not _fires(e, "1xB200", "0.5.20", "--model-path", "zai-org/GLM-5.3-Flash", transformers="4.57.1")
    assert not _fires(e, "8xH200", "0.5.9", "--model-path", "zai-org/GLM-4.5-FP8", "--tp-size", "8",
                      transformers="4.57.1")
