"""Several files: grouped into runs by identity, one report per run; the plot's shared stage axis and marks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglwrap.cli import main
from sglwrap.diagnose import diagnose_runs

FIX = Path(__file__).parent / "fixtures" / "logs"
OOM = FIX / "v0.2.7_tp2_not-enough-memory.log"
OK = FIX / "v0.4.8_docker_tp4_mla_ok.log"


def _json(capsys: pytest.CaptureFixture[str], *paths: Path) -> tuple[int, dict]:
    rc = main(["diagnose", "--json", *map(str, paths)])
    return rc, json.loads(capsys.readouterr().out)


def test_unrelated_files_are_separate_runs_and_the_fix_uses_only_its_own_numbers(
        capsys: pytest.CaptureFixture[str]) -> None:
    _rc, alone = _json(capsys, OOM)
    rc, both = _json(capsys, OK, OOM)
    assert rc == 1 and {"runs", "schema_version", "exit_code"} <= set(both)
    ok, oom = both["runs"]
    assert (ok["outcome"], oom["outcome"]) == ("ok", "oom")
    assert oom["fix"] == alone["fix"] and oom["cause"] == alone["cause"]
    assert oom["files"] == [str(OOM)] and ok["files"] == [str(OK)]
    assert {r["label"] for r in ok["ranks"]}.isdisjoint({r["label"] for r in oom["ranks"]})


def _node(rank: int, ts: str, avail: float) -> str:
    return "\n".join([
        f"[{ts}] server_args=ServerArgs(model_path='deepseek-ai/DeepSeek-V3', tp_size=16, mem_fraction_static=0.8, "
        f"nnodes=2, node_rank={rank}, dist_init_addr='10.0.0.1:5000')",
        f"[{ts} TP{8 * rank}] Load weight begin. avail mem={avail:.2f} GB",
        f"[{ts} TP{8 * rank}] Load weight end. type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, "
        f"avail mem={avail - 40:.2f} GB, mem usage=40.00 GB.",
    ]) + "\n"


def test_nodes_of_one_multi_node_run_stay_one_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "node0.log", tmp_path / "node1.log"
    a.write_text(_node(0, "2025-06-01 10:00:00", 78.0))
    b.write_text(_node(1, "2025-06-01 10:00:05", 77.0))
    _rc, rep = _json(capsys, a, b)
    assert "runs" not in rep
    assert sorted(r["label"] for r in rep["ranks"]) == ["TP0", "TP8"]
    assert sorted(rep["files"]) == sorted([str(a), str(b)])


def test_same_node_twice_or_hours_apart_is_two_runs(tmp_path: Path) -> None:
    a, b, c = tmp_path / "a.log", tmp_path / "b.log", tmp_path / "c.log"
    a.write_text(_node(0, "2025-06-01 10:00:00", 78.0))
    b.write_text(_node(0, "2025-06-01 10:01:00", 78.0))  # node 0 again: a second launch
    c.write_text(_node(1, "2025-06-01 18:00:00", 77.0))  # node 1, eight hours later
    runs = diagnose_runs([str(a), str(b), str(c)])
    assert [len(r.files) for r in runs] == [1, 1, 1]


def test_several_runs_text_names_each_and_exit_is_1_if_any_failed(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diagnose", str(OK), str(OOM)]) == 1
    out = capsys.readouterr().out
    assert "run 1 of 2" in out and "run 2 of 2" in out


def test_plot_path_is_said_and_one_png_per_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "mem.png"
    main(["diagnose", "--plot", str(out), str(OK), str(OOM)])
    err = capsys.readouterr().err
    made = sorted(p.name for p in tmp_path.glob("*.png"))
    assert made == ["mem-run1.png", "mem-run2.png"]
    assert "mem-run1.png" in err and "mem-run2.png" in err


def _axes(capsys: pytest.CaptureFixture[str], *paths: Path):  # type: ignore[no-untyped-def]
    plt = pytest.importorskip("matplotlib.pyplot")
    from sglwrap.diagnose.plot import _draw

    rep = diagnose_runs([str(p) for p in paths])[0]
    fig, ax = plt.subplots()
    names = [(r.label, r) for r in rep.ranks]
    _draw(ax, rep, names, "t")
    return rep, ax, plt, fig


def test_only_the_failing_rank_is_marked_and_zero_line_only_for_memory(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    text = (_node(0, "2025-06-01 10:00:00", 78.0)
            + "[2025-06-01 10:00:09 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
            + "[2025-06-01 10:00:09 TP0] KeyError: 'rope_scaling'\n"
            + "[2025-06-01 10:00:00 TP1] Load weight begin. avail mem=78.00 GB\n")
    p = tmp_path / "err.log"
    p.write_text(text)
    rep, ax, plt, fig = _axes(capsys, p)
    try:
        assert rep.finding.outcome == "error" and rep.finding.failed == ("", "TP0")
        xs = [ln for ln in ax.lines if ln.get_marker() == "X"]
        assert len(xs) == 1
        assert not [ln for ln in ax.lines if list(ln.get_ydata()) == [0, 0]]
    finally:
        plt.close(fig)
    rep, ax, plt, fig = _axes(capsys, OOM)
    try:
        assert rep.finding.outcome == "oom"
        assert [ln for ln in ax.lines if list(ln.get_ydata()) == [0, 0]]
    finally:
        plt.close(fig)


def test_ranks_share_the_stage_axis_even_with_a_missing_line(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    from sglwrap.diagnose.plot import AXIS

    text = ("[2025-06-01 10:00:00 TP0] Load weight begin. avail mem=78.00 GB\n"
            "[2025-06-01 10:00:00 TP0] Load weight end. type=X, dtype=torch.bfloat16, avail mem=38.00 GB, "
            "mem usage=40.00 GB.\n"
            "[2025-06-01 10:00:00 TP1] Load weight end. type=X, dtype=torch.bfloat16, avail mem=38.00 GB, "
            "mem usage=40.00 GB.\n")  # TP1's "Load weight begin" is missing
    p = tmp_path / "gap.log"
    p.write_text(text)
    _rep, ax, plt, fig = _axes(capsys, p)
    try:
        by_label = {ln.get_label(): list(ln.get_xdata()) for ln in ax.lines}
        after = AXIS.index("after weights")
        assert by_label["TP0"] == [AXIS.index("before weights"), after] and by_label["TP1"] == [after]
    finally:
        plt.close(fig)


def test_fix_never_invents_a_current_value(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = (FIX / "v0.5.9_tp2_capture-oom.log").read_text()
    p = tmp_path / "nobs.log"
    p.write_text("\n".join(ln for ln in text.splitlines() if "server_args" not in ln) + "\n")
    _rc, rep = _json(capsys, p)
    assert rep["stage"] == "cuda_graph"
    assert "halve --cuda-graph-max-bs from the value this launch used" in rep["fix"]
    assert not any(ch.isdigit() for ch in rep["fix"].split("(")[0])  # no batch size the user never ran
