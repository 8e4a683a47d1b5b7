"""Several inputs: unrelated logs are never merged, an unreadable one among readable ones is a warning, runs keep the
command line's order and short labels, and the multi-run JSON carries its schema version and exit code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglwrap.cli import main
from sglwrap.diagnose import diagnose_runs

FIX = Path(__file__).parent / "fixtures" / "logs"
CORPUS = Path(__file__).parent / "corpus" / "diagnose"
OOM = FIX / "v0.2.7_tp2_not-enough-memory.log"
OK = FIX / "v0.4.8_docker_tp4_mla_ok.log"


def _case(nn: str) -> Path:
    return next(CORPUS.glob(f"{nn}_*.log"))


def _excerpt(ts: str, rank: str, kind: str, end: str = "") -> str:
    """A pasted excerpt: weight-load lines of one rank, no server args (no launch identity)."""
    return (f"[{ts} {rank}] Load weight begin. avail mem=78.00 GB\n"
            f"[{ts} {rank}] Load weight end. type={kind}, dtype=torch.bfloat16, avail mem=38.00 GB, "
            f"mem usage=40.00 GB.\n" + end)


UP = "[2025-06-01 10:01:00] The server is fired up and ready to roll!\n"
FAILED = "[2025-06-01 10:01:00 TP1] RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.\n"


def _files(tmp_path: Path, *texts: str) -> list[str]:
    out = []
    for i, text in enumerate(texts):
        p = tmp_path / f"f{i}.log"
        p.write_text(text)
        out.append(str(p))
    return out


def test_excerpts_without_anything_that_ties_them_are_separate_runs() -> None:
    # an Ascend serving OOM (timestamped) and a one-line NPU OOM of another report (no timestamp)
    runs = diagnose_runs([str(_case("86")), str(_case("101"))])
    assert len(runs) == 2
    assert [r.finding.stage for r in runs] == ["serving", "init"]


def test_different_model_or_outcome_means_different_runs_even_at_the_same_time(tmp_path: Path) -> None:
    same_time = "2025-06-01 10:00:00"
    model = _files(tmp_path, _excerpt(same_time, "TP0", "LlamaForCausalLM"),
                   _excerpt(same_time, "TP1", "Qwen2ForCausalLM"))
    assert len(diagnose_runs(model)) == 2
    outcome = _files(tmp_path, _excerpt(same_time, "TP0", "LlamaForCausalLM", UP),
                     _excerpt(same_time, "TP1", "LlamaForCausalLM", FAILED))
    assert [r.finding.outcome for r in diagnose_runs(outcome)] == ["ok", "oom"]
    # the same rank twice is two launches; hours apart too
    rank = _files(tmp_path, _excerpt(same_time, "TP0", "LlamaForCausalLM"),
                  _excerpt(same_time, "TP0", "LlamaForCausalLM"))
    assert len(diagnose_runs(rank)) == 2
    later = _files(tmp_path, _excerpt(same_time, "TP0", "LlamaForCausalLM"),
                   _excerpt("2025-06-01 18:00:00", "TP1", "LlamaForCausalLM"))
    assert len(diagnose_runs(later)) == 2
    # what does tie two excerpts: the same window, other ranks, the same model, no contradicting outcome
    together = _files(tmp_path, _excerpt(same_time, "TP0", "LlamaForCausalLM"),
                      _excerpt(same_time, "TP1", "LlamaForCausalLM", FAILED))
    runs = diagnose_runs(together)
    assert len(runs) == 1 and sorted(r.label for r in runs[0].ranks) == ["TP0", "TP1"]


@pytest.mark.parametrize("bad", ["empty", "missing", "binary"])
def test_an_unreadable_input_among_readable_ones_is_a_warning(tmp_path: Path, bad: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    p = tmp_path / f"{bad}.log"
    if bad == "empty":
        p.write_text("")
    elif bad == "binary":
        p.write_bytes(bytes(range(256)) * 64)
    assert main(["diagnose", "--json", str(p), str(OK)]) == 0
    cap = capsys.readouterr()
    doc = json.loads(cap.out)
    assert doc["outcome"] == "ok" and [s["file"] for s in doc["skipped_inputs"]] == [str(p)]
    assert f"skipped {p}" in cap.err
    # text: the other inputs are still reported, and a failing one still exits 1
    assert main(["diagnose", str(p), str(OOM)]) == 1
    cap = capsys.readouterr()
    assert "outcome: oom" in cap.out and "warning" in cap.err


def test_exit_2_only_when_nothing_could_be_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.log"
    empty.write_text("")
    assert main(["diagnose", str(empty), str(tmp_path / "missing.log")]) == 2
    assert "empty.log" in capsys.readouterr().err


def test_runs_keep_command_line_order_and_short_labels(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "node.log").write_text(_excerpt("2025-06-01 10:00:00", "TP0", "LlamaForCausalLM"))
    (b / "node.log").write_text(OOM.read_text())
    excerpt = str(_case("101"))  # no identity: it used to be appended after the runs that had one
    paths = [excerpt, str(OK), str(a / "node.log"), str(b / "node.log")]
    assert main(["diagnose", *paths]) == 1
    out = capsys.readouterr().out
    heads = [ln for ln in out.splitlines() if ln.startswith("== run ")]
    assert heads == [f"== run 1 of 4: {Path(excerpt).name} ==", f"== run 2 of 4: {OK.name} ==",
                     "== run 3 of 4: a/node.log ==", "== run 4 of 4: b/node.log =="]
    assert str(tmp_path) not in out  # rank names use the short labels too


def test_multi_run_json_carries_schema_version_and_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", "--json", str(OK), str(OOM)]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert (doc["schema_version"], doc["command"], doc["exit_code"]) == (1, "diagnose", 1)
    assert [(r["run"], r["label"], r["outcome"]) for r in doc["runs"]] == [(1, OK.name, "ok"), (2, OOM.name, "oom")]
    assert doc["skipped_inputs"] == []
