"""1x H200 probe: driver reserve, CUDA context, allocator overhead and CUDA-graph memory with torch alone.

Run on the device machine: ``/opt/torch/.venv/bin/python docs/data/h200_context_graph_probe.py OUT.json``
(run 1, ``h200_context_graph_run1.json``: every capture on a fresh side stream, shapes one after another in one
process); ``... OUT.json --fresh`` (run 2): one capture stream for all captures as SGLang's runner keeps, and
each shape and capture list in its own process, so freed memory of an earlier shape cannot be reused.
No SGLang there; the graph part captures a toy decode step (per layer: RMS-style norm, QKV, O, gate/up, down
linear layers in bf16, the shapes of real models at TP 1) for one batch size after another, sharing one memory
pool the way SGLang's CudaGraphRunner does, and records the free memory (cudaMemGetInfo) after each capture.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
MIB = 1 << 20


def smi_total_mib() -> float:
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total,memory.used,driver_version",
                          "--format=csv,noheader,nounits"], capture_output=True, text=True, check=True).stdout
    total, used, driver = [x.strip() for x in out.splitlines()[0].split(",")]
    return {"total_mib": float(total), "used_mib": float(used), "driver": driver}


SGLANG_LISTS = {"52 sizes to 512 (SGLang >= 0.5.3)": [1, 2, 4, 8, 12] + list(range(16, 257, 8))
                 + list(range(272, 512, 16)) + [512],
                 "36 sizes to 256": [1, 2, 4, 8, 12] + list(range(16, 257, 8)),
                 "13 sizes to 80 (SGLang 0.4.3)": [1, 2, 4] + list(range(8, 81, 8)),
                 "4 sizes to 8": [1, 2, 4, 8]}


def one_shape(name: str, shape: tuple[int, int, int, int, int], sizes: list[int]) -> dict[str, object]:
    """Capture ``sizes`` (largest first) of a toy decode step in one pool on one capture stream."""
    import torch

    h, qd, kvd, inter, layers = shape
    torch.ones(1, device="cuda")
    ws = [(torch.randn(h, qd + 2 * kvd, device="cuda", dtype=torch.bfloat16) * 0.01,
           torch.randn(qd, h, device="cuda", dtype=torch.bfloat16) * 0.01,
           torch.randn(h, 2 * inter, device="cuda", dtype=torch.bfloat16) * 0.01,
           torch.randn(inter, h, device="cuda", dtype=torch.bfloat16) * 0.01) for _ in range(layers)]
    static_in = torch.zeros(max(sizes), h, device="cuda", dtype=torch.bfloat16)

    def step(inp: torch.Tensor) -> torch.Tensor:
        hcur = inp
        for wqkv, wo, wgu, wd in ws:
            n = hcur * torch.rsqrt(hcur.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(hcur.dtype)
            qkv = n @ wqkv
            hcur = hcur + qkv[:, :qd] @ wo
            g, u = (hcur @ wgu).chunk(2, dim=-1)
            hcur = hcur + (torch.nn.functional.silu(g) * u) @ wd
        return hcur

    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):  # warm up cuBLAS on the capture stream
        step(static_in)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.mem_get_info()[0]
    pool = torch.cuda.graph_pool_handle()
    keep, rows = [], []
    for bs in sorted(sizes, reverse=True):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, pool=pool, stream=stream):
            out = step(static_in[:bs])
        keep.append((g, out))
        torch.cuda.synchronize()
        rows.append({"bs": bs, "used_since_base_mib": (base - torch.cuda.mem_get_info()[0]) / MIB})
    return {"shape": name, "hidden": h, "layers": layers, "intermediate": inter, "sizes": len(sizes),
            "max_bs": max(sizes), "total_mib": rows[-1]["used_since_base_mib"], "captures": rows}


def fresh(out_path: str) -> None:
    """Run 2: each (shape, list) in its own process."""
    import subprocess as sp

    shapes = {"llama8b_like": (4096, 4096, 1024, 14336, 32), "qwen0.6b_like": (1024, 2048, 1024, 3072, 28),
              "qwen32b_tp4_like": (5120, 1280, 256, 6912, 64)}
    results = []
    for name, shape in shapes.items():
        for label, sizes in SGLANG_LISTS.items():
            code = (f"import json,sys; sys.path.insert(0,'docs/data'); import h200_context_graph_probe as m; "
                    f"r=m.one_shape({name!r},{shape!r},{sizes!r}); r['list']={label!r}; print(json.dumps(r))")
            res = sp.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
            results.append(json.loads(res.stdout.strip().splitlines()[-1]) if res.returncode == 0
                           else {"shape": name, "list": label, "error": res.stderr[-500:]})
    doc = {"run": 2, "smi": smi_total_mib(), "graphs": results}
    with open(out_path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1)
    print(json.dumps([(r.get("shape"), r.get("list"), r.get("total_mib")) for r in results]))


def main() -> None:
    if "--fresh" in sys.argv:
        fresh(sys.argv[1])
        return
    res: dict[str, object] = {"smi_before": smi_total_mib()}
    import torch

    t0 = time.time()
    torch.cuda.init()
    free0, total0 = torch.cuda.mem_get_info()
    torch.ones(1, device="cuda")
    torch.cuda.synchronize()
    free1, total1 = torch.cuda.mem_get_info()
    res.update(torch=torch.__version__, cuda=torch.version.cuda, gpu=torch.cuda.get_device_name(),
               memgetinfo_total_mib=total1 / MIB, free_after_first_tensor_mib=free1 / MIB,
               context_mib=(total1 - free1) / MIB, init_s=time.time() - t0,
               smi_after_context=smi_total_mib())
    # cuBLAS workspace + first GEMM
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    (a @ a).sum().item()
    torch.cuda.synchronize()
    f2 = torch.cuda.mem_get_info()[0]
    res["after_first_gemm_mib"] = (free1 - f2) / MIB
    res["torch_reserved_after_gemm_mib"] = torch.cuda.memory_reserved() / MIB
    del a
    torch.cuda.empty_cache()

    shapes = {  # name: hidden, q heads*hd, kv heads*hd, intermediate, layers
        "llama8b_like": (4096, 4096, 1024, 14336, 32),
        "qwen0.6b_like": (1024, 2048, 1024, 3072, 28),
        "qwen32b_tp4_like": (5120, 1280, 256, 6912, 64),
    }
    graphs: dict[str, object] = {}
    for name, (h, qd, kvd, inter, layers) in shapes.items():
        ws = []
        for _ in range(layers):
            ws.append((torch.randn(h, qd + 2 * kvd, device="cuda", dtype=torch.bfloat16) * 0.01,
                       torch.randn(qd, h, device="cuda", dtype=torch.bfloat16) * 0.01,
                       torch.randn(h, 2 * inter, device="cuda", dtype=torch.bfloat16) * 0.01,
                       torch.randn(inter, h, device="cuda", dtype=torch.bfloat16) * 0.01))
        torch.cuda.synchronize()
        max_bs = 512
        static_in = torch.zeros(max_bs, h, device="cuda", dtype=torch.bfloat16)

        def step(inp: torch.Tensor) -> torch.Tensor:
            hcur = inp
            for wqkv, wo, wgu, wd in ws:
                n = hcur * torch.rsqrt(hcur.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(hcur.dtype)
                qkv = n @ wqkv
                hcur = hcur + qkv[:, :qd] @ wo
                gu = hcur @ wgu
                g, u = gu.chunk(2, dim=-1)
                hcur = hcur + (torch.nn.functional.silu(g) * u) @ wd
            return hcur

        pool = torch.cuda.graph_pool_handle()
        keep = []
        rows = []
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        base = torch.cuda.mem_get_info()[0]
        bss = [1, 2, 4, 8, 16, 24, 32, 48, 64, 80, 96, 128, 160, 192, 224, 256, 320, 384, 448, 512]
        for bs in reversed(bss):  # SGLang captures the largest first so the pool is reused
            inp = static_in[:bs]
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                step(inp)
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool):
                out = step(inp)
            keep.append((g, out))
            torch.cuda.synchronize()
            rows.append({"bs": bs, "used_since_base_mib": (base - torch.cuda.mem_get_info()[0]) / MIB})
        graphs[name] = {"hidden": h, "layers": layers, "intermediate": inter, "captures": rows,
                        "total_mib": rows[-1]["used_since_base_mib"]}
        keep.clear()
        ws.clear()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    res["graphs"] = graphs
    res["smi_end"] = smi_total_mib()
    with open(sys.argv[1], "w", encoding="utf-8") as fh:
        json.dump(res, fh, indent=1)
    print(json.dumps(res)[:3000])


if __name__ == "__main__":
    main()
