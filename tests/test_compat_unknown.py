"""Unknown is not absent: what an assumed SGLang release installs comes from its own pins, a fact nobody knows never
blocks (the entry warns and says what was unknown), and a broken entry is a visible warning."""

from __future__ import annotations

import json

import pytest

from sglwrap.compat.kb import Entry
from sglwrap.host.catalogue import resolve_assume
from sglwrap.host.probe import apply_assume_stack, parse_assume_stack
from sglwrap.preflight import checks_compat
from sglwrap.preflight.model import Status
from sglwrap.record import replace
from sglwrap.sglang.pins import PINS_FILE, exact_pin, release_requirements
from tests.compat_helpers import compat, fires, plan

FLASHINFER = ("--model-path", "Qwen/Qwen2.5-7B-Instruct", "--tp-size", "2", "--attention-backend", "flashinfer")


def test_the_bundled_pins_are_each_releases_own_requires_dist() -> None:
    """Values read off the releases' METADATA on the index (sglang 0.5.9 pins flashinfer_python==0.6.3,
    sgl-kernel==0.3.21, torch==2.9.1; 0.4.6.post2 pins flashinfer_python==0.2.5 and torch==2.6.0)."""
    r = json.loads(PINS_FILE.read_text())["releases"]
    base = r["0.5.9"]["base"]
    assert base["flashinfer-python"] == "==0.6.3" and base["sgl-kernel"] == "==0.3.21" and base["torch"] == "==2.9.1"
    # before 0.5, FlashInfer came with the srt extra (sglang[all]), not with a plain install
    assert "flashinfer-python" not in r["0.4.6.post2"]["base"]
    assert r["0.4.6.post2"]["all"]["flashinfer-python"] == "==0.2.5"


@pytest.mark.parametrize(("asked", "read"), [("0.5.9", "0.5.9"), ("0.5.3rc0", "0.5.3"), ("0.5.9.post9", "0.5.9"),
                                             ("0.4.6.post3", "0.4.6.post3")])
def test_a_release_reads_the_newest_bundled_pins_not_newer_than_it(asked: str, read: str) -> None:
    found = release_requirements(asked)
    assert found is not None and found[0] == read
    assert exact_pin("==0.6.3") == "0.6.3" and exact_pin(">=0.2.5") is None and exact_pin("==0.6.*") is None


def test_an_assumed_release_brings_its_pinned_flashinfer() -> None:
    """The issue's case: --assume-stack sglang=X took the packages X brings for 'not installed'."""
    assert not fires("sglang-flashinfer-python-missing", "2xRTX-4090", "0.5.9", *FLASHINFER)
    # 0.4.6.post2 brings FlashInfer only with sglang[all]: whether it is there is unknown, so a warning at most
    old = compat("2xRTX-4090", "0.4.6.post2", *FLASHINFER)
    assert old.status is not Status.BLOCK and "whether flashinfer-python is installed" in old.reason
    facts = apply_assume_stack(resolve_assume("2xRTX-4090"), {"sglang": "0.5.9"})
    assert facts.packages["flashinfer-python"] == "0.6.3"
    # torch's pin names a version, not the build (+cu128 or +cu126): there, build unknown, so no arch table reads it
    assert "torch" not in facts.packages and facts.probes["release_pins"]["brought"]["torch"] == "==2.9.1"


def test_a_package_named_none_is_known_absent_and_blocks_as_its_source_says() -> None:
    assert parse_assume_stack("flashinfer-python=none") == {"flashinfer-python": "none"}
    v = compat("2xRTX-4090", "0.4.6.post2", *FLASHINFER, **{"flashinfer-python": "none"})
    assert v.status is Status.BLOCK and "[sglang-flashinfer-python-missing]" in v.reason


def test_a_package_the_release_does_not_require_is_unknown_and_only_warns() -> None:
    """vllm is no requirement of SGLang 0.4.6.post5 (it left sglang[srt] in 0.4.4.post2): whether the planned machine
    has it is unknown, so the AWQ-needs-vllm entry warns and says so; named absent, it blocks."""
    argv = ("--model-path", "Qwen/Qwen2.5-7B-Instruct-AWQ", "--quantization", "awq")
    facts = apply_assume_stack(resolve_assume("1xL40S"), {"sglang": "0.4.6.post5"})
    assert "vllm" not in facts.packages
    v = compat("1xL40S", "0.4.6.post5", *argv)
    assert v.status is Status.WARN and "[quant-awq-gptq-needs-vllm]" in v.reason
    assert "not known here: whether vllm is installed" in v.reason
    assert compat("1xL40S", "0.4.6.post5", *argv, vllm="none").status is Status.BLOCK
    headline = plan("1xL40S", "0.4.6.post5", argv).headline
    assert "not known here: whether vllm is installed (quant-awq-gptq-needs-vllm" in headline


def test_a_kernel_built_from_source_for_the_installed_torch_is_not_an_abi_mismatch() -> None:
    """sgl-kernel 0.1.2 (torch 2.6 ABI on the index) with torch 2.7: an index wheel blocks, a local build passes,
    an origin nobody knows (an assumed stack) warns."""
    base = apply_assume_stack(resolve_assume("1xH100"), {"sgl-kernel": "0.1.2", "torch": "2.7.0+cu128"})
    argv = ("--model-path", "Qwen/Qwen2.5-7B-Instruct")

    def verdict(origin: str | None) -> Status | None:
        binaries = dict(base.binaries)
        binaries["origins"] = {} if origin is None else {"sgl-kernel": origin}
        from sglwrap.preflight import run_preflight
        from sglwrap.profiles import load_profile
        from sglwrap.sglang.flags import bundled_table

        r = run_preflight(replace(base, binaries=binaries), load_profile("baseline"), argv,
                          flags=bundled_table("0.4.6.post2"))
        v = next(c for c in r.checks if c.id == "compat")
        return v.status if "[sgl-kernel-torch-abi-2.6]" in v.reason else None

    assert verdict("index") is Status.BLOCK
    assert verdict("local") is None and verdict("vcs") is None
    assert verdict(None) is Status.WARN and verdict("file") is Status.WARN


def test_an_entry_that_raises_while_matching_is_a_named_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    broken = Entry(id="broken-entry", domain="x", title="t", applies={"world_min": 1}, consequence="c",
                   severity="block", fix="f", sources=("https://example.org",), checked="2026-12-06",
                   evidence="source", evidence_ref="x.py:1")

    def boom(entry: Entry, ctx: object) -> None:
        raise TypeError("'<' not supported between instances of 'str' and 'int'")

    monkeypatch.setattr(checks_compat, "entries", lambda: (broken,))
    monkeypatch.setattr(checks_compat, "matches", boom)
    v = compat("2xRTX-4090", "0.5.9", *FLASHINFER)
    assert v.status is Status.WARN and "[broken-entry] could not be checked: TypeError" in v.reason


def test_an_entry_the_schema_refuses_is_a_visible_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bundled entry that breaks the schema (here: a block resting on one report) is left out of the match, and
    the compat check says so instead of 'none of N entries applies'."""
    bad = "stack-floors.yaml: some-entry: severity block needs stronger evidence than 'single' (it allows warn at most)"
    monkeypatch.setattr(checks_compat, "left_out", lambda: [bad])
    v = compat("2xRTX-4090", "0.5.9", *FLASHINFER)
    assert v.status is Status.WARN and "1 knowledge-base entries could not be read" in v.reason and "some-entry" in v.reason


def test_the_bundled_pins_cover_every_bundled_release() -> None:
    """``tools/gen_release_pins.py --check``: every release with bundled flag data has its pins (CI runs it here)."""
    import subprocess
    import sys
    from pathlib import Path

    tool = Path(__file__).resolve().parents[1] / "tools" / "gen_release_pins.py"
    proc = subprocess.run([sys.executable, str(tool), "--check"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "pins for all" in proc.stdout


SWEEP_ARGV = (
    ("--model-path", "Qwen/Qwen2.5-7B-Instruct"),
    ("--model-path", "Qwen/Qwen2.5-7B-Instruct", "--attention-backend", "flashinfer"),
    ("--model-path", "Qwen/Qwen2.5-7B-Instruct-AWQ", "--quantization", "awq"),
    ("--model-path", "meta-llama/Meta-Llama-3-8B-Instruct", "--enable-memory-saver"),
)


def _release_sample() -> list[str]:
    from sglwrap.versions import known_releases

    releases = list(known_releases())
    return releases[::6] + [releases[-1]]


@pytest.mark.parametrize("release", _release_sample())
def test_an_assumed_release_never_blocks_on_a_package_nobody_named(release: str) -> None:
    """The issue's rule: with --assume-stack sglang=X alone, no entry blocks on a package (its presence, absence,
    version or origin) that the plan does not know; only SGLang itself was named."""
    from sglwrap.compat.kb import by_id
    from sglwrap.sglang.flags import bundled_table
    from sglwrap.errors import UsageError

    kb = by_id(checks_compat.entries())
    bad: list[str] = []
    for spec in ("2xRTX-4090", "8xH100", "8xB200", "1xL40S"):
        for argv in SWEEP_ARGV:
            try:
                bundled_table(release)
                v = compat(spec, release, *argv)
            except UsageError:
                continue  # that release refuses the command line (an option it does not have)
            for eid, status in ((v.detail or {}).get("entries") or {}).items():
                if status != "block":
                    continue
                ap = kb[eid].applies
                names = {*(ap.get("packages") or {}), *(ap.get("not_packages") or {}), *(ap.get("absent") or ()),
                         *(ap.get("from_index") or ())} - {"sglang"}
                if names:
                    bad.append(f"{release} {spec} {' '.join(argv)}: {eid} blocks on {sorted(names)}")
    assert not bad, "\n".join(bad[:20])
