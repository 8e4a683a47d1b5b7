"""The release rules against each release's own ``ServerArgs`` resolution (tables made by check_defaults).

``python -m sglwrap.sglang.check_defaults`` imports every unpacked SGLang release in a child interpreter, mocks the
GPU and the model config at the boundary, and records what that release's ``ServerArgs`` resolves for a grid of GPUs
(24-183 GB, SM 8.6-12.0), TP 1-8, dense / MoE / multimodal models, speculative decoding and DP attention.  These
tests read the committed tables, so they need no old wheels.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglwrap.sglang.check_defaults import FIXTURES, GPUS, MODELS, compare, grid

TABLES = sorted(p for p in FIXTURES.glob("*.json") if p.name[0].isdigit())


def _load(path: Path) -> dict:  # type: ignore[type-arg]
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def test_tables_exist_for_the_releases_the_brief_names() -> None:
    have = {p.stem for p in TABLES}
    assert {"0.4.4", "0.4.5", "0.4.7", "0.4.8", "0.4.9", "0.5.2", "0.5.23"} <= have


@pytest.mark.parametrize("path", TABLES, ids=lambda p: p.stem)
def test_rules_agree_with_the_release(path: Path) -> None:
    doc = _load(path)
    mismatches = compare(doc)
    assert not mismatches, f"{len(mismatches)} cases disagree, e.g.:\n" + "\n".join(mismatches[:10])


@pytest.mark.parametrize("path", TABLES, ids=lambda p: p.stem)
def test_table_covers_the_grid_and_most_cases_ran(path: Path) -> None:
    doc = _load(path)
    assert [c["key"] for c in doc["cases"]] == [c.key for c in grid()]
    ran = [c for c in doc["cases"] if "error" not in c["sglang"]]
    # the plain cases (no speculative decoding, no DP attention) run, but for a release's own refusals on one GPU
    # (0.5.6.post1/post2 pick trtllm_mha on the SM120 RTX PRO 6000 and then refuse it: "only supported on SM100")
    plain = [c for c in doc["cases"] if "|nospec|nodp" in c["key"]]
    refused = [c for c in plain if "error" in c["sglang"]]
    assert len(refused) <= len(plain) // len(GPUS), [c["sglang"]["error"] for c in refused][:3]
    assert len(ran) >= len(plain) - len(refused)


def test_grid_spans_the_gpus_and_models_asked_for() -> None:
    assert {round(mib / 1024) for _, mib, _ in GPUS} >= {24, 45, 80, 96, 140, 179}
    assert {cap for _, _, cap in GPUS} == {(8, 6), (8, 9), (9, 0), (10, 0), (12, 0)}
    assert set(MODELS) == {"dense", "moe", "multimodal"}


def test_compare_flags_a_wrong_fraction() -> None:
    doc = _load(FIXTURES / "0.4.8.json")
    case = dict(doc["cases"][0])
    case["sglang"] = dict(case["sglang"], mem_fraction_static=case["sglang"]["mem_fraction_static"] + 0.01)
    out = compare({"version": "0.4.8", "cases": [case]})
    assert len(out) == 1 and "mem_fraction_static" in out[0]
