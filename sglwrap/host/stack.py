"""The software stack: package versions without imports, and the few facts that need one, cached.

Versions come from the ``*.dist-info`` entries (``sglwrap.distinfo``) on the target interpreter's site-packages (read in this process when
the target is a venv, so no subprocess on the fast path). torch's CUDA version and arch list, its NCCL version and
FlashInfer/SGLang's arch gates come from ``_stack_probe.py`` run by the target interpreter; the result is cached
under ``$XDG_CACHE_HOME/sglwrap/stack/`` keyed by the versions, the driver and the GPU UUIDs.
"""

from __future__ import annotations

import glob
import json
import os
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from sglwrap import diskcache
from sglwrap.distinfo import installed_versions
from sglwrap.interpreter import interpreter_id, is_running

# Packages whose versions decide what works (issue 3); the first found of each alias group is reported.
PACKAGES: tuple[str, ...] = (
    "sglang",
    "sglang-kernel",
    "sgl-kernel",
    "torch",
    "flashinfer-python",
    "flashinfer-cubin",
    "flashinfer-jit-cache",
    "triton",
    "nvidia-nccl-cu12",
    "nvidia-nccl-cu13",
    "nvidia-ml-py",
    "sgl-deep-gemm",
    "sgl-deep-ep",
    "deep-gemm",
    "deep-ep",
    "sgl-flash-mla",
    "nvidia-cutlass-dsl",
    "cuda-python",
    "cupy-cuda12x",
    "cupy-cuda13x",
    "vllm",  # SGLang 0.4.4.post2 - 0.5.4.post1 import some quantization methods from it (compat/quantization.yaml)
    "bitsandbytes",  # the bitsandbytes loader and quantization method import it (compat/quantization.yaml)
    "outlines",  # SGLang <= 0.1.12 and 0.3.x import outlines modules that later outlines releases removed
    "torch-memory-saver",  # --enable-memory-saver needs it; an optional extra before SGLang 0.5.3
)
PROBE_SCRIPT = Path(__file__).with_name("_stack_probe.py")
PROBE_TIMEOUT_S = 120


def site_paths(python: str) -> list[str]:
    """Where the interpreter ``python`` finds packages; read from its venv layout when it has one."""
    exe = Path(python)
    if is_running(python):
        return [p for p in sys.path if p]
    venv = exe.parent.parent
    if (venv / "pyvenv.cfg").is_file():
        found = sorted(glob.glob(str(venv / "lib" / "python3*" / "site-packages")))
        if found:
            return found
    rc, out = _run([python, "-I", "-c", "import sys, json; print(json.dumps(sys.path))"], timeout=30)
    return [p for p in json.loads(out) if p] if rc == 0 else []


def package_versions(python: str | None = None, names: Iterable[str] = PACKAGES,
                     environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Installed versions of ``names`` for ``python`` (default: this interpreter), without importing them. Cached
    under the site directories' mtimes (installing or removing a distribution changes them)."""
    paths = site_paths(python or sys.executable)
    wanted = tuple(names)
    stamps = diskcache.stamp(paths)  # a site directory's mtime moves when a distribution comes or goes
    name = "packages-" + diskcache.key(paths, wanted)
    cached: dict[str, str] | None = diskcache.load("stack", name, environ, stamps=stamps)
    if cached is not None:
        return cached
    out = dict(sorted(installed_versions(wanted, paths).items()))  # the order a cached read gives
    diskcache.store("stack", name, out, environ, stamps=stamps)
    return out


def probe_key(python: str, packages: Mapping[str, str], driver: str | None, uuids: Iterable[str | None]) -> str:
    """The cache key of one stack probe: interpreter, versions, driver, GPUs and the probe script itself."""
    return diskcache.key({"python": interpreter_id(python), "packages": dict(sorted(packages.items())),
                          "driver": driver, "uuids": sorted(u or "" for u in uuids),
                          "script": diskcache.digest(PROBE_SCRIPT.read_bytes())})


def probe_stack(
    python: str,
    packages: Mapping[str, str],
    driver: str | None,
    uuids: Iterable[str | None],
    *,
    environ: Mapping[str, str] | None = None,
    refresh: bool = False,
) -> dict[str, Any]:
    """The import-level facts of ``python``'s stack, from the cache or one subprocess (its cost is recorded)."""
    name = probe_key(python, packages, driver, uuids)
    if not refresh:
        cached: dict[str, Any] | None = diskcache.load("stack", name, environ)
        if isinstance(cached, dict):
            cached["cache"] = "hit"
            return cached
    start = time.monotonic()
    from sglwrap.term import progress

    with progress(f"probing the torch/NCCL/FlashInfer stack of {python} (first run for this stack, a few seconds; "
                  "cached after)"):
        rc, out = _run([python, "-I", str(PROBE_SCRIPT)], timeout=PROBE_TIMEOUT_S, env=_probe_env(environ))
    result: dict[str, Any]
    try:
        result = json.loads(out) if rc == 0 else {"error": f"exit {rc}: {out[-500:]}"}
    except ValueError:
        result = {"error": f"unreadable probe output: {out[-500:]}"}
    result["probe_seconds"] = round(time.monotonic() - start, 3)
    if "error" not in result:
        diskcache.store("stack", name, result, environ)
    result["cache"] = "miss"
    return result


def _probe_env(environ: Mapping[str, str] | None) -> dict[str, str]:
    env = dict(os.environ if environ is None else environ)
    env["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"  # never initialise CUDA from is_available()
    env.setdefault("NCCL_NVLS_ENABLE", "0")
    return env


def _run(argv: list[str], *, timeout: float, env: Mapping[str, str] | None = None) -> tuple[int, str]:
    import subprocess

    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return 127, str(e)
    return proc.returncode, proc.stdout if proc.returncode == 0 else (proc.stdout + proc.stderr)
