"""bench-comm's pure parts: sizes, statistics, nccl-tests bandwidths and number format, the winner rule, the
sweep grid, the profile writer and never-overwriting output files. No rank process is started here."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from sglwrap.bench import results as res
from sglwrap.bench import sizes as sz
from sglwrap.bench.output import write_new
from sglwrap.bench.runner import SAFE_ENV, Config, ConfigRun, RankLog, plan_environment
from sglwrap.bench.sweep import DEFAULT_GRID, grid_points, parse_grid, sweep_configs, write_profile
from sglwrap.bench.table import fstr
from sglwrap.errors import ConfigError, UsageError
from sglwrap.profiles import load_profile
from sglwrap.sglang.flags import bundled_table

REAL = Path(__file__).resolve().parents[1] / "docs" / "data"


# --- sizes ---------------------------------------------------------------------------------------------------

def test_llama_8b_message_sizes() -> None:
    shape = sz.model_shape("Llama-3.1-8B")
    assert (shape.hidden_size, shape.num_layers, shape.dtype, shape.graph_ops) == (4096, 32, "bfloat16", 64)
    got = {s.nbytes: s.label for s in sz.model_sizes(shape, (1, 128), (1,), draft_tokens=4)}
    assert got == {8192: "decode bs=1", 1048576: "decode bs=128", 32768: "verify bs=1x4"}


def test_model_config_in_text_config_and_by_directory(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(
        {"text_config": {"hidden_size": 7168, "num_hidden_layers": 61, "torch_dtype": "bfloat16"}}))
    shape = sz.model_shape(str(tmp_path))
    assert shape.hidden_size == 7168 and shape.graph_ops == 122  # the reference story's 122 all-reduces
    assert sz.model_sizes(shape, (), (1,), draft_tokens=3)[0].nbytes == 43008  # its ~42 KB verify tensors
    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 2}))
    with pytest.raises(ConfigError, match="hidden_size"):
        sz.model_shape(str(tmp_path))


@pytest.mark.parametrize("text, n", [("43008", 43008), ("42K", 43008), ("42KiB", 43008), ("1M", 1 << 20),
                                     ("64MB", 64 << 20), ("1g", 1 << 30)])
def test_parse_size(text: str, n: int) -> None:
    assert sz.parse_size(text) == n


@pytest.mark.parametrize("text", ["", "x", "4X", "-1", "0", "1.5M"])
def test_parse_size_refuses(text: str) -> None:
    with pytest.raises(UsageError):
        sz.parse_size(text)


def test_merge_dedupes_rounds_to_elements_and_keeps_labels() -> None:
    merged = sz.merge([sz.Size(8192, ("decode bs=1",))], [sz.Size(8192), sz.Size(1025), sz.Size(1024)],
                      dtype_bytes=2)
    assert [(s.nbytes, s.labels) for s in merged] == [(1024, ()), (8192, ("decode bs=1",))]


# --- statistics and format ------------------------------------------------------------------------------------

@given(st.lists(st.floats(min_value=0.01, max_value=1e6, allow_nan=False), min_size=1, max_size=300))
def test_percentiles_are_ordered(values: list[float]) -> None:
    import statistics

    assert min(values) <= statistics.median(values) <= res.percentile(values, 90) <= max(values)
    assert res.percentile(values, 100) == max(values)


def test_bus_bandwidth_factor_is_nccl_tests() -> None:
    assert res.bus_factor(2) == 1.0
    assert res.bus_factor(8) == pytest.approx(1.75)


@pytest.mark.parametrize("value, text", [(1.234, "   1.23"), (1234.567, "1234.57"), (12345.67, "12345.7"),
                                         (123456.7, " 123457"), (12345678.0, "  1e+07"), (None, "      -")])
def test_fstr_like_nccl_tests(value: float | None, text: str) -> None:
    assert fstr(value) == text


def _run(name: str, samples: list[list[float]], mem: dict[str, int] | None = None, status: str = "ok") -> ConfigRun:
    prof = load_profile("baseline")
    logs = []
    for rank, s in enumerate(samples):
        rows = [{"size_bytes": 4096, "count": 2048, "mode": "eager", "samples_us": s, "ops_per_sample": 2,
                 "nwrong": 0}]
        logs.append(RankLog(rank=rank, result={"rows": rows, "mem": mem, "dtype": "bfloat16", "info": {}}))
    return ConfigRun(config=Config(name=name, profile=prof, base="baseline"), status=status, error=None,
                     ranks=logs, env_set={}, warnings=[], sitecustomize="", wall_s=1.0)


def test_rows_take_the_slowest_rank_per_sample() -> None:
    run = _run("baseline", [[10.0, 30.0, 10.0, 10.0], [20.0, 10.0, 10.0, 40.0]],
               mem={"init": 100, "first_collective": 200, "after_eager": 300})
    [row] = res.rows_for(run, [sz.Size(4096, ("x",))], world=2)
    assert row["latency_us"] == 25.0  # median of max per sample: 20, 30, 10, 40
    assert row["latency_us_p90"] == 40.0 and row["latency_us_min"] == 10.0
    assert row["nccl_mem_bytes"] == 300 and row["label"] == "x"
    assert row["alg_bw"] == pytest.approx(4096 / 25e-6 / 1e9, rel=1e-5)
    assert res.rows_for(_run("b", [[1.0]], status="timeout"), [], world=2) == []


# --- the winner -----------------------------------------------------------------------------------------------

def _row(name: str, size: int, lat: float, p90: float | None = None, mem: int | None = None,
         mode: str = "graph") -> dict[str, Any]:
    return {"profile": name, "size_bytes": size, "mode": mode, "latency_us": lat,
            "latency_us_p90": p90 if p90 is not None else lat * 1.01, "nccl_mem_bytes": mem}


def test_winner_must_beat_the_noise_and_ties_go_to_less_memory() -> None:
    rows = [_row("base", 1, 20.0, mem=1000), _row("base", 2, 30.0, mem=1000),
            _row("fast", 1, 14.0, mem=1100), _row("fast", 2, 21.0, mem=1100),       # 30% faster
            _row("lean", 1, 14.5, mem=500), _row("lean", 2, 21.5, mem=500),         # as fast, half the memory
            _row("slow", 1, 40.0, mem=100), _row("slow", 2, 60.0, mem=100)]
    w = res.pick_winner(rows, ["base", "fast", "lean", "slow"], [1, 2])
    assert w is not None and w.name == "lean" and set(w.equal) == {"fast", "lean"}
    assert w.reference == "base" and w.nccl_mem_bytes == 500


def test_within_the_reference_noise_the_reference_stays() -> None:
    rows = [_row("base", 1, 20.0, p90=26.0, mem=1000), _row("other", 1, 18.0, mem=1000)]  # 10% < 30% spread
    w = res.pick_winner(rows, ["base", "other"], [1])
    assert w is not None and w.name == "base" and w.margin == pytest.approx(0.3)


def test_graph_mode_decides_and_incomplete_configs_do_not_compete() -> None:
    rows = [_row("base", 1, 20.0, mode="eager"), _row("base", 1, 10.0), _row("base", 2, 10.0),
            _row("x", 1, 1.0, mode="eager"), _row("x", 1, 8.0)]  # x has no graph result at size 2
    w = res.pick_winner(rows, ["base", "x"], [1, 2])
    assert w is not None and w.mode == "graph" and w.name == "base"
    assert res.pick_winner([], ["base"], [1]) is None


def test_the_real_h200_runs_pick_as_documented() -> None:
    """docs/benchmarks.md quotes these winners; keep the rule and the doc in step."""
    first = json.loads((REAL / "bench_h200x2.json").read_text())
    w = res.pick_winner(first["results"], [c["name"] for c in first["configs"]], first["config"]["targets"])
    assert w is not None and w.name == "baseline" and "pcie-ring" in w.equal
    sweep = json.loads((REAL / "bench_sweep_h200x2.json").read_text())
    w = res.pick_winner(sweep["results"], [c["name"] for c in sweep["configs"]], sweep["config"]["targets"])
    assert w is not None and w.name == "baseline+proto=LL"


# --- sweep grid and written profiles --------------------------------------------------------------------------

def test_default_grid_one_factor_at_a_time() -> None:
    points = grid_points(DEFAULT_GRID, full=False)
    assert len(points) == sum(len(v) for _, v in DEFAULT_GRID)
    assert ("ch=2", {"NCCL_MIN_NCHANNELS": "2", "NCCL_MAX_NCHANNELS": "2"}) in points
    assert ("p2p=LOC", {"NCCL_P2P_LEVEL": "LOC"}) in points


def test_full_grid_is_the_product() -> None:
    dims = parse_grid(["channels=1,2", "NCCL_PROTO=LL,Simple,LL128"])
    points = grid_points(dims, full=True)
    assert len(points) == 6
    assert ("ch=2+proto=LL128", {"NCCL_MIN_NCHANNELS": "2", "NCCL_MAX_NCHANNELS": "2", "NCCL_PROTO": "LL128"}) \
        in points


@pytest.mark.parametrize("spec, match", [("NCCL_BUFFSIZE=4M", "NCCL_BUFFSIZE=4M"), ("channels=0", "channels=0"),
                                         ("NCCL_P2P_LEVEL=pxb", "pxb"), ("novalue", "NAME=v1,v2"),
                                         ("NCCL_NCHANNELS=2", "unknown variable")])
def test_grid_values_are_validated_like_profiles(spec: str, match: str) -> None:
    with pytest.raises(UsageError, match=match):
        grid_points(parse_grid([spec]), full=False)


def test_sweep_points_are_profiles_on_top_of_the_base() -> None:
    base = load_profile("fewchan")
    [c] = sweep_configs(base, parse_grid(["NCCL_PROTO=LL"]), full=False)
    assert c.name == "fewchan+proto=LL" and c.base == "fewchan" and c.kind == "sweep"
    assert c.profile.env["NCCL_PROTO"].value == "LL" and c.profile.env["NCCL_BUFFSIZE"].value == "131072"
    assert c.profile.hash != base.hash


def _winner(name: str) -> res.Winner:
    return res.Winner(name=name, mode="graph", score=0.8, reference="baseline", sizes=(8192,),
                      latency_us={8192: 16.0}, reference_us={8192: 20.0}, nccl_mem_bytes=480 << 20,
                      reference_mem_bytes=994 << 20)


CONTEXT = {"date": "2026-11-30", "host": "h", "world_size": 2, "device": "NVIDIA H200", "nccl_version": "2.28.9",
           "torch_version": "2.11", "backend": "nccl", "n_configs": 3}


def test_write_profile_extends_the_base_validated_atomic_and_never_over(tmp_path: Path) -> None:
    env = dict(os.environ, SGLWRAP_PROFILE_PATH=str(tmp_path / "mine"))
    [cfg] = sweep_configs(load_profile("baseline"), parse_grid(["channels=2"]), full=False)
    path, prof = write_profile("tuned", _winner(cfg.name), cfg, CONTEXT, env)
    assert path == tmp_path / "mine" / "tuned.yaml"
    raw = yaml.safe_load(path.read_text())
    assert raw["extends"] == "baseline" and raw["env"] == {"NCCL_MIN_NCHANNELS": "2", "NCCL_MAX_NCHANNELS": "2"}
    assert "8 KiB 16.0 us (vs 20.0)" in raw["description"] and "480 MiB per GPU vs 994 MiB" in raw["description"]
    assert prof.name == "tuned" and prof.sources[1].endswith("baseline.yaml")
    assert load_profile("tuned", env).hash == prof.hash
    with pytest.raises(ConfigError, match="already exists"):
        write_profile("tuned", _winner(cfg.name), cfg, CONTEXT, env)
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["tuned.yaml"]


def test_a_plain_profile_winner_is_written_as_an_extension_of_it(tmp_path: Path) -> None:
    env = dict(os.environ, SGLWRAP_PROFILE_PATH=str(tmp_path))
    cfg = Config(name="fewchan", profile=load_profile("fewchan"), base="fewchan")
    _, prof = write_profile("measured", _winner("fewchan"), cfg, CONTEXT, env)
    assert yaml.safe_load((tmp_path / "measured.yaml").read_text())["extends"] == "fewchan"
    assert prof.env["NCCL_MAX_NCHANNELS"].value == "2"


def test_default_user_dir_is_xdg_config(tmp_path: Path, isolated_env: Path) -> None:
    cfg = Config(name="baseline", profile=load_profile("baseline"), base="baseline")
    path, _ = write_profile("mybase", _winner("baseline"), cfg, CONTEXT)
    assert path == isolated_env / ".config" / "sglwrap" / "profiles" / "mybase.yaml"


# --- the rank environment -------------------------------------------------------------------------------------

def test_rank_environment_is_the_launch_plan_plus_sglang_launcher_plus_safety(tmp_path: Path) -> None:
    environ = dict(os.environ, NCCL_BUFFSIZE="4194304")  # the user's own value is kept, as launch keeps it
    env, env_set, warnings, site = plan_environment(load_profile("fewchan"), bundled_table(), python="python3",
                                                    environ=environ)
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(site.parent)
    assert "_SGLWRAP_HASH" in site.read_text()
    assert env["NCCL_MIN_NCHANNELS"] == "1" and env["NCCL_BUFFSIZE"] == "4194304"
    assert "NCCL_BUFFSIZE" not in env_set and any("NCCL_BUFFSIZE=4194304" in w for w in warnings)
    assert env["NCCL_CUMEM_ENABLE"] == "0" and env["CUDA_DEVICE_MAX_CONNECTIONS"] == "8"
    for k, v in SAFE_ENV.items():
        assert env[k] == v
    env2, *_ = plan_environment(load_profile("baseline"), bundled_table(), python="python3",
                                environ=dict(os.environ, NCCL_NVLS_ENABLE="1"), allow_nvls=True)
    assert env2["NCCL_NVLS_ENABLE"] == "1"  # only with --allow-nvls


# --- output files ---------------------------------------------------------------------------------------------

def test_write_new_never_overwrites(tmp_path: Path) -> None:
    tmp_path = tmp_path / "out"
    tmp_path.mkdir()
    p = tmp_path / "r.json"
    assert write_new(p, b"1") == p
    assert write_new(p, b"2") == tmp_path / "r.json.0"
    assert write_new(p, b"3") == tmp_path / "r.json.1"
    assert [p.read_bytes(), (tmp_path / "r.json.0").read_bytes()] == [b"1", b"2"]
    assert sorted(x.name for x in tmp_path.iterdir()) == ["r.json", "r.json.0", "r.json.1"]
    with pytest.raises(ConfigError, match="does not exist"):
        write_new(tmp_path / "nope" / "x.json", b"")


# --- --repeat: interleaving, run medians, the paired winner rule --------------------------------------------

def test_repeats_are_interleaved_round_by_round() -> None:
    from sglwrap.bench import schedule

    assert schedule(3, 2) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]  # A B C A B C, not A A B B C C
    assert schedule(2, 1) == [(0, 0), (0, 1)]


def test_run_medians_are_aggregated_with_their_spread() -> None:
    def run_rows(lat: float, p90: float) -> list[dict[str, Any]]:
        return [{"profile": "a", "size_bytes": 4096, "mode": "graph", "latency_us": lat, "latency_us_p90": p90,
                 "latency_us_min": lat / 2, "latency_us_mean": lat, "alg_bw": 0.0, "bus_bw": 0.0, "nwrong": 0,
                 "samples": 10, "nccl_mem_bytes": 100, "label": ""}]

    [row] = res.aggregate_rows([run_rows(20.0, 30.0), [], run_rows(10.0, 12.0), run_rows(40.0, 50.0)], world=2)
    assert row["latency_us"] == 20.0 and row["latency_us_runs"] == [20.0, None, 10.0, 40.0]
    assert (row["latency_us_runs_p10"], row["latency_us_runs_p90"]) == (10.0, 40.0)
    assert row["repeat"] == 4 and row["samples"] == 30 and row["latency_us_p90"] == 30.0
    assert row["latency_us_min"] == 5.0
    assert row["alg_bw"] == pytest.approx(4096 / 20e-6 / 1e9, rel=1e-5)


@pytest.mark.parametrize("pairs, needed", [(1, 1), (2, 2), (3, 3), (4, 3), (5, 4), (10, 8)])
def test_a_clear_majority_is_three_quarters_of_the_pairs(pairs: int, needed: int) -> None:
    assert res.needed_wins(pairs) == needed


def test_a_noisy_winner_is_rejected_and_a_consistent_one_accepted() -> None:
    # The docs' case: the reference drifts between runs (19-31 us at one size) more than candidates differ.
    ref = [[19.2, 21.1], [31.3, 23.1], [22.7, 23.1], [20.0, 30.0], [25.0, 22.0]]
    lucky = [[18.0, 20.0], [24.0, 22.0], [23.0, 24.0], [21.0, 24.0], [20.5, 21.0]]  # median ~9% faster
    v = res.paired_verdict(ref, lucky)
    assert v.wins == 4 and v.needed == 4  # wins the majority of pairs ...
    assert 0.05 < v.improvement < v.spread  # ... but by less than the reference's across-run spread
    assert not v.beats
    alternating = [[r[0] * f, r[1] * f] for r, f in zip(ref, (0.3, 1.5, 0.3, 1.5, 0.3))]
    v = res.paired_verdict(ref, alternating)
    assert v.improvement > v.spread and v.wins == 3 and not v.beats  # big median gain, not consistent
    steady = [[1.0, 1.0]] * 5
    steady_ref = [[1.3, 1.4], [1.35, 1.3], [1.3, 1.32], [1.4, 1.3], [1.3, 1.3]]
    v = res.paired_verdict(steady_ref, steady)
    assert v.wins == 5 and v.improvement > v.margin and v.beats
    assert not res.paired_verdict(steady_ref, [[None, None]] * 5).beats  # no pairs, no win


def _rrow(name: str, size: int, runs: list[float], mem: int | None = None) -> dict[str, Any]:
    import statistics

    med = statistics.median(runs)
    return {"profile": name, "size_bytes": size, "mode": "graph", "latency_us": med, "latency_us_p90": med * 1.01,
            "nccl_mem_bytes": mem, "repeat": len(runs), "latency_us_runs": runs}


def test_with_repeats_the_paired_rule_decides_and_n1_keeps_the_old_rule() -> None:
    ref = [20.0, 30.0, 22.0, 21.0, 26.0]
    lucky = [18.0, 24.0, 19.0, 19.0, 22.0]  # median 14% faster, 5 of 5 pairs: inside the reference's 50% spread
    rows = [_rrow("base", 1, ref, 1000), _rrow("lucky", 1, lucky, 1000)]
    w = res.pick_winner(rows, ["base", "lucky"], [1])
    assert w is not None and w.name == "base" and w.repeat == 2 + 3 and w.rule == res.RULE_REPEAT
    assert dict((n, (k, p)) for n, k, p in w.pairs_won) == {"lucky": (5, 5)} and w.needed == 4
    fast = [x * 0.4 for x in ref]  # 60% faster in every pair: beyond the 50% spread
    w = res.pick_winner(rows + [_rrow("fast", 1, fast, 1200)], ["base", "lucky", "fast"], [1])
    assert w is not None and w.name == "fast" and w.equal == ("fast",)
    lean = [x * 1.02 for x in ref]  # as fast within the noise, half the memory: wins on memory
    w = res.pick_winner(rows + [_rrow("lean", 1, lean, 500)], ["base", "lucky", "lean"], [1])
    assert w is not None and w.name == "lean"
    # The same medians from single runs: the old rule (p90/median of the one run) would pick "lucky".
    single = [dict(r, repeat=1, latency_us_runs=[r["latency_us"]]) for r in rows]
    w = res.pick_winner(single, ["base", "lucky"], [1])
    assert w is not None and w.name == "lucky" and w.rule == res.RULE_SINGLE
    doc = res.winner_doc(w)
    assert doc is not None and res.winner_from_doc(doc) == w


def test_the_repeated_h200_runs_pick_as_documented() -> None:
    """docs/benchmarks.md quotes these verdicts of the repeated runs; keep the rule and the doc in step."""
    doc = json.loads((REAL / "bench_h200x2_r5.json").read_text())
    w = res.pick_winner(doc["results"], [c["name"] for c in doc["configs"]], doc["config"]["targets"])
    assert w is not None and w.name == "baseline" and w.repeat == 5
    assert dict((n, k) for n, k, _ in w.pairs_won) == {"fewchan": 0, "pcie-ring": 0}
    sweep = json.loads((REAL / "bench_sweep_h200x2_r3.json").read_text())
    w = res.pick_winner(sweep["results"], [c["name"] for c in sweep["configs"]], sweep["config"]["targets"])
    assert w is not None and w.name == "baseline+ch=8" and w.score > 1 - w.margin  # on memory, not speed
    assert all(k < w.needed for _, k, _ in w.pairs_won)  # nothing was faster in 3 of 3 pairs


def test_features_and_server_settings_are_reported_as_not_measured() -> None:
    from sglwrap.bench.results import not_measured
    from sglwrap.profiles import load_profile

    assert not_measured(load_profile("fewchan")) == []
    assert not_measured(load_profile("pcie-ipc")) == ["features.pcie_ipc_allreduce: prefer"]
    assert not_measured(load_profile("lowgraph")) == ["sglang.cuda_graph_max_bs: 128"]
