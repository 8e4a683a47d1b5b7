"""The accountant against the corpus of real SGLang startup logs (tests/corpus/memory).

Every case holds log lines copied from a public report and the numbers read off them. These tests check that the
truth blocks agree with those lines, that the shipped fits are the fits of this corpus, and how the accountant does
from scratch (config + GPU + the launch's arguments + its SGLang release) on the launches that worked and failed.
The numbers reached are printed by ``test_memory_corpus_from_scratch_kv_tokens`` and written in
docs/memory-model.md; where they fall short of the issue's targets the tests say so rather than hide it.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from sglwrap.host.catalogue import resolve_assume
from sglwrap.memory import Observed, plan

REPO = Path(__file__).resolve().parents[1]
CORPUS = Path(__file__).parent / "corpus" / "memory"
GIB = 1 << 30
OUTCOMES = {"ok", "kv_pool_oom", "weights_dont_fit", "graph_oom", "other_error", "failed_unknown", "incomplete"}


def _cases() -> list[dict[str, Any]]:
    return [yaml.safe_load(p.read_text(encoding="utf-8")) for p in sorted(CORPUS.glob("*.yaml"))]


def _log(case: dict[str, Any]) -> str:
    if case.get("log"):
        return str(case["log"])
    return str(yaml.safe_load((REPO / case["log_file"]).read_text(encoding="utf-8"))["log"])


def _facts(case: dict[str, Any]):  # type: ignore[no-untyped-def]
    g = case["gpu"]
    return resolve_assume(f"{g['count']}x{g['catalogue']}")


def _argv(case: dict[str, Any]) -> list[str]:
    """The case's SGLang arguments, a corpus config path made absolute (tests may run from any directory)."""
    argv = [str(a) for a in case["argv"]]
    if "--model-path" in argv:
        i = argv.index("--model-path") + 1
        if argv[i].startswith("tests/") and (REPO / argv[i]).exists():
            argv[i] = str(REPO / argv[i])
    return argv


def _plan(case: dict[str, Any], observed: Observed | None = None):  # type: ignore[no-untyped-def]
    return plan(_facts(case), {}, _argv(case), sglang_version=case.get("version_for_plan"), observed=observed)


def test_memory_corpus_cases_are_complete_and_name_their_source() -> None:
    cases = _cases()
    assert len(cases) >= 20
    for path, c in zip(sorted(CORPUS.glob("*.yaml")), cases):
        assert c["id"] == path.stem
        assert c["outcome"] in OUTCOMES, c["id"]
        assert str(c["source"]).startswith(("https://github.com/", "Public GitHub")), c["id"]
        assert c["date_checked"] and isinstance(c["truth"], dict) and c["gpu"]["name"]
        assert c.get("log") or c.get("log_file"), c["id"]


# truth field -> how its number is printed in SGLang's log lines
_PRINTED = {
    "kv_tokens": ("#tokens: {:d}", "max_total_num_tokens={:d}"),
    "avail_before_weights_gb": ("Load weight begin. avail mem={:.2f} GB",),
    "weight_mem_gb": ("mem usage={:.2f} GB",),
    "avail_after_weights_gb": ("avail mem={:.2f} GB", "Avail mem={:.2f} GB"),
    "k_size_gb": ("K size: {:.2f} GB",),
    "kv_size_gb": ("KV size: {:.2f} GB",),  # MLA pools print one size; others' kv_size_gb is K + V, derived
    "cuda_graph_mem_gb": ("mem usage={:.2f} GB",),
    "init_dist_mem_gb": ("mem usage={:.2f} GB",),
    "avail_after_kv_pool_gb": ("Memory pool end. avail mem={:.2f} GB",),
}


@pytest.mark.parametrize("case", _cases(), ids=lambda c: c["id"])
def test_memory_corpus_truth_numbers_are_in_the_copied_log(case: dict[str, Any]) -> None:
    log = _log(case)
    checked = 0
    for key, forms in _PRINTED.items():
        value = case["truth"].get(key)
        if value is None or (key == "kv_size_gb" and "KV size" not in log):
            continue
        texts = [f.format(int(value) if "d}" in f else float(value)) for f in forms]
        assert any(t in log for t in texts), (case["id"], key, texts)
        checked += 1
    assert checked or not re.search(r"avail mem=|#tokens|mem usage=", log), case["id"]


def _fits_tool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(REPO / "tools" / "gen_memory_fits.py"), *args],
                          capture_output=True, text=True, timeout=300)


def test_memory_corpus_fits_file_is_the_fit_of_this_corpus() -> None:
    """``tools/gen_memory_fits.py --check`` (CI runs it here): the shipped fits.json is the fit of the corpus, byte
    for byte."""
    proc = _fits_tool("--check")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "fits.json: up to date" in proc.stdout


def test_memory_fits_check_catches_a_stale_file(tmp_path: Path) -> None:
    from sglwrap.memory import fits

    doc = json.loads(fits.FITS_PATH.read_text(encoding="utf-8"))
    doc["corpus_cases"] += 1
    stale = tmp_path / "fits.json"
    stale.write_text(json.dumps(doc, indent=1) + "\n")
    proc = _fits_tool("--check", "--out", str(stale))
    assert proc.returncode == 1 and "differs from the fit of" in proc.stdout


def _working() -> list[dict[str, Any]]:
    return [c for c in _cases() if c["outcome"] == "ok" and c.get("argv") and c["gpu"].get("catalogue")]


@pytest.mark.parametrize("case", _working(), ids=lambda c: c["id"])
def test_memory_corpus_no_working_launch_exits_nonzero(case: dict[str, Any]) -> None:
    p = _plan(case)
    assert p.exit_code == 0 and p.verdict in ("fits", "fits_tight"), (case["id"], p.verdict, p.explanation)
    assert not p.blocks_launch


def test_memory_corpus_from_scratch_kv_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    """From scratch: the KV token count against the log, for every working launch with a catalogued GPU, its
    arguments and a logged pool size. The issue's target is 5% on at least 90% of them. A case outside 5% must say
    why in its own ``from_scratch_miss`` field (and a case that says so must really miss, so a stale note is caught).
    The numbers reached are printed and written in docs/memory-model.md."""
    rows = []
    for c in _working():
        kv = c["truth"].get("kv_tokens")
        if not kv:
            continue
        b = _plan(c).budget
        rows.append((c["id"], (b.kv_tokens - kv) / kv, b.kv_tokens_pm / kv,
                     c["argv"].count("--mem-fraction-static") > 0, c.get("from_scratch_miss")))
    with capsys.disabled():
        for cid, err, pm, _, _ in rows:
            print(f"\n  {cid}: {err:+.1%} (± {pm:.1%})", end="")
        print(f"\n  within 5%: {sum(abs(r[1]) <= 0.05 for r in rows)} of {len(rows)}")
    assert len(rows) >= 12
    within = [cid for cid, err, *_ in rows if abs(err) <= 0.05]
    assert len(within) / len(rows) >= 0.9, rows  # the target
    for cid, err, _, _, miss in rows:
        assert (abs(err) > 0.05) == bool(miss), (cid, err, miss)
    # where the launch gave --mem-fraction-static (no release default involved), the log lies inside the ± band
    for cid, err, pm, given_f, _ in rows:
        if given_f:
            assert abs(err) <= pm, (cid, err, pm)


def test_memory_corpus_failure_deepseek_v4_with_observed_memory_is_a_sure_kv_pool_oom() -> None:
    """11: --mem-fraction-static 0.88 with the logged P and W: SGLang refused; its minimum viable f 0.9113."""
    case = {"gpu": {"count": 8, "catalogue": "H200"}, "argv": ["--model-path", "DeepSeek-V3", "--tp", "8",
                                                             "--mem-fraction-static", "0.88"],
            "version_for_plan": "0.5.23"}
    t = yaml.safe_load((CORPUS / "11_deepseek-v4-pro-fp8_8xH200_kv_pool_oom.yaml").read_text())["truth"]
    p = _plan(case, Observed(int((t["avail_after_weights_gb"] + t["weight_mem_gb"]) * GIB),
                             int(t["weight_mem_gb"] * GIB)))
    assert p.verdict == "kv_pool_oom" and p.exit_code == 78 and p.blocks_launch
    minimum = 1 - t["avail_after_weights_gb"] / (t["avail_after_weights_gb"] + t["weight_mem_gb"])
    assert abs(minimum - t["sglang_min_viable_mfs"]) < 0.0005
    assert "Raise --mem-fraction-static above 0.912" in (p.result.sglang_error or "")


def test_memory_corpus_failure_eagle_graph_oom_on_h20_is_predicted() -> None:
    case = yaml.safe_load((CORPUS / "22_qwen2-7b-eagle_1xH20_graph_oom.yaml").read_text())
    assert _plan(case).verdict == "graph_oom_risk"


def test_memory_corpus_eagle_on_h20_runs_short_centrally_and_warns() -> None:
    """22: before 0.4.4 the verify graphs are captured in ascending order and keep, per captured size, fp32 logits and
    hidden states for 64 draft tokens per request plus their own transients (extras.verify_graph_bytes): the runtime
    need exceeds the slack the 0.7 fraction leaves by more than its ±, so the launch is warned (exit 1), not blocked."""
    case = yaml.safe_load((CORPUS / "22_qwen2-7b-eagle_1xH20_graph_oom.yaml").read_text())
    p = _plan(case)
    assert p.budget.runtime_need - p.budget.slack > p.budget.margin_pm
    assert p.verdict == "graph_oom_risk" and p.exit_code == 1 and not p.blocks_launch


def test_memory_corpus_rocm_launch_is_marked_not_modelled() -> None:
    """04 (8x MI300X-class, ROCm): the accountant says it does not model AMD GPUs."""
    from sglwrap.host.facts import facts_from_dict

    facts = facts_from_dict({"source": "test", "gpus": [{"index": i, "name": "AMD Instinct MI300X",
                                                         "memory_total_bytes": 192 * GIB, "compute_capability": [9, 4]}
                                                        for i in range(8)]})
    p = plan(facts, {}, ["--model-path", "DeepSeek-V3", "--tp", "8"], sglang_version="0.4.8")
    assert any("AMD/ROCm GPUs are not modelled" in s for s in p.explanation)


def test_memory_corpus_dp_attention_weights_follow_sglangs_deepseek_loader() -> None:
    """23: DeepSeek-V3 FP8 with DP attention (DP8 TP8) logged 105.59 GB of weights per rank. Plain TP sharding gives
    88 GiB; SGLang 0.5.23's loader replicates the embedding over the attention-TP group, the lm_head with
    --enable-dp-lm-head, shared experts with DeepEP and dense MLPs with --moe-dense-tp-size 1, and adds redundant
    experts. With the issue's large-scale-EP recipe flags (assumed: the excerpt does not show them) the prediction
    comes within 2% of the log."""
    t = yaml.safe_load((CORPUS / "23_deepseek-v3-dp-attention_8xH200_ok.yaml").read_text())["truth"]
    base = ["--model-path", "DeepSeek-V3", "--tp", "8", "--dp", "8", "--enable-dp-attention"]
    recipe = base + ["--moe-a2a-backend", "deepep", "--moe-dense-tp-size", "1", "--enable-dp-lm-head",
                     "--ep-num-redundant-experts", "32"]
    facts = resolve_assume("8xH200")
    plain = plan(facts, {}, base, sglang_version="0.5.23").budget.weights / GIB
    full = plan(facts, {}, recipe, sglang_version="0.5.23").budget.weights / GIB
    assert plain < 0.9 * t["weight_mem_gb"]
    assert abs(full - t["weight_mem_gb"]) / t["weight_mem_gb"] < 0.03


def _memory_failures() -> list[dict[str, Any]]:
    return [c for c in _cases() if c["outcome"] in ("kv_pool_oom", "weights_dont_fit", "graph_oom")
            and c.get("argv") and c["gpu"].get("catalogue")]


@pytest.mark.parametrize("case", _memory_failures(), ids=lambda c: c["id"])
def test_memory_corpus_every_plannable_memory_failure_is_predicted(case: dict[str, Any]) -> None:
    """A launch that died of memory (KV pool, weights, graph capture) and can be planned from scratch is not
    predicted to fit: graph_oom_risk (exit 1) or a sure *_oom / weights_dont_fit (exit 78)."""
    p = _plan(case)
    assert p.verdict not in ("fits", "fits_tight") and p.exit_code in (1, 78), (case["id"], p.verdict)


def test_memory_corpus_has_plannable_failures_of_each_kind() -> None:
    kinds = {c["outcome"] for c in _memory_failures()}
    assert {"graph_oom", "weights_dont_fit"} <= kinds and len(_memory_failures()) >= 3
