"""SGLang's own argument checks, run for real: ``sglang-selfcheck``.

When the target release is the installed one, the user's argv goes through that release's own code in a child of
the target interpreter, on CPU: ``prepare_server_args(argv)``, its resolution (``resolve_once`` in 0.5.2x,
``__post_init__`` before), ``check_server_args`` and ``ModelConfig.from_server_args``. The GPU facts of the plan
(count, name, compute capability, memory) are supplied by replacing torch's and SGLang's device getters in that
child. An exception raised by SGLang's code is a block carrying SGLang's own message; a failure of the harness
itself (an import error, a timeout, a CUDA call the patches do not cover) is a warning, never a block.

The child starts only where seconds are expected: in ``sglwrap launch`` and ``preflight --deep``
(``Context.deep``). Its result is kept under ``$XDG_CACHE_HOME/sglwrap/selfcheck/``, keyed by what can change the
verdict (release, interpreter, the options the user set except those SGLang only serves or logs with: ``--port``
unless another port is set, ``--host``, an API key's value, log options; config.json, GPU facts, SGLANG_*
environment) and stored with stamps of the release's files taken before the child ran (the interpreter, the
``sglang`` distribution's RECORD): a reinstall invalidates it. A plain preflight reads a kept result and otherwise
skips the check, saying how to run it. With only ``--assume-stack`` naming a release (not installed), the generated
rules of ``checks_model`` stand in.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from sglwrap import diskcache
from sglwrap.preflight.model import Context, Status, Verdict

SELFCHECK_TIMEOUT_S = 240
CACHE_SCHEMA = 2
# Options whose value SGLang only serves, authenticates or logs with (0.5.23 srt/arg_groups/*_hook.py): they do not
# key the kept result, except where a check reads them. --port is compared with the other ports
# (validation_hook.py:359 --grpc-port, pd_disaggregation_hook.py:275-284 the bootstrap port), so it keys the result
# when another *_port option is set; an API key's presence is refused with --grpc-port (serving_hook.py:428), so its
# presence keys it, never its value. --served-model-name is checked (validation_hook.py:214, no ':').
VERDICT_FREE_DESTS = frozenset({"host"})
PRESENCE_ONLY_DESTS = frozenset({"api_key", "admin_api_key"})
VERDICT_FREE_PREFIXES = ("log_",)
# What SGLang raises for a command line it refuses; anything else (RuntimeError of a device query the patches do
# not cover, ImportError) is the harness failing, a warning.
USER_ERRORS = frozenset({"ValueError", "AssertionError", "NotImplementedError", "SystemExit", "KeyError"})
OFF_VAR = "SGLWRAP_SELFCHECK"  # "0": never run SGLang's own checks; "1": run them even under pytest

_CHILD = r'''
import json, os, sys, traceback
spec = json.loads(sys.argv[1])
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
out = {"stage": "import"}
def emit(**kw):
    out.update(kw)
    sys.stdout.write("\n@@SGLWRAP@@" + json.dumps(out) + "\n")
    sys.stdout.flush()
try:
    # import with the CPU facts first (a patched torch.cuda makes SGLang load its CUDA kernels), then patch
    import sglang.srt.server_args as sa_mod
    from sglang.srt.configs.model_config import ModelConfig
    import torch
    n, cc, mem, name = spec["gpus"], tuple(spec["cc"]), int(spec["mem_bytes"]), spec["gpu_name"]
    if n:
        class _Props:
            total_memory = mem
            major, minor = cc
            multi_processor_count = 132
            is_integrated = False
            L2_cache_size = 50 * 2**20
        _Props.name = name
        torch.cuda.is_available = lambda: True
        torch.cuda.device_count = lambda: n
        torch.cuda.get_device_capability = lambda device=None: cc
        torch.cuda.get_device_name = lambda device=None: name
        torch.cuda.get_device_properties = lambda device=None: _Props()
        torch.cuda.mem_get_info = lambda device=None: (mem, mem)
        torch.cuda.current_device = lambda: 0
        torch.cuda.set_device = lambda device=None: None
    fakes = {
        "get_nvgpu_memory_capacity": lambda *a, **k: mem / 2**20,
        "get_device_memory_capacity": lambda *a, **k: mem / 2**20,
        "get_device_capability": lambda *a, **k: cc,
        "get_device_sm": lambda *a, **k: cc[0] * 10 + cc[1],
        "get_device_sm_nvidia_smi": lambda *a, **k: cc,
        "get_device": lambda *a, **k: "cuda",
        "get_device_name": lambda *a, **k: name,
        "get_device_count": lambda *a, **k: n,
    } if n else {}
    for mod in list(sys.modules.values()):
        if getattr(mod, "__name__", "").startswith("sglang"):
            for k, v in fakes.items():
                if callable(getattr(mod, k, None)):
                    setattr(mod, k, v)
    out["stage"] = "prepare_server_args"
    args = sa_mod.prepare_server_args(spec["argv"])
    if hasattr(args, "resolve_once"):
        out["stage"] = "resolve_once"
        args.resolve_once()
    if hasattr(args, "check_server_args"):
        out["stage"] = "check_server_args"
        args.check_server_args()
    out["stage"] = "ModelConfig"
    ModelConfig.from_server_args(args)
    emit(ok=True)
except SystemExit as e:
    emit(ok=False, kind="SystemExit", message=f"exit {e.code}", where="argparse", sglang=True)
except BaseException as e:
    tb = traceback.extract_tb(e.__traceback__)
    frame = tb[-1] if tb else None
    where = f"{frame.filename}:{frame.lineno}" if frame else "?"
    ours = bool(frame) and "/sglang/" in frame.filename and "/torch/" not in frame.filename
    emit(ok=False, kind=type(e).__name__, message=str(e)[:2000], where=where, sglang=ours,
         line=(frame.line or "") if frame else "", tail=traceback.format_exc()[-1500:])
'''


def _cache_environ(environ: Mapping[str, str], process: Mapping[str, str]) -> dict[str, str]:
    """The variables that place sglwrap's cache: the launch's over sglwrap's own process's."""
    return {k: v for k, v in {**process, **environ}.items() if k in ("XDG_CACHE_HOME", "HOME")}


def _sub_model_path(argv: Sequence[str], model_path: str, directory: str) -> list[str]:
    """``argv`` with the model path replaced by the directory holding its config.json (a catalogue name, an HF
    repo whose config sits in the offline cache)."""
    out = list(argv)
    for i, tok in enumerate(out):
        if tok in ("--model-path", "--model") and i + 1 < len(out) and out[i + 1] == model_path:
            out[i + 1] = directory
        elif tok in (f"--model-path={model_path}", f"--model={model_path}"):
            out[i] = tok.split("=", 1)[0] + "=" + directory
    return out


def verdict_options(given: Mapping[str, Any]) -> dict[str, Any]:
    """The options the user set (destination -> value) that can change SGLang's verdict (pure): no host or log
    option, an API key as its presence only, ``--port`` only beside another ``*_port`` option."""
    other_ports = any(d.endswith("_port") and d != "port" for d in given)
    out: dict[str, Any] = {}
    for d, v in given.items():
        if d in VERDICT_FREE_DESTS or d.startswith(VERDICT_FREE_PREFIXES) or (d == "port" and not other_ports):
            continue
        out[d] = (v is not None) if d in PRESENCE_ONLY_DESTS else v
    return out


def selfcheck_key(spec: Mapping[str, Any], python: str, version: str, config_bytes: bytes) -> str:
    """The cache key: release, interpreter, the verdict's options (``spec["options"]``, else the argv), config.json
    contents, GPU facts, SGLANG_* environment, this harness."""
    keyed = {k: v for k, v in spec.items() if k != "argv"} if "options" in spec else dict(spec)
    from sglwrap.interpreter import interpreter_id

    return diskcache.key({"schema": CACHE_SCHEMA, "v": version, "python": interpreter_id(python), "spec": keyed,
                          "config": diskcache.digest(config_bytes), "child": diskcache.digest(_CHILD)})


def release_stamps(python: str) -> list[list[Any]]:
    """Stamps (path, size, mtime, inode) of what makes the installed release: the interpreter and the RECORD of
    each ``sglang`` distribution on its path (rewritten by every install), found in the one listing of the
    ``*.dist-info`` entries the installed-package readings share (``preflight.installed.dist_info_paths``)."""
    from sglwrap.preflight.installed import dist_info_paths

    records = [str(p / "RECORD") for p in dist_info_paths(python) if p.name.startswith("sglang-")]
    return diskcache.stamp([os.path.realpath(python), *records], inode=True)


def read_kept(key: str, stamps: list[list[Any]], environ: Mapping[str, str]) -> dict[str, Any] | None:
    """The result kept under ``key`` when it was stored with exactly ``stamps``, else None."""
    kept = diskcache.load("selfcheck", key, environ, stamps=stamps)
    return kept if isinstance(kept, dict) else None


def keep(key: str, stamps: list[list[Any]], result: Mapping[str, Any], environ: Mapping[str, str]) -> None:
    """Store ``result`` with the release stamps taken before it was computed (a read-only cache costs time only)."""
    diskcache.store("selfcheck", key, dict(result), environ, stamps=stamps)


def run_child(python: str, spec: Mapping[str, Any], env: Mapping[str, str],
              timeout: float = SELFCHECK_TIMEOUT_S) -> dict[str, Any]:
    """Run the child under ``python``; its result dict (``ok``, ``kind``, ``message``, ``where``, ``sglang``)."""
    import subprocess

    t0 = time.monotonic()
    try:
        proc = subprocess.run([python, "-c", _CHILD, json.dumps(spec)], capture_output=True, text=True,
                              timeout=timeout, check=False, env={**env, "PYTHONWARNINGS": "ignore"},
                              cwd=env.get("TMPDIR") or "/tmp")
    except subprocess.TimeoutExpired:
        return {"ok": None, "kind": "timeout", "message": f"did not finish in {timeout:.0f} s", "sglang": False}
    except OSError as e:
        return {"ok": None, "kind": "oserror", "message": str(e), "sglang": False}
    marks = [ln for ln in proc.stdout.splitlines() if ln.startswith("@@SGLWRAP@@")]
    if not marks:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"ok": None, "kind": f"exit {proc.returncode}", "message": " | ".join(tail), "sglang": False}
    res: dict[str, Any] = json.loads(marks[-1].removeprefix("@@SGLWRAP@@"))
    res["seconds"] = round(time.monotonic() - t0, 1)
    return res


def _installed_target(ctx: Context) -> str | None:
    """The interpreter whose SGLang is the target release, or None (the release is only assumed)."""
    from sglwrap.sglang.release import target_python

    from sglwrap.preflight.installed import installed_sglang

    src = ctx.args.table.source
    target = ctx.stack.sglang or ctx.args.version
    if not src.startswith(("introspected:", "cache:")) or installed_sglang(ctx) != target:
        return None
    return target_python(ctx.environ)


def check_sglang_selfcheck(ctx: Context) -> Verdict:
    """The installed release's own argument processing and ModelConfig on the user's argv (cached)."""
    from sglwrap.preflight.checks_model import model_facts

    cid = "sglang-selfcheck"
    version = ctx.stack.sglang or ctx.args.version
    python = _installed_target(ctx)
    if python is None:
        return Verdict(cid, Status.SKIP, f"SGLang {version} is not the installed release: the generated rules "
                       "(model-arch, model-quant, model-parallel, context-length, speculative) stand in for its own "
                       "checks")
    switch = (ctx.environ.get(OFF_VAR) or ctx.process_environ.get(OFF_VAR, "")).strip()
    if switch == "0":  # the test suite sets it (tests/conftest.py); tests of this check set "1"
        return Verdict(cid, Status.SKIP, f"{OFF_VAR}=0: SGLang {version}'s own checks not run; the generated rules "
                       "stand in")
    mf = model_facts(ctx)
    if isinstance(mf, str):
        return Verdict(cid, Status.SKIP, f"{mf}: SGLang's own checks need the model's config.json")
    if not ctx.facts.gpus:
        return Verdict(cid, Status.SKIP, f"no GPU facts to supply ({ctx.facts.source} has no NVIDIA GPU): SGLang's "
                       "own checks need a device; plan with --assume 8xH200")
    argv = _sub_model_path(ctx.args.argv, ctx.args.model_path or "", str(mf.directory))
    gpus = ctx.facts.gpus
    g0 = gpus[0] if gpus else None
    sglang_env = {k: v for k, v in ctx.environ.items() if k.startswith(("SGLANG_", "SGL_"))}
    if ctx.profile is not None:
        sglang_env.update({k: v.value for k, v in ctx.profile.env.items() if k.startswith(("SGLANG_", "SGL_"))})
    spec = {"argv": argv, "gpus": len(gpus), "cc": list(g0.compute_capability) if g0 else [0, 0],
            "mem_bytes": g0.memory_total_bytes if g0 else 0, "gpu_name": g0.name if g0 else "", "env": sglang_env,
            "options": verdict_options(ctx.args.given_values)}
    key = selfcheck_key(spec, python, version, mf.text.encode())
    cache_env = _cache_environ(ctx.environ, ctx.process_environ)
    stamps = release_stamps(python)  # taken before the child reads the release
    res = read_kept(key, stamps, cache_env)
    if res is not None:
        return selfcheck_verdict(res, version, cached=True)
    if not ctx.deep:
        return Verdict(cid, Status.SKIP, f"SGLang {version}'s own checks have not run on this command line yet (they "
                       "start a CPU child: `sglwrap launch` runs them, `sglwrap preflight --deep` too); the generated "
                       "rules stand in", "sglwrap preflight --deep ...")
    sys.stderr.write(f"sglwrap: running SGLang {version}'s own argument checks on CPU (once per command line, "
                     f"up to {SELFCHECK_TIMEOUT_S} s)…\n")
    env = {**ctx.process_environ, **sglang_env}
    child = {k: v for k, v in spec.items() if k != "options"}
    res = run_child(python, child, env)
    # every outcome is kept, a timeout too: the same command line never waits for the child again (the key holds
    # the release, the options, the config and this harness; the stamps a reinstall of the release)
    keep(key, stamps, res, cache_env)
    return selfcheck_verdict(res, version, cached=False)


def selfcheck_verdict(res: Mapping[str, Any], version: str, *, cached: bool = False) -> Verdict:
    """The verdict for one child result (pure)."""
    cid = "sglang-selfcheck"
    how = " (cached)" if cached else ""
    if res.get("ok"):
        return Verdict(cid, Status.PASS, f"SGLang {version}'s own argument checks and ModelConfig accept this command "
                       f"line (run on CPU with the plan's GPU facts){how}")
    msg = " ".join(str(res.get("message") or "").split()) or " ".join(str(res.get("line") or "").split())
    where = str(res.get("where") or "")
    short = where.split("/sglang/", 1)[-1] if "/sglang/" in where else where
    if res.get("ok") is False and res.get("sglang") and res.get("kind") in USER_ERRORS:
        return Verdict(cid, Status.BLOCK, f"SGLang {version} refuses this command line at {res.get('stage')}: "
                       f"{res.get('kind')}: {msg or '(assertion without a message)'} (sglang/{short}){how}",
                       "change the flag SGLang names (its own check, run on this argv)")
    return Verdict(cid, Status.WARN, f"SGLang {version}'s own checks could not be run to the end ({res.get('kind')}: "
                   f"{msg[:300]}{' at ' + short if short else ''}); the generated rules stand in",
                   f"set {OFF_VAR}=0 to skip this check")
