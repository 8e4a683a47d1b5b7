"""One rank of ``sglwrap bench-comm``: run as a script (``python worker.py SPEC_JSON``) in a fresh process per rank.

Self-contained on purpose: it imports only the standard library and torch, never ``sglwrap`` (the rank process
must not depend on sglwrap's own requirements, and sglwrap's process must never import torch). The orchestrator
starts it with the profile's rendered ``sitecustomize.py`` first on ``PYTHONPATH`` and ``RANK``/``WORLD_SIZE``/
``MASTER_ADDR``/``MASTER_PORT``/``LOCAL_RANK`` set, exactly one process per rank.

Protocol: every message is one stdout line ``@@sglwrap-bench <json>`` with an ``event`` of ``env`` (each rank,
before torch is imported), ``phase`` (rank 0: what it is measuring now), ``result`` (each rank, at the end) or
``error``. After its result a rank leaves with ``os._exit`` and never runs NCCL's teardown, which can hang.

Test hook: ``SGLWRAP_BENCH_FAULT=hang:R`` makes rank R sleep before joining the group (the others then block in
rendezvous as in a real hang); ``crash:R`` makes it exit 3 there; ``hang:R@PROFILE`` only in PROFILE's ranks.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import traceback
from typing import Any

PREFIX = "@@sglwrap-bench "
# NVLink multicast (NVLS) can take a shared host's GPUs out of service; it stays off unless the spec allows it.
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
REPORTED_EXTRA = ("CUDA_DEVICE_MAX_CONNECTIONS", "CUDA_VISIBLE_DEVICES", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
                  "NVSHMEM_DISABLE_NVLS", "PYTORCH_CUDA_ALLOC_CONF", "TORCH_NCCL_ASYNC_ERROR_HANDLING")


def emit(event: str, **fields: object) -> None:
    fields["event"] = event
    sys.stdout.write(PREFIX + json.dumps(fields, sort_keys=True) + "\n")
    sys.stdout.flush()


def injector_info() -> dict[str, object]:
    """What the sitecustomize this process started with says about itself (proof the injector ran here)."""
    sc = sys.modules.get("sitecustomize")
    return {
        "loaded": sc is not None and hasattr(sc, "_SGLWRAP_HASH"),
        "profile": getattr(sc, "_SGLWRAP_PROFILE", None),
        "hash": getattr(sc, "_SGLWRAP_HASH", None),
        "file": getattr(sc, "__file__", None),
    }


def apply_safety(allow_nvls: bool) -> dict[str, str]:
    changed: dict[str, str] = {}
    if allow_nvls:
        return changed
    for name, value in SAFE_ENV.items():
        if os.environ.get(name) != value:
            changed[name] = "%s (was %s)" % (value, os.environ.get(name))
            os.environ[name] = value
    return changed


def reported_env() -> dict[str, str]:
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_") or k in REPORTED_EXTRA}


def fault(rank: int) -> None:
    spec = os.environ.get("SGLWRAP_BENCH_FAULT", "")
    spec, _, profile = spec.partition("@")
    kind, _, who = spec.partition(":")
    if not kind or who != str(rank):
        return
    if profile and injector_info()["profile"] != profile:
        return
    if kind == "hang":
        time.sleep(10**6)
    if kind == "crash":
        sys.stderr.write("sglwrap bench worker: injected crash\n")
        sys.stderr.flush()
        os._exit(3)


class Clock:
    """Times a run of collectives: CUDA events on GPUs, perf_counter on CPU (gloo)."""

    def __init__(self, torch: object, cuda: bool) -> None:
        self.torch = torch
        self.cuda = cuda

    def times(self, reps: int, body: object) -> list[float]:
        """Run ``body()`` ``reps`` times back to back; the seconds each took."""
        torch = self.torch
        if self.cuda:
            events = [torch.cuda.Event(enable_timing=True) for _ in range(reps + 1)]  # type: ignore[attr-defined]
            events[0].record()
            for i in range(reps):
                body()  # type: ignore[operator]
                events[i + 1].record()
            events[-1].synchronize()
            return [events[i].elapsed_time(events[i + 1]) / 1e3 for i in range(reps)]
        out = []
        for _ in range(reps):
            t0 = time.perf_counter()
            body()  # type: ignore[operator]
            out.append(time.perf_counter() - t0)
        return out


def main() -> int:
    spec = json.loads(sys.argv[1])
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    forced = apply_safety(bool(spec.get("allow_nvls")))
    # seq: this run's place in the interleaved order of all runs (--repeat), echoed so the order can be checked
    emit("env", rank=rank, pid=os.getpid(), env=reported_env(), injector=injector_info(), safety=forced,
         seq=spec.get("seq"), repeat_index=spec.get("repeat_index"))
    fault(rank)
    try:
        run(spec, rank, world, local)
    except BaseException as e:  # report, then leave without NCCL teardown
        emit("error", rank=rank, error=repr(e), traceback=traceback.format_exc()[-4000:])
        sys.stderr.flush()
        os._exit(2)
    sys.stderr.flush()
    os._exit(0)


def run(spec: dict, rank: int, world: int, local: int) -> None:
    import torch
    import torch.distributed as dist

    backend = spec["backend"]
    cuda = backend == "nccl"
    dtype = getattr(torch, spec["dtype"])
    elem = torch.tensor([], dtype=dtype).element_size()
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    mem: dict[str, int] | None = None
    info: dict[str, object] = {"torch_version": torch.__version__, "hostname": os.uname().nodename}

    def nccl_bytes() -> int:
        free, _total = torch.cuda.mem_get_info()
        return (base_free - free) - (torch.cuda.memory_reserved() - base_reserved)

    if cuda:
        torch.cuda.set_device(local)
        torch.empty(1, device=device)
        torch.cuda.synchronize()
        base_free, total = torch.cuda.mem_get_info()
        base_reserved = torch.cuda.memory_reserved()
        props = torch.cuda.get_device_properties(local)
        info.update(device=props.name, total_bytes=total, context_bytes=total - base_free,
                    nccl_version=".".join(map(str, torch.cuda.nccl.version())),
                    pci_bus_id=getattr(props, "pci_bus_id", None))
    timeout = spec.get("pg_timeout_s", 600)
    import datetime

    kwargs: dict[str, Any] = {"device_id": device} if cuda else {}
    dist.init_process_group(backend, init_method="tcp://%s:%s" % (os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]),
                            rank=rank, world_size=world, timeout=datetime.timedelta(seconds=timeout), **kwargs)
    if cuda:
        torch.cuda.synchronize()
        mem = {"init": nccl_bytes()}
    first = torch.ones(1024, dtype=dtype, device=device)
    dist.all_reduce(first)
    if cuda:
        torch.cuda.synchronize()
        mem["first_collective"] = nccl_bytes()  # type: ignore[index]
    clock = Clock(torch, cuda)
    agree_dev = device

    def agree_max(value: float) -> float:
        t = torch.tensor([value], dtype=torch.float64, device=agree_dev)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    budget = float(spec["budget_s"])
    min_reps, max_reps = int(spec["min_reps"]), int(spec["max_reps"])
    sizes = [int(s) for s in spec["sizes"]]
    modes = list(spec["modes"])
    rows = []
    total_steps = len(sizes) * len(modes)
    step = 0
    wrong: dict[int, int] = {}
    for mode in modes:
        for size in sizes:
            step += 1
            if rank == 0:
                emit("phase", step=step, total=total_steps, mode=mode, size_bytes=size)
            count = max(1, size // elem)
            if size not in wrong:  # the nccl-tests check: ones in, world out
                chk = torch.ones(count, dtype=dtype, device=device)
                dist.all_reduce(chk)
                wrong[size] = int((chk != world).sum().item())
                del chk
            t = torch.zeros(count, dtype=dtype, device=device)
            if mode == "eager":
                row = measure_eager(dist, clock, t, budget, min_reps, max_reps, int(spec["warmup"]), agree_max)
            else:
                row = measure_graph(torch, dist, clock, t, budget, min_reps, max_reps, int(spec["graph_ops"]),
                                    int(spec["graph_bytes_cap"]), agree_max, nccl_bytes)
                if cuda and mem is not None:
                    mem["graph"] = max(mem.get("graph", 0), row.pop("nccl_bytes_captured"))
            row.update(size_bytes=count * elem, count=count, mode=mode, nwrong=wrong[size])
            rows.append(row)
            del t
            if cuda and mode == "eager" and size == sizes[-1]:
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
                mem["after_eager"] = nccl_bytes()  # type: ignore[index]
    dist.barrier()
    emit("result", rank=rank, rows=rows, mem=mem, info=info, dtype=spec["dtype"], element_size=elem,
         seq=spec.get("seq"))


def plan_counts(per_op_s: float, budget: float, min_reps: int, max_reps: int, sample_s: float) -> tuple[int, int]:
    """(ops per sample, samples): samples of at least ``sample_s`` each, as many as fit the budget."""
    per_op_s = max(per_op_s, 1e-7)
    inner = max(1, min(100, math.ceil(sample_s / per_op_s)))
    reps = int(budget / (inner * per_op_s))
    return inner, max(min_reps, min(max_reps, reps))


def measure_eager(dist, clock: Clock, t, budget: float, min_reps: int, max_reps: int, warmup: int,
                  agree_max) -> dict:
    dist.barrier()
    warm = clock.times(max(1, warmup), lambda: dist.all_reduce(t))
    per_op = agree_max(sorted(warm)[len(warm) // 2])  # every rank must run the same number of collectives
    inner, reps = plan_counts(per_op, budget, min_reps, max_reps, sample_s=200e-6)

    def batch() -> None:
        for _ in range(inner):
            dist.all_reduce(t)

    samples = clock.times(reps, batch)
    return {"samples_us": [round(s / inner * 1e6, 3) for s in samples], "ops_per_sample": inner}


def measure_graph(torch, dist, clock: Clock, t, budget: float, min_reps: int, max_reps: int, graph_ops: int,
                  bytes_cap: int, agree_max, probe) -> dict:
    """A CUDA graph of ``ops`` all-reduces captured as SGLang captures decode; timed per replay, reported per op."""
    nbytes = t.numel() * t.element_size()
    ops = max(1, min(graph_ops, bytes_cap // max(1, nbytes)))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            dist.all_reduce(t)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(ops):
            dist.all_reduce(t)
    torch.cuda.synchronize()
    captured = probe()
    dist.barrier()
    warm = clock.times(2, g.replay)
    per_replay = agree_max(max(warm))
    reps = max(min_reps, min(max_reps, int(budget / max(per_replay, 1e-7))))
    samples = clock.times(reps, g.replay)
    torch.cuda.synchronize()
    del g
    return {"samples_us": [round(s / ops * 1e6, 3) for s in samples], "ops_per_sample": ops, "graph_ops": ops,
            "nccl_bytes_captured": captured}


if __name__ == "__main__":
    sys.exit(main())
