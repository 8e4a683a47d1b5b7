"""SGLang log-line formats, 2024 to 0.5.23, and the one function that turns a line into an ``Event``.

Every regex below cites the SGLang source line whose f-string it matches ("SG-x.y.z file:line"). "GB" in
SGLang's log lines is GiB (``free / (1 << 30)``), so values are reported as GiB unchanged.
"""

from __future__ import annotations

import re
from typing import Final

from sglwrap.record import Record, field


NUM: Final = r"(-?\d+(?:\.\d+)?)"

# Prefix of a line: "[2025-03-08 12:29:13 TP0]", "[23:17:01 TP7]" (0.3.x, time only, sglang#1479) / "[2025-07-02 07:41:58 DP0 TP0]" / "[... PP1 TP3 EP3]"
# (SG-0.5.23 utils/common.py:2630 format "[%(asctime)s{prefix}]", prefix built at managers/scheduler.py:6281-6291;
# SG-0.3.6 utils.py:552), and the 2024 in-message forms "[gpu=0]" (SG-0.2.7 model_runner.py:133) and
# "[gpu_id=0]" (sglang#744, mid-2024).
PREFIX_RE: Final = re.compile(
    r"\[(?P<ts>(?:\d{4}-\d\d-\d\d[ T])?\d\d:\d\d:\d\d(?:[.,]\d+)?)(?P<tags>(?: [A-Za-z_]+\d+)*)\] ?"
    r"|\[(?:gpu(?:_id)?|rank)=(?P<gpu>\d+)\] ?"
)
TAG_RE: Final = re.compile(r"([A-Za-z_]+)(\d+)")
# Where a second log line starts glued onto a progress bar or onto another line.
GLUE_RE: Final = re.compile(r"(?<=.)(?=\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d|\[gpu(?:_id)?=\d+\])")
ANSI_RE: Final = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-_]")


class Event(Record):
    """One recognised fact from one log line: ``kind`` plus its numbers; ``tags`` is the rank label."""

    kind: str
    tags: str
    values: dict[str, object] = field(default_factory=dict)
    text: str = ""


def _f(x: str | None) -> float | None:
    return None if x is None else float(x)


def _i(x: str | None) -> int | None:
    return None if x is None else int(x)


def _word_before(text: str, end: int) -> str | None:
    """The word that ends right before ``end`` (a pool's label: "SWAKVPool", "draft KV Cache"), if any."""
    head = text[max(0, end - 64):end].rstrip()
    word = head.rsplit(" ", 1)[-1] if head else ""
    return word or None


# --- memory timeline --------------------------------------------------------------------------------------
# "Init torch distributed ends. mem usage=0.13 GB" (SG-0.4.3.post4 model_runner.py:314) and
# "Init torch distributed ends. elapsed=1.2 s, mem usage=…" (SG-0.5.9 model_runner.py:850);
# 0.5.23 moved it to "Memory baseline taken. mem usage=X GB" (SG-0.5.23 distributed/bootstrap.py:220).
INIT_END_RE: Final = re.compile(
    r"(?:Init torch distributed ends\.(?: elapsed=[\d.]+ s,)?|Memory baseline taken\.) mem usage=" + NUM + " GB"
)
INIT_BEGIN_RE: Final = re.compile(r"Init torch distributed begin\.|Init parallel begin\.|Init nccl begin\.")
# "Load weight begin. avail mem=X GB" (SG-0.2.7 :133 with "[gpu=N] "; SG-0.3.6 :273; SG-0.5.23 model_runner.py:1274)
LOAD_BEGIN_RE: Final = re.compile(r"Load weight begin\. avail mem=" + NUM + " GB")
# "Load weight end. type=T, dtype=D, avail mem=X GB" (SG-0.2.7 :181, no mem usage),
# "…, avail mem=X GB, mem usage=Y GB." (SG-0.4.3.post4 :391, SG-0.5.2 :783),
# "Load weight end. elapsed=E s, type=T, dtype=D, …" (SG-0.5.9 :1041), and
# "Load weight end. elapsed=E s, type=T, [quant, ]avail mem=X GB, mem usage=Y GB." (SG-0.5.23 model_runner.py:1373)
# 0.1.x (early 2024): "[rank=N] Load weight end. Type=T. Avail mem=X GB" (sglang#… llava report, corpus 20).
LOAD_END_RE: Final = re.compile(
    r"Load weight end\.(?:.*?[tT]ype=(?P<type>\w+))?.*?[aA]vail mem=" + NUM + r" GB(?:, mem usage=" + NUM + " GB)?"
)
# "KV Cache is allocated. #tokens: N, K size: a GB, V size: b GB" (SG-0.4.3.post4 mem_cache/memory_pool.py:211),
# "… #tokens: N, KV size: c GB" (MLA, SG-0.4.8 memory_pool.py:561), 0.5.23 adds "dtype: D, " and a pool label
# ("{label} KV Cache is allocated"/"VA upper bound", SG-0.5.23 mem_cache/memory_pool.py:2087-2098);
# 0.4.1-era "KV Cache is allocated. K size: a GB, V size: b GB." has no #tokens (log 22).
KV_ALLOC_RE: Final = re.compile(
    r"KV Cache (?:is allocated|VA upper bound)\.(?: dtype: (?P<dtype>\S+?),)?"
    r"(?: #tokens: (?P<tokens>-?\d+),)? (?:K size: (?P<k>[\d.]+) GB, V size: (?P<v>[\d.]+) GB|KV size: (?P<kv>[\d.]+) GB)"
)
# "Post-capture KV sizing: KV cache allocated. dtype: D, #tokens: N, KV size: X GB, avail mem=Y GB"
# (SG-0.5.23 model_executor/model_runner_components/kv_pool_runtime.py:195)
POST_CAPTURE_KV_RE: Final = re.compile(
    r"Post-capture KV sizing: KV cache allocated\. dtype: \S+?, #tokens: (?P<tokens>-?\d+), KV size: (?P<kv>[\d.]+) GB,"
    r" avail mem=(?P<avail>[\d.]+) GB"
)
# A hybrid pool's total: "SWAKVPool mem usage: X GB, swa size: N, full size: M" (SG-0.5.4 swa_memory_pool.py:97),
# "SWAKVPool VA upper bound: X GB, …" (SG-0.5.18); its sub-pools log their own "KV Cache is allocated" before it.
POOL_TOTAL_RE: Final = re.compile(
    r"Pool (?:mem usage|VA upper bound): (?P<size>[\d.]+) ?GB(?:, swa size: (?P<swa>\d+), full size: (?P<full>\d+))?"
)
# "Mamba Cache is allocated. [max_mamba_cache_size: N, ]conv_state size: X GB, ssm_state size: Y GB[ intermediate_…
# size: Z GB …]" (SG-0.5.2 … SG-0.5.23 mem_cache/memory_pool.py:984)
MAMBA_RE: Final = re.compile(r"Mamba Cache is allocated\.(?: max_mamba_cache_size: (?P<n>\d+),)?(?P<rest>.*)")
GB_FIELD_RE: Final = re.compile(r"size: ([\d.]+) ?GB")
# "Memory pool end. avail mem=X GB" (SG-0.2.7 :237, SG-0.5.9 model_runner_kv_cache_mixin.py:745,
# SG-0.5.23 mem_cache/kv_cache_configurator.py:499)
POOL_END_RE: Final = re.compile(r"Memory pool end\. avail mem=" + NUM + " GB")
# "Use sliding window memory pool. full_layer_tokens=X, swa_layer_tokens=Y" (SG-0.5.23 pool_configurator.py:889)
SWA_RE: Final = re.compile(r"Use sliding window memory pool\.(?: \(all SWA\))?.*?full_layer_tokens=(\d+)")
# Capture begin/end, all names: "Capture cuda graph begin. This can take up to several minutes." (SG-0.2.7 :288,
# SG-0.3.6 :582), "… avail mem=X GB" (SG-0.4.3.post4 :840), "Capture draft cuda graph begin" (SG-0.4.8 eagle_worker:269),
# "Capture {cuda graph|cpu graph} begin" (SG-0.5.2 :1752), "Capture piecewise CUDA graph begin" (SG-0.5.9 :2228),
# "Capture {role} {prefill|decode|verify} CUDA graph begin. backend=…, avail mem=X GB"
# (SG-0.5.23 cuda_graph_setup.py:685,765).
CAPTURE_BEGIN_RE: Final = re.compile(
    r"Capture (?P<name>[\w \-]*?)(?:cuda|CUDA|cpu|npu|xpu|NPU|XPU|CPU|musa) graph begin(?:\.|\b)(?:.*?avail mem=(?P<avail>[\d.]+) GB)?"
)
# End: "Time elapsed: 7.23 s. avail mem=0.53 GB. mem usage=0.93 GB." (SG-0.4.3.post4 :845, avail first),
# "mem usage=X GB. avail mem=Y GB." (SG-0.4.8 :1157, SG-0.5.2 :1766), "bs=[…], elapsed=…s, mem usage=X GB,
# avail mem=Y GB." (SG-0.5.23 cuda_graph_setup.py:794)
CAPTURE_END_RE: Final = re.compile(
    r"Capture (?P<name>[\w \-]*?)(?:cuda|CUDA|cpu|npu|xpu|NPU|XPU|CPU|musa) graph end\.(?P<rest>.*)"
)
MEM_USAGE_RE: Final = re.compile(r"mem usage=" + NUM + " GB")
AVAIL_RE: Final = re.compile(r"avail mem=" + NUM + " GB")
BS_LIST_RE: Final = re.compile(r"(?:Capture cuda graph bs |bs=)\[([\d, ]*)\]")
# A bare tqdm bar such as "100%|██████████| 13/13 [00:07<00:00,  1.80it/s]" during capture (log 01).
TQDM_RE: Final = re.compile(r"(\d+)%\|[^|]*\| *(\d+)/(\d+) ")
# "max_total_num_tokens=N, chunked_prefill_size=…, max_prefill_tokens=…, max_running_requests=M, context_len=C[,
# available_gpu_mem=X GB]" (SG-0.2.7 managers/tp_worker.py:140 with "[gpu=N] ", SG-0.5.2 scheduler.py:412,
# SG-0.5.23 managers/scheduler.py:1269)
MAX_TOTAL_RE: Final = re.compile(r"(?<![\w.])max_total_num_tokens=(-?\d+)(?!\w)")
KV_NUM_RE: Final = re.compile(r"(max_running_requests|context_len|available_gpu_mem)=([\d.]+)")
# "max_total_tokens=131072 is larger than the profiled value -561981. Use the profiled value instead."
# (SG-0.3.6 :456, SG-0.5.9 model_runner_kv_cache_mixin.py:381, SG-0.5.23 kv_cache_configurator.py:3102)
PROFILED_RE: Final = re.compile(r"max_total_tokens=(\d+) is larger than the profiled value (-?\d+)")

# --- outcome -----------------------------------------------------------------------------------------------
# "The server is fired up and ready to roll!" (SG-0.2.7 server.py:411 … SG-0.5.23 entrypoints/http_server.py:2600)
UP_RE: Final = re.compile(r"The server is fired up and ready to roll")
HTTP_UP_RE: Final = re.compile(r"Uvicorn running on |Application startup complete")
# "Not enough memory. Please try to increase --mem-fraction-static.[ Current value: …mem_fraction_static=F]"
# (SG-0.2.7 :211, SG-0.5.9 model_runner_kv_cache_mixin.py:417, SG-0.5.23 pool_configurator.py:96)
NOT_ENOUGH_RE: Final = re.compile(
    r"Not enough memory\.(?:\s*Please try to increase(?:\s*--mem-fraction-static\.?)?)?"
    r"(?:\s*Current value: (?:self\.server_args\.)?mem_fraction_static=" + NUM + ")?"
)
# "Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=F. Raise --mem-fraction-static
# above X (minimum viable = …)." (SG-0.5.23 kv_cache_configurator.py:3051); the second sentence may be on the next
# line (joined by the reader) or cut off, so everything after the first clause is optional.
NO_KV_RE: Final = re.compile(
    r"Loaded weights leave no GPU memory for the KV cache(?:\s*under\s*--mem-fraction-static=" + NUM
    + r"\.?)?(?:\s*Raise --mem-fraction-static above\s*" + NUM + ")?"
)
# torch: "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which
# 1.06 GiB is free. Including non-PyTorch memory, this process has 78.12 GiB memory in use. Of the allocated
# memory 75.2 GiB is allocated by PyTorch, and 1.4 GiB is reserved by PyTorch but unallocated."
# The same allocator failure in the wording of torch's other builds and of the drivers: ROCm torch prints "HIP out of
# memory" (c10 CUDACachingAllocator hipified), torch_npu "NPU out of memory. Tried to allocate … (NPU 0; … total
# capacity; … already allocated; … free; …)", the HIP runtime "hipErrorOutOfMemory" (HIP_ERROR_OutOfMemory in older
# stacks), the CUDA driver "CUDA_ERROR_OUT_OF_MEMORY" (cuMemCreate, torch_memory_saver) and the runtime
# "cudaErrorMemoryAllocation"; Ascend's runtime "ACL_ERROR_RT_MEMORY_ALLOCATION".
TORCH_OOM_RE: Final = re.compile(
    r"out of memory|OutOfMemoryError|ncclUnhandledCudaError|Failed to CUDA calloc|[Ee]rror_?OutOfMemory"
    r"|OUT_OF_MEMORY|cudaErrorMemoryAllocation|RT_MEMORY_ALLOCATION"
)
OOM_LITERALS: Final = ("out of memory", "OutOfMemory", "calloc", "ncclUnhandled", "OUT_OF_MEMORY", "MemoryAllocation",
                       "MEMORY_ALLOCATION")
# torch < 2.1 and torch_npu: "(GPU 0; 2.00 GiB total capacity; 1.67 GiB already allocated; 0 bytes free; …)"
OLD_TOTAL_FREE_RE: Final = re.compile(
    r"\((GPU|NPU|XPU) (\d+); " + NUM + r" (GiB|MiB) total capacity;.*?" + NUM + r" (GiB|MiB|KiB|B|bytes) free"
)
TRIED_RE: Final = re.compile(r"Tried to allocate " + NUM + r" (GiB|MiB|KiB|B)")
TOTAL_FREE_RE: Final = re.compile(
    r"GPU (\d+) has a total capacit(?:y|ies) of " + NUM + r" (GiB|MiB) of which " + NUM + r" (GiB|MiB|KiB|B) is free"
)
PROCESS_HAS_RE: Final = re.compile(r"this process has " + NUM + r" (GiB|MiB) memory in use")
RESERVED_RE: Final = re.compile(r"and " + NUM + r" (GiB|MiB|KiB|B) is reserved by PyTorch but unallocated")
# "Capture cuda graph failed: {e}" (SG-0.2.7 :300 … SG-0.5.23 runner/decode_cuda_graph_runner.py:603)
CAPTURE_FAILED_RE: Final = re.compile(r"Capture (?:[\w ]*?)(?:cuda|CUDA) graph failed")
UNBALANCED_RE: Final = re.compile(r"The memory capacity is unbalanced")  # SG-0.5.23 distributed/bootstrap.py:445
# SG-0.5.23 kv_cache_configurator.py (mamba) and pool_configurator.py (SWA) budget errors
OTHER_MEM_RE: Final = re.compile(
    r"Not enough GPU memory for hybrid|SWA pool \(\d+ tokens\) cannot hold|SWA pool cap .* leaves no room"
)
# The last line of a traceback ("RuntimeError: …", "torch.OutOfMemoryError: …", Triton's
# "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: …") and SGLang's crash reports
# ("Scheduler hit an exception: …", SG-0.5.23 managers/scheduler.py:6372).
EXC_RE: Final = re.compile(
    r"^(?:[A-Za-z_][\w]*\.)*(?P<exc>[A-Z]\w*(?:Error|Exception|OutOfResources|Interrupt)|OutOfResources)"
    r"(?::\s?(?P<msg>.*))?$"
)
# CUDA runtime/driver error strings wherever they appear ("CUDA error: an illegal memory access was encountered",
# "CUDA driver error: …", "cudaErrorMemoryAllocation", "CUBLAS_STATUS_ALLOC_FAILED", "NCCL error …").
# Kernel libraries print their own "CUDA Error: device-side assert triggered (710) …/decode.cuh: line 749 …"
# (flashinfer's FLASHINFER_CUDA_CALL), capitalised.
CUDA_ERR_RE: Final = re.compile(
    r"(?:CUDA|HIP|cuDNN|CUDNN) (?:driver )?[Ee]rror: [^\n]{1,200}|cuda\w*Error\w+|CUBLAS_STATUS_\w+"
    r"|NCCL error[^\n]{0,200}"
)
CRASH_RE: Final = re.compile(
    r"\w+ hit an exception|Initialization failed|Received sigquit from a child|scheduler is dead|^Killed$"
    r"|Exception in (?:ModelTpServer|run_tp_server|\w+|thread [^:]{1,80}):|Traceback \(most recent call last\)"
)
# A message "talks about memory": never report it as "not a memory error".
MEMORY_TALK_RE: Final = re.compile(r"[Mm][Ee][Mm][Oo][Rr][Yy]|\bOOM\b|out of resource|\b[Aa]lloc")
# sglang.bench_one_batch / bench_latency / bench_offline_throughput / bench_serving end lines: the run completed
# (SG-0.3.6 bench_one_batch.py, SG-0.5.23 benchmark/one_batch.py:820-885, bench_serving.py "Serving Benchmark
# Result", bench_offline_throughput.py "Offline Throughput Benchmark Result").
BENCH_DONE_RE: Final = re.compile(
    r"Prefill\. latency: |Decode\.\s+median latency: |Total\. latency: |(?:Serving|Offline Throughput) Benchmark Result"
    r"|Benchmark duration \(s\):"
)
WARMUP_RE: Final = re.compile(r"[Ww]armup|WARMUP")
# A traceback frame inside SGLang ('File ".../sglang/srt/model_executor/model_runner.py", line 285, in load_model',
# indented, flush left or behind a log prefix) names the startup step that failed even when the excerpt has no
# progress line for it. Function and module names as in every release's source (SG-0.3.0 … SG-0.5.23:
# model_runner.load_model / init_memory_pool / init_cuda_graphs | init_device_graphs, cuda_graph_runner.capture,
# scheduler.event_loop_normal | event_loop_overlap[_disagg_*], SG-0.2.x controller loop_for_forward).
FRAME_RE: Final = re.compile(r'File "[^"]*sglang[^"]*?(?P<mod>\w+)\.py", line \d+, in (?P<fn>\w+)')
FRAME_STAGE_FN: Final = {
    "load_model": "weight_load", "get_model": "weight_load", "load_weights": "weight_load",
    "load_weights_and_postprocess": "weight_load", "_load_weights": "weight_load",
    "init_memory_pool": "kv_pool", "profile_max_num_token": "kv_pool",
    "init_cuda_graphs": "cuda_graph", "init_device_graphs": "cuda_graph",
    "loop_for_forward": "serving",  # SG-0.2.x controller_single/controller_multi: the serving loop
    "_create_buffers": "kv_pool",  # the KV pool's tensors (mem_cache/memory_pool*.py, hardware_backend/npu/…)
    # The forward path of a running server: the scheduler's batch loop (SG-0.4 … SG-0.5.23 run_batch,
    # tp_worker.forward_batch_generation, the overlap thread's forward_thread_func[_]) and the 0.1/0.2 TP server
    # (router/model_rpc.py and managers/tp_worker.py exposed_step → forward_step → forward_{prefill,decode}_batch).
    "run_batch": "serving", "forward_batch_generation": "serving", "forward_thread_func": "serving",
    "forward_thread_func_": "serving", "exposed_step": "serving", "forward_step": "serving",
    "forward_prefill_batch": "serving", "forward_decode_batch": "serving",
    # --cpu-offload-gb moves weights to pinned host memory while the model is built (SG-0.5.23 utils/offloader.py
    # OffloaderV1.wrap_modules / maybe_offload_to_cpu; 0.4.x utils.maybe_offload_to_cpu)
    "maybe_offload_to_cpu": "weight_load", "wrap_modules": "weight_load",
}
FRAME_STAGE_MOD: Final = {"cuda_graph_runner": "cuda_graph", "memory_pool": "kv_pool", "memory_pool_npu": "kv_pool"}
# The statement line under a frame: "    self.init_device_graphs()" names the step even when the callee's frame is cut off.
CALL_RE: Final = re.compile(r"^\s*self\.(load_model|init_memory_pool|init_cuda_graphs|init_device_graphs)\(")
# The scheduler checking a request (SG-0.4.3 … SG-0.5.23 managers/utils.py validate_input_length).
REQUEST_CHECK_RE: Final = re.compile(r"Input length \(\d+ tokens\) exceeds the maximum allowed length")
# The weight loader's progress bar ("Loading safetensors checkpoint shards:   0% Completed | 0/2", SG-0.5.x
# model_loader/weight_utils.py).
SHARDS_RE: Final = re.compile(r"Loading \w+ checkpoint shards:")
# Weight loaders' own warnings ("Parameter model.layers.0.x not found in params_dict", SG-0.5.x models/*.py).
PARAMS_DICT_RE: Final = re.compile(r"(?:Parameter|Weight) \S+ not found in params_dict")
CRASH_GATES: Final = ("exception", "Exception in", "Initialization failed", "sigquit", "is dead", "Killed",
                      "Traceback")

# --- context -----------------------------------------------------------------------------------------------
# 0.2–0.5.x: "server_args=ServerArgs(model_path=…, mem_fraction_static=0.85, …)";
# 0.5.23: "server_args={'model_path': …}" (SG-0.5.23 entrypoints/engine.py:311)
SERVER_ARGS_RE: Final = re.compile(r"server_args=")
VERSION_RE: Final = re.compile(
    r"(?:\b[sS][gG][lL][aA][nN][gG](?:==| [vV]ersion:? | [vV]|:[vV])|\bSGLang )(\d+\.\d+\.\d+(?:\.?post\d+|rc\d+)?)"
)
WORKER_ENV_RE: Final = re.compile(r"\{.*?\"sglwrap\"\s*:\s*\"worker-env\".*\}")

# Literal substrings; a line holding none of them cannot match anything above (checked by a test), so the
# reader can skip it with bytes.find over whole chunks instead of running regexes on every line.
KEYWORDS: Final[tuple[bytes, ...]] = (
    b"mem", b"Mem", b"KV", b"Capture", b"max_total", b"fired up", b"Uvicorn", b"startup complete",
    b"Error", b"xception", b"Traceback", b"server_args", b"worker-env", b"%|", b"Killed", b"sglang",
    b"SGLang", b"Initialization failed", b"sigquit", b"is dead", b"Init ", b"Use sliding",
    b"out of memory", b"calloc", b"OutOfResources", b"CUDA error", b"latency: ", b"Benchmark", b"CUBLAS_",
    b"NCCL error", b"Pool ", b"Mamba Cache", b"params_dict", b"self.init_", b"self.load_model(",
    b"maximum allowed length", b"checkpoint shards", b"OUT_OF_MEMORY", b"MEMORY_ALLOCATION",
)
# SGLang's serving statistics and the HTTP access log: whole lines dropped before any keyword search.
NOISE: Final[tuple[bytes, bytes, bytes]] = (b"Decode batch", b"Prefill batch", b'HTTP/1.1" ')
# Serving evidence: a decode step, or an OpenAI-API POST answered. The startup warmup itself sends GET /v1/models,
# GET /get_model_info and POST /generate (or /encode), so none of those counts.
SERVED_RE: Final = re.compile(r'Decode batch\.|"POST /v1/\S* HTTP/1\.1" 200')
# An error line whose next physical lines may be its continuation (terminal or issue wrapping).
CONT_MARKERS: Final[tuple[bytes, ...]] = (
    b"Error", b"xception", b"Not enough", b"Loaded weights", b"out of memory", b"OutOfResources", b"CUDA error",
    b"Tried to allocate", b"Required:",
)
# What may stand before an SGLang line: docker/ISO timestamps, syslog/journal "Mon DD HH:MM:SS host unit[pid]: ",
# compose "service-1  | ", glog "E1201 12:00:00.123 123 file.cc:12] " and Python logging level words.
LEAD_RE: Final = re.compile(
    r"(?:\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?Z?(?:[+-]\d\d:?\d\d)?\s+"
    r"|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ [\w.@/-]+(?:\[\d+\])?: "
    r"|[\w.-]+-\d+\s+\| "
    r"|[EWIF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ \S+\] "
    r"|(?:INFO|WARNING|ERROR|DEBUG|CRITICAL)(?::\s*|\s+(?=\S))"
    r"|\(\w+(?: pid=\d+)?[^)]{0,40}\)\s)+"
)


def split_prefix(line: str) -> tuple[str, str]:
    """Return (rank label, message) for one physical log line; the label is "" when the line has no tag."""
    tags, msg, _ts = split_line(line)
    return tags, msg


def split_line(line: str) -> tuple[str, str, str | None]:
    """(rank label, message, timestamp of the SGLang prefix or None) of one physical log line."""
    m = PREFIX_RE.search(line, 0, 160) if "[" in line[:160] else None
    if m is None:
        lead = LEAD_RE.match(line)
        return "", line if lead is None else line[lead.end():], None
    if m.group("gpu") is not None:
        return f"gpu_id={m.group('gpu')}", line[m.end():], None
    return (m.group("tags") or "").strip(), line[m.end():], m.group("ts")


def rank_number(label: str) -> int:
    """The rank number of a label: its TP (else gpu_id, else last) index; 0 for an untagged line."""
    if label.startswith("gpu_id="):
        return int(label[7:])
    tags = dict(TAG_RE.findall(label))
    for key in ("TP", "EP", "PP", "DP"):
        if key in tags:
            return int(tags[key])
    nums = TAG_RE.findall(label)
    return int(nums[-1][1]) if nums else 0


def parse_message(tags: str, msg: str) -> list[Event]:
    """Every event one message carries (usually zero or one).

    Each regex is guarded by a literal substring test, so a line runs at most a couple of regexes.
    """
    out: list[Event] = []
    if "server_args=" in msg:  # the launch's arguments: long, and never a memory or outcome line
        _parse_context(tags, msg, out)
        return [e if e.text else Event(e.kind, e.tags, e.values, msg) for e in out]
    _parse_memory(tags, msg, out)
    if not out and 'File "' in msg and ", in " in msg:
        _parse_frame(tags, msg, out)
        if out:
            return out
    if not out and "self." in msg and (m := CALL_RE.match(msg)) is not None:
        return [Event("frame", tags, {"stage": FRAME_STAGE_FN[m.group(1)], "frame": None}, text=msg)]
    if not out and "maximum allowed length" in msg and REQUEST_CHECK_RE.search(msg) is not None:
        return [Event("frame", tags, {"stage": "serving"}, text=msg)]
    if not out and "checkpoint shards" in msg and SHARDS_RE.search(msg) is not None:
        return [Event("frame", tags, {"stage": "weight_load"}, text=msg)]
    if not out and "params_dict" in msg and PARAMS_DICT_RE.search(msg) is not None:
        return [Event("frame", tags, {"stage": "weight_load"}, text=msg)]
    if not out and OUTCOME_GATE_RE.search(msg) is not None:
        _parse_outcome(tags, msg, out)
    if not out and ("Decode batch" in msg or "HTTP/1.1" in msg) and SERVED_RE.search(msg) is not None:
        out.append(Event("served", tags, text=msg))
    if "server_args" in msg or "glang" in msg or "GLang" in msg or "GLANG" in msg or "worker-env" in msg:
        _parse_context(tags, msg, out)
    return [e if e.text else Event(e.kind, e.tags, e.values, msg) for e in out]


# Literals one of which every outcome line holds (checked before any outcome regex runs).
OUTCOME_GATES: Final = (
    "fired up", "Uvicorn", "startup complete", "emory", "rror", "xception", "OutOfResources", "nbalanced",
    "SWA pool", "latency: ", "Benchmark", "Initialization failed", "sigquit", "is dead", "Killed", "Traceback",
    "CUBLAS_", "calloc", "Interrupt", "graph failed", "OUT_OF_MEMORY", "MEMORY_ALLOCATION",
)
OUTCOME_GATE_RE: Final = re.compile("|".join(re.escape(g) for g in OUTCOME_GATES))


def _parse_memory(tags: str, msg: str, out: list[Event]) -> None:
    if "Load weight " in msg:
        if (m := LOAD_END_RE.search(msg)) is not None:
            out.append(Event("load_end", tags, {"avail": float(m.group(2)), "usage": _f(m.group(3)),
                                                "type": m.group("type")}))
            return
        if (m := LOAD_BEGIN_RE.search(msg)) is not None:
            out.append(Event("load_begin", tags, {"avail": float(m.group(1))}))
            return
    if "Init " in msg or "Memory baseline" in msg:
        if (m := INIT_END_RE.search(msg)) is not None:
            out.append(Event("init_end", tags, {"usage": float(m.group(1))}))
            return
        if INIT_BEGIN_RE.search(msg) is not None:
            out.append(Event("init_begin", tags))
            return
    if "KV" in msg:
        if "Post-capture" in msg and (m := POST_CAPTURE_KV_RE.search(msg)) is not None:
            out.append(Event("kv_post_capture", tags, {"tokens": int(m.group("tokens")), "kv": float(m.group("kv")),
                                                       "avail": float(m.group("avail"))}))
            return
        if "KV Cache " in msg and (m := KV_ALLOC_RE.search(msg)) is not None:
            k, v, kv = _f(m.group("k")), _f(m.group("v")), _f(m.group("kv"))
            size = kv if kv is not None else (k or 0.0) + (v or 0.0)
            tokens = None if m.group("tokens") is None else int(m.group("tokens"))
            out.append(Event("kv_alloc", tags, {"tokens": tokens, "k": k, "v": v, "size": size,
                                                "label": _word_before(msg, m.start())}))
            return
    if "Pool " in msg and (m := POOL_TOTAL_RE.search(msg)) is not None:
        out.append(Event("pool_total", tags, {"size": float(m.group("size")), "pool": _word_before(msg, m.start() + 4),
                                              "swa_tokens": _i(m.group("swa")), "full_tokens": _i(m.group("full"))}))
        return
    if "Mamba Cache" in msg and (m := MAMBA_RE.search(msg)) is not None:
        sizes = [float(x) for x in GB_FIELD_RE.findall(m.group("rest"))]
        out.append(Event("mamba_alloc", tags, {"size": round(sum(sizes), 2), "slots": _i(m.group("n"))}))
        return
    if "Memory pool end" in msg and (m := POOL_END_RE.search(msg)) is not None:
        out.append(Event("pool_end", tags, {"avail": float(m.group(1))}))
        return
    if "sliding window" in msg and (m := SWA_RE.search(msg)) is not None:
        out.append(Event("swa", tags, {"tokens": int(m.group(1))}))
        return
    if "Capture" in msg:
        if (m := CAPTURE_BEGIN_RE.search(msg)) is not None:
            out.append(Event("capture_begin", tags, {"avail": _f(m.group("avail")),
                                                     "name": m.group("name").strip()}))
            # 2026 builds list the decode sizes on the begin line: "... decode CUDA graph begin. ..., bs=[1, 2, ...]"
            if (b := BS_LIST_RE.search(msg)) is not None:
                out.append(Event("capture_bs", tags, {"count": len([x for x in b.group(1).split(",") if x.strip()])}))
            return
        if (m := CAPTURE_END_RE.search(msg)) is not None:
            rest = m.group("rest")
            u, a, b = MEM_USAGE_RE.search(rest), AVAIL_RE.search(rest), BS_LIST_RE.search(rest)
            out.append(Event("capture_end", tags, {
                "usage": None if u is None else float(u.group(1)), "avail": None if a is None else float(a.group(1)),
                "bs_count": None if b is None else len([x for x in b.group(1).split(",") if x.strip()]),
            }))
            return
        if "Capture cuda graph bs" in msg and (m := BS_LIST_RE.search(msg)) is not None:
            out.append(Event("capture_bs", tags, {"count": len([x for x in m.group(1).split(",") if x.strip()])}))
            return
    if "profiled value" in msg and (m := PROFILED_RE.search(msg)) is not None:
        out.append(Event("profiled", tags, {"requested": int(m.group(1)), "profiled": int(m.group(2))}))
        return
    if ("max_total_num_tokens=" in msg and "self.max_total_num_tokens" not in msg
            and (m := MAX_TOTAL_RE.search(msg)) is not None):
        vals: dict[str, object] = {"tokens": int(m.group(1))}
        for key, val in KV_NUM_RE.findall(msg):
            vals[key] = float(val) if key == "available_gpu_mem" else int(float(val))
        out.append(Event("max_total", tags, vals))
        return
    if not tags and "%|" in msg and (m := TQDM_RE.search(msg)) is not None:
        out.append(Event("tqdm", tags, {"done": int(m.group(2)), "total": int(m.group(3))}))


def _parse_frame(tags: str, msg: str, out: list[Event]) -> None:
    """A traceback frame that names a startup step (or the scheduler's serving loop) as a ``frame`` event."""
    if (m := FRAME_RE.search(msg)) is None:
        return
    fn = m.group("fn")
    stage = FRAME_STAGE_FN.get(fn)
    if stage is None and (fn == "__init__" or fn.startswith(("_create", "_init", "init"))):
        stage = FRAME_STAGE_MOD.get(m.group("mod"))  # a pool's constructor, not its per-batch methods
    if stage is None and m.group("mod") == "cuda_graph_runner":
        stage = "cuda_graph"
    if stage is None and fn.startswith("event_loop") and m.group("mod") == "scheduler":
        stage = "serving"
    if stage is None and fn.startswith("event_loop_overlap_disagg"):
        stage = "serving"
    out.append(Event("frame", tags, {"stage": stage, "frame": f"{m.group('mod')}.{fn}"}, text=msg))


def _parse_outcome(tags: str, msg: str, out: list[Event]) -> None:
    text = msg.strip()
    if text.startswith("raise "):  # a traceback's source line ('raise RuntimeError(f"NCCL error: …")'), not an error
        return
    if "out of memory happened" in text:  # the scheduler retracting requests (SG-0.2.15 … 0.4.6), then going on
        return
    if "fired up" in text and UP_RE.search(text):
        out.append(Event("up", tags, text=text))
    elif ("Uvicorn running" in text or "startup complete" in text) and HTTP_UP_RE.search(text):
        out.append(Event("http_up", tags, text=text))  # the HTTP server is up; SGLang's warmup request follows
    elif "Loaded weights" in text and (m := NO_KV_RE.search(text)) is not None:
        out.append(Event("error", tags, {"kind": "no_kv", "f": _f(m.group(1)), "raise_above": _f(m.group(2))},
                         text=_tail(text, m.start())))
    elif "Not enough memory" in text and (m := NOT_ENOUGH_RE.search(text)) is not None:
        out.append(Event("error", tags, {"kind": "not_enough", "f": _f(m.group(1))}, text=_tail(text, m.start())))
    elif "graph failed" in text and (m := CAPTURE_FAILED_RE.search(text)) is not None:
        out.append(Event("error", tags, {"kind": "capture_failed", "oom": TORCH_OOM_RE.search(text) is not None,
                                         "msg": text[m.start():], **_torch_oom_numbers(text)},
                         text=text))
    elif (any(w in text for w in OOM_LITERALS) and (m := TORCH_OOM_RE.search(text)) is not None
          and ("rror" in text or "out of memory" in text or "calloc" in text or "OUT_OF" in text)):
        if "out of memory" in text and catalogue_matches("kv_exhausted", text):
            # SGLang's own KV/request-pool allocator giving up while scheduling a batch, not a device allocation
            out.append(Event("error", tags, {"kind": "kv_exhausted"}, text=text.strip("` ")))
        else:
            out.append(Event("error", tags, {"kind": "torch_oom", **_torch_oom_numbers(text)}, text=text))
    elif ("SWA pool" in text or "for hybrid" in text) and OTHER_MEM_RE.search(text) is not None:
        out.append(Event("error", tags, {"kind": "budget_other"}, text=text))
    elif "unbalanced" in text and UNBALANCED_RE.search(text) is not None:
        out.append(Event("error", tags, {"kind": "unbalanced"}, text=text))
    elif (m := EXC_RE.match(text)) is not None:
        out.append(Event("error", tags, {"kind": "exception", "exc": m.group("exc"), "msg": m.group("msg") or "",
                                         "memory": MEMORY_TALK_RE.search(text) is not None,
                                         "warmup": WARMUP_RE.search(text) is not None}, text=text))
    elif (("rror" in text or "CUBLAS_" in text) and ("CUDA" in text or "cuda" in text or "HIP" in text
                                                      or "NCCL" in text or "CUBLAS" in text or "cuDNN" in text
                                                      or "CUDNN" in text)
          and (m := CUDA_ERR_RE.search(text)) is not None):
        exc = "NCCL error" if m.group(0).startswith("NCCL") else "CUDA error"
        out.append(Event("error", tags, {"kind": "exception", "exc": exc, "msg": m.group(0),
                                         "memory": MEMORY_TALK_RE.search(text) is not None,
                                         "warmup": WARMUP_RE.search(text) is not None}, text=text))
    elif ("latency: " in text or "Benchmark" in text) and BENCH_DONE_RE.search(text) is not None:
        out.append(Event("bench_done", tags, text=text))
    elif any(g in text for g in CRASH_GATES) and CRASH_RE.search(text) is not None:
        out.append(Event("crash", tags, {"warmup": WARMUP_RE.search(text) is not None}, text=text))


def _tail(text: str, start: int) -> str:
    return text[start:] if start < 200 else text


def _gib(value: str, unit: str) -> float:
    return float(value) * {"GiB": 1.0, "MiB": 1 / 1024, "KiB": 1 / 1024**2, "B": 1 / 1024**3, "bytes": 1 / 1024**3}[unit]


def catalogue_matches(mid: str, text: str) -> bool:
    """Whether ``text`` holds one of the catalogue's SGLang message templates of id ``mid`` (read from the release
    source by ``tools/gen_catalogue.py``)."""
    from sglwrap.diagnose.catalogue import by_id

    return any(m.regex.search(text) is not None for m in by_id().get(mid, ()))


def device_of(text: str) -> str | None:
    """The accelerator an out-of-memory message names: "NPU" (torch_npu, Ascend), "HIP" (ROCm), "MUSA" (torch_musa),
    "XPU" (Intel), else None (CUDA)."""
    if "NPU" in text or "npu" in text[:80] or "ACL_ERROR" in text:
        return "NPU"
    if "HIP" in text or "hipError" in text:
        return "HIP"
    if "MUSA out of memory" in text or "musaError" in text:
        return "MUSA"
    if "XPU out of memory" in text or "(XPU " in text:
        return "XPU"
    return None


def _torch_oom_numbers(text: str) -> dict[str, object]:
    vals: dict[str, object] = {}
    if (m := TRIED_RE.search(text)) is not None:
        vals["tried_gib"] = _gib(m.group(1), m.group(2))
    if (m := TOTAL_FREE_RE.search(text)) is not None:
        vals["gpu"] = int(m.group(1))
        vals["total_gib"] = _gib(m.group(2), m.group(3))
        vals["free_gib"] = _gib(m.group(4), m.group(5))
    elif "total capacity;" in text and (m := OLD_TOTAL_FREE_RE.search(text)) is not None:
        vals["gpu"] = int(m.group(2))
        vals["total_gib"] = _gib(m.group(3), m.group(4))
        vals["free_gib"] = _gib(m.group(5), m.group(6))
    if (dev := device_of(text)) is not None:
        vals["device"] = dev
    if (m := PROCESS_HAS_RE.search(text)) is not None:
        vals["process_gib"] = _gib(m.group(1), m.group(2))
    if (m := RESERVED_RE.search(text)) is not None:
        vals["reserved_unallocated_gib"] = _gib(m.group(1), m.group(2))
    return vals


# "server_args=ServerArgs(k=v, …)" (0.2–0.5.x) or "server_args={'k': v, …}" (0.5.23): each key sglwrap reads is
# found with str.find (the line is several KB) and its value read up to the next separator.
NUM_ARGS: Final = ("mem_fraction_static", "tp_size", "chunked_prefill_size", "pp_size", "dp_size", "context_length",
                   "page_size", "nnodes", "node_rank", "cuda_graph_max_bs", "cuda_graph_max_bs_decode")
STR_ARGS: Final = ("model_path", "kv_cache_dtype", "dtype", "quantization", "speculative_algorithm", "dist_init_addr",
                   "disable_cuda_graph")


def _arg(msg: str, key: str) -> str | None:
    """The raw value of ``key`` in a server-args line (quotes kept), or None."""
    for sep in ("=", "': ", '": '):
        pos = msg.find(key + sep)
        while pos != -1:
            start = pos - (1 if sep != "=" else 0)
            if start > 0 and (msg[start - 1].isalnum() or msg[start - 1] in "_."):
                pos = msg.find(key + sep, pos + 1)
                continue
            at = pos + len(key) + len(sep)
            if at < len(msg) and msg[at] in "'\"":
                close = msg.find(msg[at], at + 1)
                return msg[at:close + 1] if close != -1 else None
            end = at
            while end < len(msg) and msg[end] not in ",)} ":
                end += 1
            return msg[at:end]
    return None


def server_args(msg: str) -> dict[str, object]:
    """The server args sglwrap reads from one ``server_args=`` line."""
    msg = msg[msg.find("server_args"):]
    vals: dict[str, object] = {}
    for key in NUM_ARGS:
        raw = _arg(msg, key)
        try:
            vals[key] = float(raw)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            pass
    if "cuda_graph_max_bs_decode" in vals:
        vals["cuda_graph_max_bs"] = vals.pop("cuda_graph_max_bs_decode")
    for key in STR_ARGS:
        v = _arg(msg, key) or ""
        if len(v) >= 2 and v[0] in "'\"" and v[-1] == v[0]:
            vals[key] = v[1:-1]
        elif key == "disable_cuda_graph" and v.lower() in ("true", "false"):
            vals[key] = v.lower() == "true"
    return vals


def _parse_context(tags: str, msg: str, out: list[Event]) -> None:
    if "server_args" in msg and SERVER_ARGS_RE.search(msg) is not None:
        out.append(Event("server_args", tags, server_args(msg)))
        return
    if ("glang" in msg or "GLang" in msg or "GLANG" in msg) and (m := VERSION_RE.search(msg)) is not None:
        out.append(Event("version", tags, {"version": m.group(1)}))
    if '"launch.exec"' in msg:  # sglwrap's own journal line: node rank, node count and the argv it exec'd
        start, end = msg.find("{"), msg.rfind("}")
        if start != -1 and end > start:
            out.append(Event("sglwrap_launch", tags, {"json": msg[start:end + 1]}))
        return
    if "worker-env" in msg:
        start, end = msg.find('{"sglwrap"'), msg.rfind("}")
        if start != -1 and end > start:
            out.append(Event("worker_env", tags, {"json": msg[start:end + 1]}))
        elif (m := WORKER_ENV_RE.search(msg)) is not None:
            out.append(Event("worker_env", tags, {"json": m.group(0)}))
