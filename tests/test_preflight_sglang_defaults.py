"""preflight reports what the target SGLang release will do by itself, per release (sglwrap.sglang.resolved)."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from sglwrap.cli import main


def _preflight(*argv: str) -> dict:  # type: ignore[type-arg]
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        main(["preflight", "--json", *argv])
    return json.loads(out.getvalue())  # type: ignore[no-any-return]


@pytest.mark.parametrize(("assume", "release", "fraction"), [
    ("1xRTX-4090", "0.4.6", 0.88),   # 0.4.6 sets the fraction by TP size: 0.88 at tp 1
    ("1xRTX-4090", "0.4.9", 0.879),  # 0.4.9: (24564 - (2.8 + 1/10) GiB) / 24564
    ("1xH100", "0.4.9", 0.874),      # 0.4.9 on an H100-class GPU: (81559 - 10240 MiB) / 81559
])
def test_the_release_default_fraction_is_the_one_that_release_computes(assume: str, release: str,
                                                                       fraction: float) -> None:
    doc = _preflight("--assume", assume, "--assume-stack", f"sglang={release}", "--", "--model-path", "Qwen3-8B")
    d = doc["sglang_defaults"]
    assert d["version"] == release and d["mem_fraction_static"] == fraction
    assert d["mem_fraction_static_source"] == "default"


def test_the_users_own_value_wins_and_is_said_to_be_theirs() -> None:
    doc = _preflight("--assume", "1xH100", "--assume-stack", "sglang=0.4.9", "--", "--model-path", "Qwen3-8B",
                     "--mem-fraction-static", "0.7")
    d = doc["sglang_defaults"]
    assert d["mem_fraction_static"] == 0.7 and d["mem_fraction_static_source"] == "user"


def test_releases_differ_where_their_sources_differ() -> None:
    old = _preflight("--assume", "8xH200", "--assume-stack", "sglang=0.5.9", "--", "--model-path", "Qwen3-8B")
    new = _preflight("--assume", "8xH200", "--assume-stack", "sglang=0.5.23", "--", "--model-path", "Qwen3-8B")
    assert old["sglang_defaults"]["prefill_cuda_graph"] is False  # prefill graphs arrive by default later
    assert new["sglang_defaults"]["prefill_cuda_graph"] is True
