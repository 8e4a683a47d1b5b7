"""Round 9k entries (FlashMLA builds without SM103 code under DeepSeek-V3.2 / GLM-5 DSA launches on B300), each
checked at its edges: the compute capability, the release range, the kernel wheel named by hand, the model and the
flags that decide; and the ``not_packages`` condition they use."""

from __future__ import annotations

from sglwrap.compat.kb import validate_entry
from sglwrap.preflight import Status
from tests.compat_helpers import compat

OLD = "flashmla-dsa-sm103-no-kernel"
V059 = "flashmla-dsa-sm103-default-0.5.9"
DSV32 = ("--model-path", "deepseek-ai/DeepSeek-V3.2-Exp", "--trust-remote-code", "--tp", "8")
GLM5 = ("--model-path", "zai-org/GLM-5-FP8", "--tp", "8")


def _run(spec: str, stack: dict[str, str], *argv: str):
    rest = dict(stack)
    return compat(spec, rest.pop("sglang"), *argv, **rest)


def _fires(entry: str, spec: str, release: str, *argv: str, **extra: str) -> bool:
    return f"[{entry}]" in _run(spec, {"sglang": release, **extra}, *argv).reason


# the sgl-kernel each release pins (its Requires-Dist): named, the kernel is a fact; left to the pin, a guess
PINNED_KERNEL = {"0.5.3": "0.3.14.post1", "0.5.4.post1": "0.3.16.post4", "0.5.4.post2": "0.3.16.post4",
                 "0.5.6": "0.3.18.post2", "0.5.8": "0.3.21", "0.5.9": "0.3.21"}


def test_old_releases_block_on_b300_only() -> None:
    for release in ("0.5.3", "0.5.4.post1", "0.5.4.post2", "0.5.6", "0.5.8"):
        v = _run("8xB300", {"sglang": release, "sgl-kernel": PINNED_KERNEL[release]}, *DSV32)
        assert f"[{OLD}]" in v.reason and v.status == Status.BLOCK, release
        guess = _run("8xB300", {"sglang": release}, *DSV32)  # the kernel not named: the user may have upgraded it
        assert f"[{OLD}]" in guess.reason and guess.status == Status.WARN and "sgl-kernel's version" in guess.reason
    for spec in ("8xB200", "8xH200"):
        assert not _fires(OLD, spec, "0.5.6", *DSV32)
    assert not _fires(OLD, "8xB300", "0.5.2", *DSV32)  # no DSA backend yet
    assert not _fires(OLD, "8xB300", "0.5.9", *DSV32)  # the downgrade entry's release
    assert not _fires(OLD, "8xB300", "0.5.10", *DSV32)  # trtllm DSA backends by default on SM10x


def test_old_releases_model_and_user_backend() -> None:
    assert not _fires(OLD, "8xB300", "0.5.6", "--model-path", "deepseek-ai/DeepSeek-V3-0324", "--tp", "8")
    assert not _fires(OLD, "8xB300", "0.5.6", *DSV32, "--attention-backend", "triton")
    # --nsa-*-backend is overwritten by 0.5.4.post2 - 0.5.8 on SM10x: still FlashMLA
    assert _fires(OLD, "8xB300", "0.5.6", *DSV32, "--nsa-prefill-backend", "tilelang", "--nsa-decode-backend", "tilelang")


def test_kernel_named_by_hand_rules_out() -> None:
    assert _fires(OLD, "8xB300", "0.5.8", *DSV32, **{"sgl-kernel": "0.3.21"})
    assert not _fires(OLD, "8xB300", "0.5.8", *DSV32, **{"sglang-kernel": "0.4.2"})
    assert not _fires(V059, "8xB300", "0.5.9", *DSV32, **{"sglang-kernel": "0.4.6.post1"})
    assert _fires(V059, "8xB300", "0.5.9", *DSV32, **{"sglang-kernel": "0.4.1.post1"})


def test_059_downgrades_to_trtllm() -> None:
    for argv in (DSV32, GLM5):
        v = _run("8xB300", {"sglang": "0.5.9", "sgl-kernel": PINNED_KERNEL["0.5.9"], "transformers": "5.2.0"}, *argv)
        assert f"[{V059}]" in v.reason and v.status == Status.DOWNGRADE, argv
    assert not _fires(V059, "8xB200", "0.5.9", *DSV32)
    assert not _fires(V059, "8xB300", "0.5.9", *DSV32, "--nsa-decode-backend", "trtllm")
    assert not _fires(V059, "8xB300", "0.5.9", *DSV32, "--kv-cache-dtype", "bfloat16")
    assert not _fires(V059, "8xB300", "0.5.9", "--model-path", "zai-org/GLM-5.3-Flash", "--tp", "8")


def test_not_packages_is_a_known_condition() -> None:
    raw = {"id": "x", "title": "t", "applies": {"not_packages": {"sgl-kernel": ">=0.4.2"}}, "consequence": "c",
           "severity": "warn", "fix": "f", "sources": ["https://example.org"], "checked": "2026-12-02",
           "evidence": "single"}
    assert validate_entry(raw, "t.yaml") == []
