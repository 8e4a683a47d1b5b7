"""One rehearsal of a launch plan, from refusal checks to the recorded verdict: the call both ``sglwrap rehearse``
and ``sglwrap launch --rehearse`` make."""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from sglwrap import launch as L
from sglwrap.record import Record
from sglwrap.rehearse import cache
from sglwrap.rehearse import plan as P
from sglwrap.rehearse import report as R
from sglwrap.rehearse import run as X
from sglwrap.rehearse.fingerprint import Fingerprint, fingerprint
from sglwrap.sglang.cmdline import SglangCmdline

LOGS_KEPT: Final = 20
GPU_RELEASE_S: Final = 15.0


class Outcome(Record):
    """The verdict document, the exit code it implies (0 passed, 78 failed) and whether it came from the cache."""

    doc: dict[str, Any]
    exit_code: int
    cached: bool


def fingerprint_of(plan: L.LaunchPlan, cmd: SglangCmdline, environ: Mapping[str, str],
                   layers: int | None) -> Fingerprint:
    """The fingerprint of rehearsing ``plan`` (sglwrap.rehearse.fingerprint)."""
    from sglwrap.host.stack import site_paths

    return fingerprint(plan.argv, profile_hash=plan.profile.hash, environ=environ, facts=plan.facts,
                       model_path=cmd.model_path, site_dirs=site_paths(plan.python), layers=layers)


def rehearse_plan(plan: L.LaunchPlan, cmd: SglangCmdline, environ: Mapping[str, str], *, assume: str | None,
                  layers: int | None = None, timeout_s: float | None = None, use_cache: bool = False,
                  progress: Callable[[str], None] = lambda _t: None, grace_s: float | None = None) -> Outcome:
    """Refuse what cannot be rehearsed, skip a fingerprint that passed (``use_cache``), else run the rehearsal,
    read its log with diagnose, record and return the verdict. Raises run.Interrupted on Ctrl-C/SIGTERM."""
    P.refuse(cmd, plan.facts, assume=assume)
    if grace_s is None:  # the stop grace launch --notify uses, when set; a rehearsal's own default otherwise
        from sglwrap.supervise import STOP_GRACE_VAR, stop_grace_from_env

        grace_s = stop_grace_from_env(environ) if environ.get(STOP_GRACE_VAR) else X.DEFAULT_GRACE_S
    memory = plan.gates.get("memory") if isinstance(plan.gates.get("memory"), dict) else None
    reh = P.build(plan.argv, cmd, memory, layers=layers, timeout_s=timeout_s)  # bad --layers/--timeout: 64 first
    fp = fingerprint_of(plan, cmd, environ, layers)
    if use_cache:
        hit = cache.lookup(fp, environ)
        if hit is not None and hit.get("verdict") == "passed":
            doc = {**hit.get("report", {}), "cached": True, "recorded": hit.get("report", {}).get("time")}
            return Outcome(doc, doc.get("exit_code", 0), True)
        last = cache.last_for(fp, environ)
        if last is not None and last.get("fingerprint") != fp.digest:
            changed = fp.changed_since(last.get("parts") or {})
            progress(f"no passed rehearsal for this fingerprint; changed since the last one: {'; '.join(changed)}")
    progress(f"rehearsing with dummy weights on 127.0.0.1:{reh.port}; timeout {reh.timeout_why}")
    logs = cache.cache_dir(environ) / "logs"
    logs.mkdir(parents=True, exist_ok=True, mode=0o700)
    log_path = logs / f"{time.strftime('%Y%m%dT%H%M%S')}-{fp.short}.log"
    run_dir = Path(tempfile.mkdtemp(prefix="sglwrap-rehearse-"))  # the injector's files: private, removed after
    try:
        site_text, manifest = L.render_files(plan, run_dir, environ, dry_run=False)
        L.write_files(run_dir, site_text, manifest)
        env = L.exec_environment(plan, run_dir, environ)
        request = None if reh.is_embedding else X.Request(api_key=reh.api_key)
        result = X.rehearse(reh.argv, env, host=reh.host, port=reh.port, timeout_s=reh.timeout_s,
                            log_path=log_path, request=request, grace_s=grace_s, progress=progress)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    from sglwrap.diagnose import diagnose

    diag = diagnose([str(log_path)])
    notes = ["--is-embedding: no /generate request was sent (an embedding server does not generate)"] \
        if reh.is_embedding else []
    doc = R.to_dict(reh, result, diag, tail=log_tail(log_path), log_path=str(log_path), memory=memory,
                    notes=notes, fingerprint=fp.digest, sglang_version=plan.sglang_version,
                    profile={"name": plan.profile.name, "hash": plan.profile.hash})
    doc["time"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    cache.store(fp, doc, environ)
    _prune(logs)
    if plan.facts is not None and plan.facts.gpus and (cmd.device or "cuda").lower() == "cuda":
        waited = wait_gpus_released(cmd, environ)
        if waited is not None:
            doc["notes"].append(waited)
    return Outcome(doc, int(doc["exit_code"]), False)


def wait_gpus_released(cmd: SglangCmdline, environ: Mapping[str, str], timeout_s: float = GPU_RELEASE_S) -> str | None:
    """Wait until NVML lists no process on the GPUs the launch takes (the driver frees a killed process's memory a
    moment after it is gone), so the real launch that follows measures the memory the rehearsal saw. A note when
    something is still there after ``timeout_s``."""
    from sglwrap.host.nvml import probe_nvml

    deadline = time.monotonic() + timeout_s
    while True:
        facts = probe_nvml(environ=environ, proc_name=lambda _pid: None)
        held = [f"GPU {g.index}: pid {p.pid}" for g in P.gpus_used(cmd, facts) for p in g.processes]
        if not held:
            return None
        if time.monotonic() >= deadline:
            return (f"after the rehearsal NVML still lists {', '.join(held)} ({timeout_s:g} s later); the launch may "
                    "see less free memory than the rehearsal did")
        time.sleep(0.5)


def log_tail(path: Path, n: int = R.TAIL_LINES) -> list[str]:
    """The last ``n`` non-empty lines of the log, sglwrap's own JSON lines left out."""
    try:
        data = path.read_bytes()[-65536:]
    except OSError:
        return []
    lines = [ln for ln in data.decode("utf-8", "replace").splitlines()
             if ln.strip() and '"sglwrap": "worker-env"' not in ln]
    return [ln[:400] for ln in lines[-n:]]


def _prune(logs: Path) -> None:
    try:
        files = sorted(logs.glob("*.log"), key=lambda p: p.stat().st_mtime)
    except OSError:
        return
    for old in files[:-LOGS_KEPT]:
        old.unlink(missing_ok=True)
