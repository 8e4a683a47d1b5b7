"""Run one configuration: plan its environment as ``launch`` does, start one fresh worker per rank, collect.

The environment of each rank is the one a launch would give SGLang's workers: ``plan_launch`` +
``exec_environment`` (the profile's variables, the user's own values kept unless forced, the rendered
``sitecustomize.py`` first on ``PYTHONPATH``), then what SGLang's launcher itself writes before it spawns its
workers (``SGLANG_LAUNCHER_ENV``); the injector then runs at the start of each rank process. Every rank runs in
its own process session, so a hung configuration is killed whole (``os.killpg`` on the sessions started here)
after ``timeout`` seconds and reported, never waited on.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sglwrap import inject
from sglwrap.launch import exec_environment, plan_launch
from sglwrap.profiles import Profile
from sglwrap.record import Record, field
from sglwrap.sglang.cmdline import parse_cmdline
from sglwrap.sglang.flags import FlagTable

WORKER = Path(__file__).resolve().parent / "worker.py"
PREFIX = "@@sglwrap-bench "
# What SGLang 0.5.23's launcher writes into its own environment before it spawns the workers (see the
# ``sglang_writes`` of these variables in sglwrap.envvars): (value, only-when-unset).
SGLANG_LAUNCHER_ENV: dict[str, tuple[str, bool]] = {
    "NCCL_CUMEM_ENABLE": ("0", True),
    "NCCL_NVLS_ENABLE": ("0", True),
    "CUDA_DEVICE_MAX_CONNECTIONS": ("8", False),
}
# NVLink multicast stays off in every rank unless --allow-nvls (it can take a shared host's GPUs out of service).
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
AFTER_RESULT_GRACE_S = 10.0  # ranks leave with os._exit after their result; killed if they linger
AFTER_FAILURE_GRACE_S = 3.0  # once one rank died, the others block in NCCL: kill them soon
TAIL_LINES = 30


class Config(Record):
    """One measured configuration: a profile, or a sweep point (a profile plus ``overrides``)."""

    name: str
    profile: Profile
    base: str
    overrides: dict[str, str] = field(default_factory=dict)

    @property
    def kind(self) -> str:
        return "sweep" if self.overrides else "profile"


class RankLog(Record, frozen=False):
    """What one rank said: its environment report, its result, and the tail of its output."""

    rank: int
    env_event: dict[str, Any] | None = None
    worker_env: dict[str, Any] | None = None  # the injector's own "worker-env" line from stderr
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    returncode: int | None = None
    tail: list[str] = field(default_factory=list)
    last_phase: dict[str, Any] | None = None


class ConfigRun(Record, frozen=False):
    """The outcome of one configuration: status ``ok``, ``timeout`` or ``failed``, with every rank's log."""

    config: Config
    status: str
    error: str | None
    ranks: list[RankLog]
    env_set: dict[str, str]
    warnings: list[str]
    sitecustomize: str
    wall_s: float


def plan_environment(profile: Profile, table: FlagTable, *, python: str, environ: Mapping[str, str],
                     allow_nvls: bool = False) -> tuple[dict[str, str], dict[str, str], list[str], Path]:
    """(full environment, variables the plan sets, plan warnings, sitecustomize path) for ``profile``'s ranks."""
    plan = plan_launch(profile, parse_cmdline([], table), python=python, environ=environ)
    run_dir = inject.run_dir_for(profile.hash, environ)
    feature_env = {k: v for k, v in plan.env_set.items() if k not in plan.profile.env}
    site = inject.write_sitecustomize(run_dir, inject.render_sitecustomize(plan.profile, feature_env))
    env = exec_environment(plan, run_dir, environ)
    for name, (value, only_unset) in SGLANG_LAUNCHER_ENV.items():
        if not only_unset or name not in env:
            env[name] = value
    if not allow_nvls:
        env.update(SAFE_ENV)
    return env, dict(plan.env_set), list(plan.warnings), site


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _reader(rank: int, stream: Any, name: str, q: queue.Queue[tuple[int, str, str | None]]) -> None:
    for line in stream:
        q.put((rank, name, line.rstrip("\n")))
    q.put((rank, name, None))


def _kill(procs: list[subprocess.Popen[str]]) -> None:
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)  # the session this rank was started in, and only that
            except (ProcessLookupError, PermissionError):
                pass
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def run_config(config: Config, spec: dict[str, Any], env: Mapping[str, str], *, python: str, world: int,
               timeout: float, on_phase: Callable[[dict[str, Any]], None] | None = None
               ) -> tuple[str, str | None, list[RankLog], float]:
    """Start ``world`` ranks with ``env`` and wait at most ``timeout`` s; (status, error, rank logs, wall s)."""
    t0 = time.monotonic()
    port = free_port()
    q: queue.Queue[tuple[int, str, str | None]] = queue.Queue()
    logs = [RankLog(rank=r) for r in range(world)]
    procs: list[subprocess.Popen[str]] = []
    spec_text = json.dumps(spec)
    try:
        for r in range(world):
            e = dict(env)
            e.update(RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r), MASTER_ADDR="127.0.0.1",
                     MASTER_PORT=str(port), PYTHONUNBUFFERED="1")
            p = subprocess.Popen([python, str(WORKER), spec_text], env=e, stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, errors="replace",
                                 start_new_session=True)
            procs.append(p)
            for stream, name in ((p.stdout, "out"), (p.stderr, "err")):
                threading.Thread(target=_reader, args=(r, stream, name, q), daemon=True).start()
    except OSError as e:
        _kill(procs)
        return "failed", f"cannot start {python}: {e.strerror}", logs, time.monotonic() - t0
    deadline = t0 + timeout
    open_streams = 2 * world
    failed_at: float | None = None
    status, error = "ok", None
    while True:
        done = all(lg.result is not None for lg in logs)
        now = time.monotonic()
        if done:
            break
        if now > deadline:
            status = "timeout"
            waiting = [lg.rank for lg in logs if lg.result is None]
            where = logs[0].last_phase
            at = f" (rank 0 was at {where['mode']} {where['size_bytes']} B)" if where else ""
            error = f"no result after {timeout:g} s from rank(s) {waiting}{at}; killed"
            break
        if failed_at is not None and now > failed_at + AFTER_FAILURE_GRACE_S:
            break
        if failed_at is None:
            for lg, p in zip(logs, procs):
                if p.poll() is not None and lg.result is None:
                    lg.returncode = p.returncode
                    failed_at = now
        try:
            rank, name, line = q.get(timeout=0.1)
        except queue.Empty:
            continue
        if line is None:
            open_streams -= 1
            continue
        _take_line(logs[rank], name, line, on_phase)
    if status == "ok" and not all(lg.result is not None for lg in logs):
        status = "failed"
        bad = [lg for lg in logs if lg.result is None]
        # The rank that died on its own (exit code seen before any kill), else one that reported an error.
        first = next((lg for lg in bad if lg.returncode is not None), next((lg for lg in bad if lg.error), bad[0]))
        why = first.error["error"] if first.error else f"exit {first.returncode}"
        error = f"rank {first.rank} failed: {why}"
    # Ranks leave by os._exit after their result; give them a moment, then kill what lingers (teardown hangs).
    end = time.monotonic() + (AFTER_RESULT_GRACE_S if status == "ok" else 0)
    for p in procs:
        try:
            p.wait(timeout=max(0.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    _kill(procs)
    _drain(q, logs, on_phase)
    for lg, p in zip(logs, procs):
        lg.returncode = p.returncode
    return status, error, logs, time.monotonic() - t0


def _drain(q: queue.Queue[tuple[int, str, str | None]], logs: list[RankLog],
           on_phase: Callable[[dict[str, Any]], None] | None) -> None:
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        try:
            rank, name, line = q.get(timeout=0.05)
        except queue.Empty:
            break
        if line is not None:
            _take_line(logs[rank], name, line, on_phase)


def _take_line(lg: RankLog, stream: str, line: str, on_phase: Callable[[dict[str, Any]], None] | None) -> None:
    if stream == "out" and line.startswith(PREFIX):
        try:
            msg = json.loads(line[len(PREFIX):])
        except json.JSONDecodeError:
            lg.tail.append(line)
            return
        ev = msg.get("event")
        if ev == "env":
            lg.env_event = msg
        elif ev == "result":
            lg.result = msg
        elif ev == "error":
            lg.error = msg
            lg.tail += msg.get("traceback", "").splitlines()[-8:]
        elif ev == "phase":
            lg.last_phase = msg
            if on_phase is not None:
                on_phase(msg)
        return
    if stream == "err" and line.startswith('{"') and '"worker-env"' in line:
        try:
            lg.worker_env = json.loads(line)
            return
        except json.JSONDecodeError:
            pass
    lg.tail.append(line)
    del lg.tail[:-TAIL_LINES]
