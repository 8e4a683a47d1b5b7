"""NCCL all-reduce latency and device memory per profile, measured on this machine's GPUs (``bench-comm``).

sglwrap's own process never imports torch: each configuration runs in fresh worker processes, one per rank
(``worker.py``), started with the environment a launch would give SGLang's workers (``runner.py``). The results
follow nccl-tests (``results.py``, ``table.py``); ``sweep.py`` builds the ``--sweep`` grid and writes the
winning profile; ``plot.py`` draws latency against message size.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from sglwrap import __version__
from sglwrap.bench import results as res
from sglwrap.bench.runner import SAFE_ENV, SGLANG_LAUNCHER_ENV, Config, ConfigRun, plan_environment, run_config
from sglwrap.bench.sizes import ModelShape, Size
from sglwrap.bench.table import Progress, config_block, header, summary
from sglwrap.errors import ConfigError
from sglwrap.profiles import load_profile
from sglwrap.record import Record, field

SCHEMA = 1


class BenchOptions(Record):
    """Everything one bench-comm run does, decided before any rank starts."""

    profiles: tuple[str, ...]
    sizes: tuple[Size, ...]
    targets: tuple[int, ...]  # the sizes the winner is chosen for
    backend: str = "nccl"
    world_size: int = 2
    modes: tuple[str, ...] = ("eager",)
    dtype: str = "bfloat16"
    graph_ops: int = 64
    graph_bytes_cap: int = 1 << 30
    model: ModelShape | None = None
    sweep_dims: tuple[tuple[str, tuple[str, ...]], ...] = ()
    sweep_full: bool = False
    timeout: float = 180.0
    budget_s: float = 0.2
    min_reps: int = 10
    max_reps: int = 200
    warmup: int = 5
    python: str = sys.executable
    allow_nvls: bool = False
    repeat: int = 1  # runs per configuration, each in fresh rank processes, interleaved (A B C A B C ...)
    argv: tuple[str, ...] = field(default=())


def build_configs(opts: BenchOptions, environ: Mapping[str, str]) -> list[Config]:
    """The profiles as given, then the sweep points on top of the first one."""
    from sglwrap.bench.sweep import sweep_configs

    configs: list[Config] = []
    seen: set[str] = set()
    for name in opts.profiles:
        prof = load_profile(name, environ)
        if prof.name in seen:
            continue
        seen.add(prof.name)
        configs.append(Config(name=prof.name, profile=prof, base=prof.name))
    if opts.sweep_dims:
        configs += sweep_configs(configs[0].profile, opts.sweep_dims, full=opts.sweep_full)
    return configs


def schedule(n_configs: int, repeat: int) -> list[tuple[int, int]]:
    """(repeat index, configuration index) in the order they run: round by round, A B C A B C ...

    Interleaving puts slow drift of the machine (clocks, temperature, neighbours) on every configuration alike
    instead of on whichever ran last; run k of two configurations then form a pair for the winner rule.
    """
    return [(k, i) for k in range(repeat) for i in range(n_configs)]


def worker_spec(opts: BenchOptions) -> dict[str, Any]:
    return {"backend": opts.backend, "dtype": opts.dtype, "sizes": [s.nbytes for s in opts.sizes],
            "modes": list(opts.modes), "graph_ops": opts.graph_ops, "graph_bytes_cap": opts.graph_bytes_cap,
            "budget_s": opts.budget_s, "min_reps": opts.min_reps, "max_reps": opts.max_reps,
            "warmup": opts.warmup, "allow_nvls": opts.allow_nvls,
            "pg_timeout_s": max(30, int(opts.timeout))}


def _flag_table(python: str, environ: Mapping[str, str]) -> Any:
    from sglwrap.sglang.flags import bundled_table, flag_table

    try:
        return flag_table(python, environ=dict(environ))
    except ConfigError:
        return bundled_table()


def run_bench(opts: BenchOptions, environ: Mapping[str, str] | None = None, *, stream: TextIO | None = None,
              progress: bool = True, out: TextIO | None = None) -> tuple[dict[str, Any], dict[str, Config]]:
    """Measure every configuration ``opts.repeat`` times, interleaved; the JSON document and the configurations.

    Progress goes to ``stream`` (default stderr), the nccl-tests table to ``out`` (default: ``stream``).
    """
    env = dict(os.environ if environ is None else environ)
    err = stream or sys.stderr
    tab = out or err
    configs = build_configs(opts, env)
    table = _flag_table(opts.python, env)
    spec = worker_spec(opts)
    doc = _document(opts, env, len(configs))
    order = schedule(len(configs), opts.repeat)
    bar = Progress(len(order), err, enabled=progress)
    printed_header = False
    runs: list[list[ConfigRun]] = [[] for _ in configs]
    per_run_rows: list[list[list[dict[str, Any]]]] = [[] for _ in configs]
    seqs: list[list[int]] = [[] for _ in configs]
    for seq, (k, i) in enumerate(order):
        cfg = configs[i]
        full_env, env_set, warnings, site = plan_environment(cfg.profile, table, python=opts.python, environ=env,
                                                             allow_nvls=opts.allow_nvls)
        bar.start(seq, cfg.name if opts.repeat == 1 else f"{cfg.name} (run {k + 1}/{opts.repeat})")
        status, error, logs, wall = run_config(cfg, dict(spec, seq=seq, repeat_index=k), full_env,
                                               python=opts.python, world=opts.world_size, timeout=opts.timeout,
                                               on_phase=bar.phase)
        bar.done(status, wall)
        _forget_temp_run_dir(site)
        run = ConfigRun(config=cfg, status=status, error=error, ranks=logs, env_set=env_set, warnings=warnings,
                        sitecustomize=str(site), wall_s=wall)
        runs[i].append(run)
        seqs[i].append(seq)
        per_run_rows[i].append(res.rows_for(run, opts.sizes, opts.world_size))
        if status == "ok" and not doc["devices"]:
            _fill_devices(doc, run)
        if opts.repeat == 1:  # one block per configuration as soon as it is measured, as before
            conf = _config_entry(runs[i], seqs[i])
            rows = _rows(per_run_rows[i], opts)
            doc["configs"].append(conf)
            doc["results"] += rows
            if not printed_header and (status == "ok" or seq == len(order) - 1):
                tab.write(header(doc))
                printed_header = True
            tab.write(config_block(conf, rows))
            tab.flush()
    if opts.repeat > 1:  # the blocks only once every round is done: medians over the runs
        tab.write(header(doc))
        printed_header = True
        for i in range(len(configs)):
            conf = _config_entry(runs[i], seqs[i])
            rows = _rows(per_run_rows[i], opts)
            doc["configs"].append(conf)
            doc["results"] += rows
            tab.write(config_block(conf, rows, repeat=opts.repeat))
    if not printed_header:
        tab.write(header(doc))
    names = [c.name for c in configs]
    winner = res.pick_winner(doc["results"], names, list(opts.targets))
    doc["winner"] = res.winner_doc(winner)
    doc["end_time"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    sizes_shown = sorted(set(opts.targets) | {opts.sizes[-1].nbytes}) if opts.sizes else []
    tab.write(summary(doc, sizes_shown))
    tab.flush()
    return doc, {c.name: c for c in configs}


def _rows(per_run: list[list[dict[str, Any]]], opts: BenchOptions) -> list[dict[str, Any]]:
    if not any(per_run):
        return []
    return res.aggregate_rows(per_run, opts.world_size)


def _config_entry(runs: list[ConfigRun], seqs: list[int]) -> dict[str, Any]:
    """The configuration's record: the first run that did not finish (else the first run), plus every run."""
    bad = [r for r in runs if r.status != "ok"]
    conf = res.config_doc(bad[0] if bad else runs[0])
    conf["runs"] = [{"repeat_index": k, "seq": seq, "status": r.status, "error": r.error,
                     "wall_s": round(r.wall_s, 2), "pids": [(lg.env_event or {}).get("pid") for lg in r.ranks],
                     "seq_reported": [(lg.env_event or {}).get("seq") for lg in r.ranks]}
                    for k, (r, seq) in enumerate(zip(runs, seqs))]
    conf["wall_s"] = round(sum(r.wall_s for r in runs), 2)
    return conf


def _forget_temp_run_dir(site: Any) -> None:
    """Remove a run dir that ``run_dir_for`` made with mkdtemp (no runtime dir here); persistent ones stay."""
    import shutil
    import tempfile
    from pathlib import Path

    d = Path(site).parent
    if d.parent == Path(tempfile.gettempdir()) and d.name.startswith("sglwrap-"):
        shutil.rmtree(d, ignore_errors=True)


def _fill_devices(doc: dict[str, Any], run: ConfigRun) -> None:
    for lg in run.ranks:
        info = (lg.result or {}).get("info", {})
        doc["devices"].append({"rank": lg.rank, "pid": (lg.env_event or {}).get("pid"),
                               "device": info.get("device"), "pci_bus_id": info.get("pci_bus_id"),
                               "total_bytes": info.get("total_bytes"), "context_bytes": info.get("context_bytes"),
                               "hostname": info.get("hostname")})
        doc["nccl_version"] = doc["nccl_version"] or info.get("nccl_version")
        doc["torch_version"] = doc["torch_version"] or info.get("torch_version")


def _document(opts: BenchOptions, env: Mapping[str, str], n_configs: int) -> dict[str, Any]:
    modes_text = " and ".join("eager (back-to-back calls)" if m == "eager" else
                              f"graph (CUDA graph of up to {opts.graph_ops} all-reduces, per op)"
                              for m in opts.modes)
    model = None
    if opts.model is not None:
        m = opts.model
        model = {"name": m.name, "hidden_size": m.hidden_size, "num_layers": m.num_layers, "dtype": m.dtype,
                 "graph_ops": m.graph_ops, "source": m.source}
    return {
        "sglwrap_bench": SCHEMA,
        "version": __version__,
        "start_time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "end_time": None,
        "args": list(opts.argv),
        "host": os.uname().nodename,
        "env": {k: v for k, v in sorted(env.items()) if k.startswith(("NCCL_", "CUDA_", "TORCH_", "SGLWRAP_"))},
        "nccl_version": None,
        "torch_version": None,
        "config": {
            "backend": opts.backend, "world_size": opts.world_size, "dtype": opts.dtype,
            "modes": list(opts.modes), "modes_text": modes_text,
            "sizes": [{"size_bytes": s.nbytes, "label": s.label} for s in opts.sizes],
            "targets": list(opts.targets), "budget_s": opts.budget_s, "min_reps": opts.min_reps,
            "max_reps": opts.max_reps, "warmup": opts.warmup, "graph_ops": opts.graph_ops,
            "timeout_s": opts.timeout, "model": model, "n_configs": n_configs,
            "repeat": opts.repeat, "order": "interleaved" if opts.repeat > 1 else "single",
            "sweep": {"dims": [[d, list(v)] for d, v in opts.sweep_dims], "full": opts.sweep_full}
            if opts.sweep_dims else None,
            "sglang_launcher_env": {k: v for k, (v, _) in SGLANG_LAUNCHER_ENV.items()},
            "safety_env": {} if opts.allow_nvls else dict(SAFE_ENV),
            "python": opts.python,
        },
        "devices": [],
        "configs": [],
        "results": [],
        "winner": None,
        "written_profile": None,
        "outputs": {},
    }


def failed(doc: Mapping[str, Any]) -> Sequence[str]:
    """Names of the configurations that timed out or failed."""
    return [c["name"] for c in doc["configs"] if c["status"] != "ok"]
