"""``sglwrap bench-comm``: all-reduce latency and NCCL device memory per profile, on this machine's GPUs.

Exit 0 when every configuration was measured, 1 when one timed out or failed (it is in the output, marked),
64 for a bad command line, 78 for a bad profile or model.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from sglwrap.bounds import MAX_BATCH, MAX_GPUS_PER_HOST, check_count, finite_seconds
from sglwrap.errors import ConfigError, UsageError

EXIT_SOME_FAILED = 1


def add_parser(subparsers: Any) -> None:
    """Register the ``bench-comm`` verb."""
    p = subparsers.add_parser(
        "bench-comm",
        help="measure all-reduce latency and NCCL memory per profile",
        description="For each profile, start fresh rank processes through the same injector as `launch`, run "
        "torch.distributed all-reduces at the model's message sizes and a standard sweep, eager and (with "
        "--graph) inside a captured CUDA graph, and report median/p90 latency, nccl-tests bus bandwidth and "
        "the device memory NCCL took. Table on stdout, progress on stderr; --json prints one JSON object on stdout "
        "(the table then goes to stderr).",
    )
    p.add_argument("--profile", action="append", metavar="NAME", dest="profiles",
                   help="profile to measure (repeatable; default: $SGLWRAP_PROFILE or baseline). The first one "
                   "is the reference and the base of --sweep")
    p.add_argument("--sizes", action="append", metavar="LIST",
                   help="message sizes in bytes, comma-separated (K/M/G suffixes are KiB/MiB/GiB); replaces the "
                   "standard sweep")
    p.add_argument("--model-path", metavar="M", help="model directory (or bundled model name) whose config.json "
                   "gives hidden size, layers and dtype")
    p.add_argument("--tp", type=int, metavar="N", help="tensor-parallel degree: the number of ranks")
    p.add_argument("--decode-bs", default="1,8,32,128", metavar="LIST",
                   help="decode batch sizes whose all-reduces are measured (default 1,8,32,128)")
    p.add_argument("--spec-tokens", type=int, default=4, metavar="N",
                   help="draft tokens per request in a speculative verify pass (default 4; 0: none)")
    p.add_argument("--graph", action="store_true",
                   help="also measure inside a captured CUDA graph of many all-reduces, as SGLang decodes")
    p.add_argument("--graph-ops", type=int, metavar="N",
                   help="all-reduces per captured graph (default: 2 per model layer, else 64)")
    p.add_argument("--standard-sizes", action="store_true",
                   help="add the standard sweep even when --sizes is given")
    p.add_argument("--max-size", metavar="SIZE", help="largest size of the standard sweep (default 64M; gloo 64K)")
    p.add_argument("--sweep", action="store_true",
                   help="also try a grid of NCCL settings on top of the first profile")
    p.add_argument("--sweep-var", action="append", metavar="NAME=V1,V2", default=[],
                   help="a grid dimension (repeatable; implies --sweep): an NCCL variable or 'channels'")
    p.add_argument("--sweep-full", action="store_true",
                   help="the cartesian product of the grid (default: one variable at a time)")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="run each configuration N times, each in fresh rank processes, interleaved (A B C A B C "
                   "...) so drift hits all alike; report the median of the run medians and their p10-p90 "
                   "(default 1). Winner rule with N > 1: a candidate beats the reference (the first "
                   "configuration) only if it is faster in at least 3/4 of the interleaved pairs AND its median "
                   "improvement exceeds the reference's across-run spread (p90/p10 of its run medians, at least "
                   "5%%). With N = 1: faster by more than the reference's p90/median spread within its one run. "
                   "In both, among configurations as fast within the noise the least NCCL memory wins")
    p.add_argument("--write-profile", metavar="NAME",
                   help="write the winner for the measured model/given sizes as profile NAME (extends its base)")
    p.add_argument("--plot", metavar="FILE", type=Path, help="write a PNG of latency vs message size")
    p.add_argument("--output", metavar="FILE", type=Path,
                   help="also write the JSON document to FILE (never overwritten: FILE.0, FILE.1 ... instead)")
    p.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    p.add_argument("--backend", choices=("nccl", "gloo"), default="nccl",
                   help="nccl on GPUs (default); gloo runs the same harness on CPU")
    p.add_argument("--world-size", type=int, metavar="N", help="ranks (default: --tp, else 2)")
    p.add_argument("--timeout", type=float, default=180.0, metavar="S",
                   help="seconds one configuration may take before its ranks are killed (default 180)")
    p.add_argument("--budget", type=float, metavar="S",
                   help="seconds of measurement per size and mode (default 0.2 on nccl, 0.05 on gloo)")
    p.add_argument("--min-samples", type=int, default=10, metavar="N", help="samples per size at least (10)")
    p.add_argument("--dtype", choices=("bfloat16", "float16", "float32"),
                   help="element type (default: the model's, else bfloat16)")
    p.add_argument("--python", metavar="PATH",
                   help="interpreter for the rank processes (default $SGLWRAP_PYTHON, else this one)")
    p.add_argument("--allow-nvls", action="store_true",
                   help="do not force NVLink multicast off in the ranks (it is off by default: it can take a "
                   "shared host's GPUs out of service)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar or per-configuration lines")


def _ints(text: str, what: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"{what}: {text!r} is not a comma-separated list of integers") from None
    if any(v <= 0 for v in vals):
        raise UsageError(f"{what}: values must be positive")
    for v in vals:
        check_count(what, v, MAX_BATCH, "requests")
    return vals


def options(args: argparse.Namespace, environ: dict[str, str], argv: list[str]) -> Any:
    """Check the command line and decide sizes, modes and configurations."""
    from sglwrap.bench import BenchOptions
    from sglwrap.bench import sizes as sz
    from sglwrap.bench.sweep import parse_grid
    from sglwrap.sglang.flags import target_python

    gloo = args.backend == "gloo"
    if args.graph and gloo:
        raise UsageError("--graph needs --backend nccl (CUDA graphs need GPUs)")
    if args.tp is not None and args.world_size is not None and args.tp != args.world_size:
        raise UsageError(f"--tp {args.tp} and --world-size {args.world_size} disagree")
    world = args.world_size or args.tp or 2
    if world < 1:
        raise UsageError("--world-size must be at least 1")
    check_count("--world-size" if args.world_size else "--tp", world, MAX_GPUS_PER_HOST, "ranks on this host")
    finite_seconds("--timeout", args.timeout)
    finite_seconds("--budget", args.budget)
    if args.min_samples < 1:
        raise UsageError("--min-samples must be at least 1")
    check_count("--min-samples", args.min_samples, 1_000_000, "samples")
    if args.repeat < 1:
        raise UsageError("--repeat must be at least 1")
    check_count("--repeat", args.repeat, 1000, "runs")
    if args.spec_tokens < 0:
        raise UsageError("--spec-tokens must be 0 or more")
    check_count("--spec-tokens", args.spec_tokens, 1024, "draft tokens")
    if args.graph_ops is not None:
        check_count("--graph-ops", args.graph_ops, 100_000, "all-reduces")
    if args.plot is not None and args.plot.suffix.lower() != ".png":
        raise UsageError(f"--plot {args.plot}: the plot is a PNG image; name the file *.png")
    if args.plot is not None:
        from sglwrap.plotting import require_matplotlib

        require_matplotlib("bench-comm")
    model = sz.model_shape(args.model_path) if args.model_path else None
    dtype = args.dtype or (model.dtype if model and model.dtype in sz.DTYPE_BYTES else "bfloat16")
    if dtype not in ("bfloat16", "float16", "float32"):
        dtype = "bfloat16"
    ebytes = sz.DTYPE_BYTES[dtype]
    given = sz.parse_sizes(args.sizes or [])
    msizes = sz.model_sizes(model, _ints(args.decode_bs, "--decode-bs"), draft_tokens=args.spec_tokens) \
        if model else []
    standard: list[sz.Size] = []
    if not given or args.standard_sizes:
        cap = sz.parse_size(args.max_size) if args.max_size else (64 * sz.KIB if gloo else 64 * sz.MIB)
        pool = sz.STANDARD_GLOO if gloo and not args.max_size else sz.STANDARD_NCCL + (256 * sz.MIB, 1024 * sz.MIB)
        standard = [sz.Size(n) for n in pool if n <= cap]
    sizes = sz.merge(given, msizes, standard, dtype_bytes=ebytes)
    if not sizes:
        raise UsageError("no message sizes: give --sizes, --model-path or a larger --max-size")
    targets = [s.nbytes for s in sz.merge(given, msizes, dtype_bytes=ebytes)] or [s.nbytes for s in sizes]
    profiles = tuple(args.profiles or [environ.get("SGLWRAP_PROFILE") or "baseline"])
    dims = parse_grid(args.sweep_var) if (args.sweep or args.sweep_var) else ()
    graph_ops = args.graph_ops or (model.graph_ops if model else sz.DEFAULT_GRAPH_OPS)
    if graph_ops < 1:
        raise UsageError("--graph-ops must be at least 1")
    if args.write_profile:
        from sglwrap.errors import ProfileError
        from sglwrap.profiles import _check_name

        try:
            _check_name(args.write_profile, "--write-profile name")
        except ProfileError as e:
            raise UsageError(e.message) from None
        from sglwrap.bench.sweep import user_profile_dir

        target = user_profile_dir(environ) / f"{args.write_profile}.yaml"
        if target.exists():  # found out before minutes of measuring, not after
            raise ConfigError(f"--write-profile: {target} already exists; choose another name or remove it")
    budget = args.budget if args.budget is not None else (0.05 if gloo else 0.2)
    python = args.python or target_python(environ)
    _require_torch(python)
    return BenchOptions(
        profiles=profiles, sizes=tuple(sizes), targets=tuple(targets), backend=args.backend, world_size=world,
        modes=("eager", "graph") if args.graph else ("eager",), dtype=dtype, graph_ops=graph_ops, model=model,
        sweep_dims=dims, sweep_full=args.sweep_full, timeout=args.timeout, budget_s=budget,
        min_reps=args.min_samples, max_reps=max(args.min_samples, 200), warmup=5,
        python=python, allow_nvls=args.allow_nvls, repeat=args.repeat,
        argv=tuple(argv),
    )


def _require_torch(python: str) -> None:
    """The ranks run torch.distributed: an interpreter without torch cannot measure anything (78, before any rank
    starts). Read from the package metadata, never an import."""
    from sglwrap.host.stack import package_versions

    if not os.path.exists(python):
        raise ConfigError(f"bench-comm: interpreter {python} does not exist (--python / SGLWRAP_PYTHON)")
    if not package_versions(python, ("torch",)).get("torch"):
        raise ConfigError(f"bench-comm: torch is not installed for {python}; the ranks run torch.distributed: "
                          f"{python} -m pip install torch, or point --python / SGLWRAP_PYTHON at one that has it")


def run(args: argparse.Namespace) -> int:
    """Measure, print the table (stdout; stderr with --json) or JSON (stdout), write plot/profile/JSON; 0 or 1."""
    from sglwrap.bench import failed, run_bench

    environ = dict(os.environ)
    opts = options(args, environ, sys.argv[1:])
    doc, configs = run_bench(opts, environ, stream=sys.stderr, progress=not args.no_progress,
                             out=sys.stderr if args.json else sys.stdout)
    if args.write_profile:
        doc["written_profile"] = _write_profile(args.write_profile, doc, configs, environ)
    if args.plot is not None:
        from sglwrap.bench.plot import write_plot

        path = write_plot(doc, args.plot)
        doc["outputs"]["plot"] = str(path)
        sys.stderr.write(f"# plot written to {path}\n")
    if args.output is not None:
        from sglwrap.bench.output import write_new

        doc["outputs"]["json"] = str(args.output)  # the name asked for; a .N suffix is reported below
        path = write_new(args.output, (json.dumps(doc, indent=1) + "\n").encode())
        doc["outputs"]["json"] = str(path)
        sys.stderr.write(f"# JSON written to {path}\n")
    if args.json:
        sys.stdout.write(json.dumps(doc, indent=1) + "\n")
    bad = failed(doc)
    if bad:
        sys.stderr.write(f"sglwrap: {len(bad)} configuration(s) not measured: {', '.join(bad)}\n")
        return EXIT_SOME_FAILED
    return 0


def _write_profile(name: str, doc: dict[str, Any], configs: dict[str, Any], environ: dict[str, str]) -> dict:
    from sglwrap.bench.results import winner_from_doc
    from sglwrap.bench.sweep import write_profile

    w = doc.get("winner")
    if not w:
        raise ConfigError("--write-profile: no configuration was measured at every target size; nothing written")
    winner = winner_from_doc(w)
    devs = doc.get("devices") or [{}]
    context = {"date": time.strftime("%Y-%m-%d", time.gmtime()), "host": doc.get("host"),
               "world_size": doc["config"]["world_size"], "device": devs[0].get("device"),
               "nccl_version": doc.get("nccl_version"), "torch_version": doc.get("torch_version"),
               "backend": doc["config"]["backend"], "n_configs": len(doc["configs"])}
    path, prof = write_profile(name, winner, configs[w["name"]], context, environ)
    sys.stderr.write(f"# profile {prof.name} ({prof.short_hash}) written to {path}: extends "
                     f"{prof.sources[1] if len(prof.sources) > 1 else '-'}\n")
    return {"name": prof.name, "path": str(path), "hash": prof.hash, "winner": w["name"],
            "extends": configs[w["name"]].base if configs[w["name"]].kind == "sweep" else w["name"],
            "env": {k: v.value for k, v in sorted(prof.env.items())}}
