"""Measure NCCL device memory per setting, on the machine's GPUs, to fit sglwrap's NCCL memory model.

Run: ``NCCL_NVLS_ENABLE=0 OUT=dir python3 benchmarks/gpu/nccl_memory_sweep.py`` (needs >= 2 GPUs, torch).

Each configuration runs in fresh processes (one per rank): NCCL caches its environment parameters on first
read, so a setting cannot change inside a process. For every configuration rank 0 records, in MiB of
``cudaMemGetInfo`` free memory:

- ``context_mib``: CUDA context + one tiny tensor (before any NCCL);
- ``init_mib``: ``init_process_group(device_id=...)`` (eager ``ncclCommInitRank``) + a first 42 KB all-reduce
  (the default group; what SGLang's PyNccl communicator costs before its KV sizing);
- ``second_comm_mib``: one more communicator over the same ranks (``new_group``) and its first all-reduce;
- ``graph_mib``: capturing one CUDA graph of 16 all-reduces on the first communicator;
- ``channels``: NCCL's own "N coll channels, ... p2p channels" INFO line for the first communicator.

NVLS (multicast) stays off (``NCCL_NVLS_ENABLE=0``, as SGLang sets it); no multicast API is called.
Results go to ``$OUT/nccl_memory_sweep.json`` after every configuration, so a run cut short keeps what it measured.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

MIB = 1 << 20
FEW = {"NCCL_MIN_NCHANNELS": "1", "NCCL_MAX_NCHANNELS": "2", "NCCL_BUFFSIZE": "131072"}


def _configs() -> dict[str, dict[str, str]]:
    """Configurations in priority order (a run cut short keeps the first ones)."""
    cfgs: dict[str, dict[str, str]] = {}
    for cumem in ("0", "1"):  # SGLang forces NCCL_CUMEM_ENABLE=0 unless set; torch/NCCL default is 1
        base = {"NCCL_CUMEM_ENABLE": cumem}
        cfgs[f"cumem{cumem}_default"] = dict(base)
        cfgs[f"cumem{cumem}_fewchan"] = {**base, **FEW}
        cfgs[f"cumem{cumem}_default_buf128k"] = {**base, "NCCL_BUFFSIZE": "131072"}
        for ch in (1, 2, 4, 8, 16, 32):
            for buf in (131072, 4194304):
                cfgs[f"cumem{cumem}_ch{ch}_buf{buf // 1024}k"] = {
                    **base, "NCCL_MIN_NCHANNELS": str(ch), "NCCL_MAX_NCHANNELS": str(ch), "NCCL_BUFFSIZE": str(buf)}
    for buf in (1 << 20, 16 << 20):
        cfgs[f"cumem0_ch4_buf{buf // 1024}k"] = {
            "NCCL_CUMEM_ENABLE": "0", "NCCL_MIN_NCHANNELS": "4", "NCCL_MAX_NCHANNELS": "4", "NCCL_BUFFSIZE": str(buf)}
    for ch in (2, 8, 32):
        cfgs[f"cumem0_p2poff_ch{ch}"] = {
            "NCCL_CUMEM_ENABLE": "0", "NCCL_P2P_DISABLE": "1", "NCCL_MIN_NCHANNELS": str(ch),
            "NCCL_MAX_NCHANNELS": str(ch)}
    cfgs["cumem0_world1"] = {"NCCL_CUMEM_ENABLE": "0", "PROBE_WORLD": "1"}
    return cfgs


def _worker(rank: int, world: int, port: int, q: object) -> None:
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    torch.empty(1, device="cuda")
    torch.cuda.synchronize()
    free0, total = torch.cuda.mem_get_info()
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            device_id=torch.device("cuda", rank))
    x = torch.ones(21504, dtype=torch.bfloat16, device="cuda")  # 42 KiB
    dist.all_reduce(x)
    torch.cuda.synchronize()
    free1, _ = torch.cuda.mem_get_info()
    g2 = dist.new_group(list(range(world)))
    dist.all_reduce(x, group=g2)
    torch.cuda.synchronize()
    free2, _ = torch.cuda.mem_get_info()
    graph = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        dist.all_reduce(x)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        for _ in range(16):
            dist.all_reduce(x)
    torch.cuda.synchronize()
    free3, _ = torch.cuda.mem_get_info()
    if rank == 0:
        q.put({  # type: ignore[attr-defined]
            "total_mib": total / MIB, "context_mib": (total - free0) / MIB, "init_mib": (free0 - free1) / MIB,
            "second_comm_mib": (free1 - free2) / MIB, "graph_mib": (free2 - free3) / MIB,
            "nccl_version": ".".join(map(str, torch.cuda.nccl.version())), "torch": torch.__version__})
        time.sleep(0.5)
    sys.stdout.flush()
    os._exit(0)  # skip NCCL teardown, which can hang


def _run_one(port: int) -> None:
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    world = int(os.environ.get("PROBE_WORLD", "2"))
    procs = [ctx.Process(target=_worker, args=(r, world, port, q)) for r in range(world)]
    for p in procs:
        p.start()
    print("RESULT " + json.dumps(q.get(timeout=90)), flush=True)
    for p in procs:
        p.join(timeout=10)
        if p.is_alive():
            p.kill()


_CHANNELS = re.compile(r"(\d+ coll channels.*)$", re.M)


def main() -> int:
    """Run every configuration in fresh processes and write the JSON after each one."""
    out_dir = os.environ.get("OUT", ".")
    results: dict[str, object] = {"meta": {"script": "benchmarks/gpu/nccl_memory_sweep.py", "started": time.time()}}
    port = 29700
    deadline = time.time() + float(os.environ.get("SWEEP_BUDGET_S", "400"))
    for name, env in _configs().items():
        if time.time() > deadline:
            results[name] = {"skipped": "time budget"}
            continue
        port += 1
        e = dict(os.environ, NCCL_NVLS_ENABLE="0", NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT")
        e.update(env)
        t0 = time.time()
        p = subprocess.run([sys.executable, __file__, "--one", str(port)], env=e, capture_output=True, text=True,
                           timeout=120, check=False)
        line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
        res: dict[str, object] = json.loads(line[0][7:]) if line else {"error": (p.stdout + p.stderr)[-1500:]}
        ch = _CHANNELS.findall(p.stdout + p.stderr)
        res["channels"] = ch[0] if ch else None
        res["env"] = env
        res["wall_s"] = round(time.time() - t0, 1)
        results[name] = res
        print(name, json.dumps(res), flush=True)
        with open(os.path.join(out_dir, "nccl_memory_sweep.json"), "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=1)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--one":
        _run_one(int(sys.argv[2]))
        sys.exit(0)
    sys.exit(main())
