"""Outcome, stage, cause and fix: SGLang's own memory arithmetic applied to what the log says.

Formulas (research-memory §a.3, SG-0.5.23 mem_cache/kv_cache_configurator.py:2990-3060; older
model_runner.profile_max_num_token is the same algebra): P = free memory before weights (min over ranks),
A = free after weights (min), W = P − A, f = --mem-fraction-static; KV budget = P·f − W; everything after the
KV pool (CUDA graphs, activations) must fit in P·(1 − f).
"""

from __future__ import annotations

import math
import re
from typing import Final

from sglwrap.diagnose.patterns import MEMORY_TALK_RE
from sglwrap.diagnose.timeline import STAGES, Failure, NodeLog, RankMemory
from sglwrap.record import Record

MEMORY_KINDS: Final = frozenset({"no_kv", "not_enough", "negative_profile", "budget_other", "torch_oom"})
PRIORITY: Final = ("capture_failed", "no_kv", "not_enough", "negative_profile", "budget_other", "torch_oom",
                   "kv_exhausted", "unbalanced", "exception", "crash")
KV_KINDS: Final = frozenset({"no_kv", "not_enough", "negative_profile", "budget_other"})
MAX_SANE_FRACTION: Final = 0.95


class Finding(Record):
    """The verdict: outcome, stage, the error text, whether SGLang's hint is right, the cause and the fix."""

    outcome: str
    stage: str | None
    error: str | None
    hint: str | None
    hint_correct: bool | None
    cause: str
    fix: str | None
    failed: tuple[str, str] | None = None  # (node, rank label) of the failing rank, when the error line names one


class Budget(Record):
    """SGLang's KV arithmetic for the tightest rank (GiB); fields are None when the log lacks them."""

    p: float | None
    a: float | None
    w: float | None
    f: float | None

    @property
    def rest(self) -> float | None:
        """KV budget P·f − W."""
        if self.p is None or self.w is None or self.f is None:
            return None
        return self.p * self.f - self.w


def graph_flag(nodes: tuple[NodeLog, ...], version: str | None) -> str:
    """The decode CUDA-graph batch-size flag of the SGLang that wrote the log, from that release's flag table; a
    log that names no release reads as the newest known release when it is in the new log format, else the oldest."""
    from sglwrap.sglang.flags import release_flag
    from sglwrap.versions import known_releases

    if version is None and not any(n.new_format for n in nodes):
        version = known_releases()[0]
    return release_flag("cuda_graph_max_bs", version)


def budget(ranks: tuple[RankMemory, ...], f: float | None) -> Budget:
    """P, A, W over all ranks the way SGLang takes them (MIN over the world)."""
    ps, as_ = [], []
    for r in ranks:
        p = r.avail_before_weights_gib
        if p is None and r.avail_after_weights_gib is not None and r.weight_mem_gib is not None:
            p = r.avail_after_weights_gib + r.weight_mem_gib  # mem usage = before − after on the same rank
        if p is not None:
            ps.append(p)
        if r.avail_after_weights_gib is not None:
            as_.append(r.avail_after_weights_gib)
    p_min = min(ps) if ps else None
    a_min = min(as_) if as_ else None
    w = None if p_min is None or a_min is None else p_min - a_min
    return Budget(p_min, a_min, w, f)


def fatal_failures(nodes: tuple[NodeLog, ...]) -> list[Failure]:
    """Failures that ended a launch: any in a node that never came up, or after the server came up."""
    out: list[Failure] = []
    for n in nodes:
        out.extend(f for f in n.failures if (not n.came_up or f.after_up) and _is_fatal(f))
        prof = n.profiled.get("profiled")
        if prof is not None and prof <= 0 and not n.came_up:
            out.append(Failure(n.node, "", "negative_profile",
                               f"max_total_tokens={n.profiled.get('requested')} is larger than the profiled value "
                               f"{prof}", "kv_pool", False, {"profiled": prof}))
    return out


def _is_fatal(f: Failure) -> bool:
    # a bare "Traceback (most recent call last):" may be logged and survived; "<Proc> hit an exception" never is;
    # torch_memory_saver says of a failed cuMemCreate that it "may not be an issue" (the allocator retries)
    if "may not be an issue" in f.text:
        return False
    return f.kind != "crash" or "Traceback" not in f.text or "hit an exception" in f.text


def primary(failures: list[Failure]) -> Failure | None:
    """The failure that explains the outcome best (SGLang's own memory errors before generic ones)."""
    if not failures:
        return None
    # the parent's "Received sigquit from a child process" only echoes a child's failure: the child's own line wins
    return min(failures, key=lambda f: (PRIORITY.index(f.kind) if f.kind in PRIORITY else len(PRIORITY),
                                        "sigquit" in f.text))


def _stage(f: Failure) -> str:
    if f.kind in KV_KINDS:
        return "kv_pool"
    if f.kind == "capture_failed":
        return "cuda_graph"
    if f.kind == "unbalanced":
        return "init"
    if (f.kind == "kv_exhausted" or _saver_resume(f)) and f.stage != "warmup":
        return "serving"  # SGLang's batch allocators and the memory saver's resume run only on a running server
    return f.stage


def _frames(f: Failure) -> list[str]:
    """The SGLang frames ("module.function", innermost last) of the traceback the failure belongs to."""
    frames = f.values.get("frames")
    return [str(x) for x in frames] if isinstance(frames, list) else []


def _saver_resume(f: Failure) -> bool:
    """torch_memory_saver failing to map back memory released by --enable-memory-saver (resume_memory_occupation)."""
    return "torch_memory_saver" in f.text and "resume" in f.text


def _is_oom(f: Failure) -> bool:
    return f.kind in MEMORY_KINDS or (f.kind == "capture_failed" and bool(f.values.get("oom")))


def decide(nodes: tuple[NodeLog, ...], ranks: tuple[RankMemory, ...], version: str | None) -> Finding:
    """The whole verdict for a set of node logs."""
    failures = fatal_failures(nodes)
    main = primary(failures)
    args = _merged_args(nodes)
    f = args.get("mem_fraction_static")
    if main is not None and isinstance(main.values.get("f"), float):
        f = main.values["f"]
    b = budget(ranks, f if isinstance(f, float) else None)
    flag = graph_flag(nodes, version)
    if main is None:
        if any(n.came_up for n in nodes):
            return _ok(ranks, bench=all(n.bench for n in nodes if n.came_up))
        return _incomplete(nodes, ranks)
    outcome = "oom" if _is_oom(main) or any(_is_oom(x) for x in failures) else "error"
    stage = _stage(main)
    hint = _hint(failures)
    if main.kind in KV_KINDS:
        cause, fix, correct = _kv_cause(main, b, args, nodes, ranks)
    elif main.kind == "capture_failed" and not main.values.get("oom"):
        cause, fix, correct = _error_cause(main, stage)  # capture failed on something else than memory
    elif main.kind in ("capture_failed", "torch_oom"):
        cause, fix, correct = _oom_cause(main, stage, b, args, flag, failures)
    elif main.kind == "unbalanced":
        cause, fix, correct = _unbalanced_cause(ranks)
    elif main.kind == "kv_exhausted":
        cause, fix, correct = _exhausted_cause(main)
    else:
        cause, fix, correct = _error_cause(main, stage)
    if hint is None:
        correct = None
    failed = (main.node, main.label) if main.label else None
    return Finding(outcome, stage, _short(main.text), hint, correct, cause, fix, failed)


def _merged_args(nodes: tuple[NodeLog, ...]) -> dict[str, object]:
    out: dict[str, object] = {}
    for n in nodes:
        for k, v in n.server_args.items():
            out.setdefault(k, v)
    return out


def _hint(failures: list[Failure]) -> str | None:
    for f in failures:
        t = f.text
        if f.kind in ("no_kv", "not_enough"):
            return "increase --mem-fraction-static"
        if f.kind == "capture_failed" or "--cuda-graph-max-bs" in t:
            return "set --mem-fraction-static to a smaller value, or lower the CUDA-graph max batch size"
        if "expandable_segments" in t:
            return "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
        if f.kind == "unbalanced":
            return "some GPUs may be occupied by other processes"
    return None


_MARKER_RE: Final = re.compile(r"(?:^|\s)[\^~]{3,}(?=\s|$)")


def unmark(text: str) -> str:
    """``text`` without a traceback's ``^^^^``/``~~~~`` position markers (never part of an error message)."""
    return " ".join(_MARKER_RE.sub(" ", text).split()) if ("^^^" in text or "~~~" in text) else text


def _short(text: str) -> str:
    text = unmark(text.strip())
    return text if len(text) <= 600 else text[:597] + "..."


def _g(x: float) -> str:
    return f"{x:.1f}"


def sglang_reserve_gib(p: float, args: dict[str, object]) -> float:
    """SGLang 0.5.23's own estimate of what must stay outside the static pool (§a.6), in GiB."""
    cps = args.get("chunked_prefill_size")
    tp = args.get("tp_size")
    max_bs = args.get("cuda_graph_max_bs")
    mb = 512 + max(float(cps) if isinstance(cps, float) else 4096.0, 2048.0) * 1.5
    mb += (float(tp) if isinstance(tp, float) else 1.0) / 8 * 1024
    mb += 2 * (float(max_bs) if isinstance(max_bs, float) else 160.0)
    if p > 60:
        mb = max(mb, 10 * 1024)
    return mb / 1024


def _kv_cause(main: Failure, b: Budget, args: dict[str, object], nodes: tuple[NodeLog, ...],
              ranks: tuple[RankMemory, ...]) -> tuple[str, str, bool | None]:
    parts: list[str] = []
    if main.kind == "negative_profile":
        parts.append(f"SGLang profiled {main.values.get('profiled')} KV tokens: the KV budget is below zero")
    if b.p is None or b.a is None or b.w is None:
        parts.append("the log does not show free memory before and after weight loading, so the budget "
                     "cannot be recomputed")
        if b.f is not None and b.f >= 0.9:
            parts.append(f"--mem-fraction-static is already {b.f:g}: the weights for one GPU (with any draft model) "
                         "nearly fill it")
            if b.f < MAX_SANE_FRACTION:
                fix = (f"--mem-fraction-static {MAX_SANE_FRACTION:g} (the most that still leaves room for CUDA graphs); "
                       "if that fails too, reduce the per-GPU weights (more GPUs via --tp, a quantized checkpoint, a "
                       "smaller draft)")
            else:
                fix = ("reduce the per-GPU weights (more GPUs via --tp, a quantized checkpoint, a smaller draft); "
                       f"--mem-fraction-static {b.f:g} leaves nothing to raise")
            return "; ".join(parts) + ".", fix, None
        fix = ("raise --mem-fraction-static from the value this launch used" if b.f is None else
               f"raise --mem-fraction-static above {b.f:g}") + " (the log does not show by how much), or reduce " \
            "per-GPU weights (more GPUs via --tp, or quantization)"
        return ". ".join(parts) + ".", fix, None
    f = b.f
    if f is None:
        parts.append(f"weights took {_g(b.w)} GiB of the {_g(b.p)} GiB free before loading "
                     f"({_g(b.a)} GiB left); the log does not show --mem-fraction-static")
    else:
        rest = b.rest
        assert rest is not None
        parts.append(f"weights took {_g(b.w)} GiB of a {_g(b.p * f)} GiB budget ({_g(b.p)} GiB free before "
                     f"loading × --mem-fraction-static {f:g}), so at {f:g} the KV budget is {rest:+.1f} GiB")
        if rest > 0:
            parts.append("the budget from these lines is positive, so SGLang measured less free memory at KV "
                         "sizing than the weight-load lines show: it takes the minimum over all ranks and counts "
                         "anything allocated after loading (other processes, NCCL buffers, draft weights)")
    f_min = 1 - b.a / b.p if b.p > 0 else 1.0
    f_fix = math.ceil((f_min + 0.05) * 100) / 100
    if f is None:
        parts.append(f"a KV pool needs --mem-fraction-static above {f_min:.3f} (= 1 − {_g(b.a)}/{_g(b.p)}); if the "
                     f"launch already used more, memory was taken after loading (another process, DP-attention or "
                     f"NCCL buffers, draft weights) and raising the fraction cannot help")
        return "; ".join(parts) + ".", (f"if --mem-fraction-static was below {f_min:.3f}, use {f_fix:.2f}; "
                                         "otherwise reduce per-GPU weights (more GPUs via --tp, quantization) or "
                                         "free the GPUs"), None
    slack = b.p * (1 - f_fix)
    need = sglang_reserve_gib(b.p, args)
    if f_fix <= MAX_SANE_FRACTION and slack >= need:
        kv = b.p * f_fix - b.w
        parts.append(f"raising --mem-fraction-static to {f_fix:.2f} fixes the KV pool ({_g(kv)} GiB) and leaves "
                     f"{_g(slack)} GiB for CUDA graphs and activations (SGLang's own reserve for these settings "
                     f"is about {_g(need)} GiB)")
        fix = f"--mem-fraction-static {f_fix:.2f}"
        correct: bool | None = True
    else:
        parts.append(f"even --mem-fraction-static {f_fix:.2f} (the minimum {f_min:.3f} plus room for a small KV "
                     f"pool) leaves only {_g(slack)} GiB for CUDA graphs and activations, below the "
                     f"{_g(need)} GiB SGLang reserves for them, so raising the fraction only moves the failure to "
                     f"graph capture or the first request")
        fix = ("reduce the per-GPU weights: more GPUs (--tp), a quantized checkpoint, or free the GPUs of other "
               "processes; then keep --mem-fraction-static ≤ 0.9")
        correct = False
    if f is not None and f >= 0.9 and correct is False:
        parts.append(f"the fraction is already {f:g}: there is nothing left to raise")
    return "; ".join(parts) + ".", fix, correct


def _oom_cause(main: Failure, stage: str, b: Budget, args: dict[str, object], flag: str,
               failures: list[Failure]) -> tuple[str, str, bool | None]:
    v = main.values
    said_increase = any(x.kind in ("no_kv", "not_enough") for x in failures)
    tried = v.get("tried_gib")
    free = v.get("free_gib")
    dev = {"NPU": "NPU", "HIP": "GPU (ROCm/HIP)", "MUSA": "GPU (MUSA)", "XPU": "XPU"}.get(str(v.get("device")), "GPU")
    unit = dev if dev in ("NPU", "XPU") else "GPU"
    what = f"ran out of {dev} memory"
    if isinstance(tried, float):
        what += f" trying to allocate {tried:.2f} GiB"
    if isinstance(free, float):
        what += f" with {free:.2f} GiB free"
        if isinstance(v.get("total_gib"), float):
            what += f" of {v['total_gib']:.2f} GiB on {unit} {v.get('gpu')}"
    slack = None if b.p is None or b.f is None else b.p * (1 - b.f)
    max_bs = args.get("cuda_graph_max_bs")
    user_bs = int(max_bs) if isinstance(max_bs, float) else None
    new_bs = user_bs // 2 if user_bs is not None and user_bs >= 2 else None
    frames = " ".join(_frames(main))
    if _saver_resume(main):
        cause = (f"resuming the memory released with --enable-memory-saver (resume_memory_occupation) {what}: "
                 f"whatever used the {unit} while SGLang was paused (a colocated trainer, another engine) had not "
                 "freed it yet")
        fix = (f"resume SGLang only after the other process has released its {unit} memory (offload or free the "
               "trainer's tensors first); SGLang's own settings are not the cause")
        return cause + ".", fix, None
    if "offload" in frames:
        cause = (f"the CPU-offload path (--cpu-offload-gb, {frames.split()[-1]}) {what} while moving weights to "
                 "pinned host memory: a pinned (page-locked) host allocation that fails is reported as the "
                 "device's 'out of memory' too, so this can be the host's locked-memory limit rather than the GPU")
        fix = ("lower --cpu-offload-gb, or raise the locked-memory limit of the container (docker --ulimit "
               "memlock=-1, ulimit -l unlimited) and its shared memory")
        return cause + ".", fix, None
    if stage == "cuda_graph":
        cause = f"CUDA-graph capture {what}"
        if slack is not None:
            cause += (f"; everything after the KV pool must fit in P·(1−f) = {_g(b.p or 0)} × {1 - (b.f or 0):.2f} "
                      f"= {_g(slack)} GiB")
        if said_increase:
            cause = ("the error says increase the fraction but the failure is in CUDA-graph capture: lower the "
                     "decode CUDA-graph max batch size instead; " + cause)
        if new_bs is not None:
            fix = (f"{flag} {new_bs} (half of {user_bs}; or lower "
                   "--mem-fraction-static by 0.03-0.05 to give the graphs more room)")
        else:
            fix = (f"halve {flag} from the value this launch used (the log does not show it; SGLang picks it from the "
                   "GPU memory and TP size), or lower --mem-fraction-static by 0.03-0.05 to give the graphs more room")
        correct = not said_increase
    elif stage == "weight_load" or (stage == "init" and b.p is not None):
        cause = (f"loading weights {what}: the weights for one {unit} do not fit in its free memory, and "
                 f"--mem-fraction-static plays no part before the KV pool")
        fix = f"more {unit}s (--tp), a quantized checkpoint, or free the {unit} of other processes"
        correct = False
    elif stage == "init":
        cause = (f"the server {what} before the log shows any startup step, so it cannot tell whether weights, "
                 "the KV pool or CUDA graphs were being set up")
        fix = (f"read the lines before the error (the step that was running), and compare the {unit}'s free "
               "memory with the model's per-device weights")
        correct = None
    elif stage == "kv_pool" and isinstance(tried, float) and isinstance(v.get("total_gib"), float) \
            and tried > float(v["total_gib"]):  # type: ignore[arg-type]
        cause = (f"allocating the KV pool {what}: the pool SGLang sized is larger than the whole {unit}, so its "
                 "sizing for this model or backend is wrong, not the free memory")
        fix = ("cap the pool with --max-total-tokens (or --context-length / a lower --mem-fraction-static) and report "
               "the sizing with the model and backend")
        correct = False
    elif stage == "kv_pool":
        cause = (f"allocating the KV pool {what}: the pool SGLang sized did not fit when it was allocated (free "
                 "memory dropped after SGLang measured it: another process or a rank with less memory)")
        fix = "lower --mem-fraction-static by 0.05, and check the GPUs for other processes"
        correct = not said_increase
    else:
        cause = f"at {stage} the server {what} outside the static pool"
        if slack is not None:
            cause += f"; the runtime slack P·(1−f) was {_g(slack)} GiB"
        new_f = None if b.f is None else round(b.f - 0.05, 2)
        fix = (f"--mem-fraction-static {new_f}" if new_f else "lower --mem-fraction-static by 0.05 from the value "
               "this launch used (the log does not show it)") + \
              ", or lower --chunked-prefill-size / --max-running-requests"
        correct = not said_increase
    reserved = v.get("reserved_unallocated_gib")
    if main.kind == "torch_oom" and "expandable_segments" in main.text and not said_increase:
        correct = isinstance(reserved, float) and isinstance(tried, float) and reserved >= tried
    return cause + ".", fix, correct


def _unbalanced_cause(ranks: tuple[RankMemory, ...]) -> tuple[str, str, bool | None]:
    frees = [(r.avail_before_weights_gib, r.label) for r in ranks if r.avail_before_weights_gib is not None]
    cause = "SGLang refused to start because the GPUs' free memory differs by more than 10%"
    if len(frees) >= 2:
        lo, hi = min(frees), max(frees)
        cause += f" ({lo[1]} {lo[0]:.2f} GiB vs {hi[1]} {hi[0]:.2f} GiB free)"
    cause += "; this is either another process on a GPU or GPUs of different sizes"
    return cause + ".", "free the GPUs (nvidia-smi) or set SGLANG_ENABLE_TP_MEMORY_INBALANCE_CHECK=0 for mixed GPUs", None


_RESOURCE_RE: Final = re.compile(r"out of resource: ([\w ]+?), Required: (\d+), Hardware limit: (\d+)")


_HEADER_ONLY_RE: Final = re.compile(
    r"(?:hit an exception:?|Exception in [^:]{1,80}:)\s*(?:Traceback \(most recent call last\):?)?\s*$"
    r"|^Traceback \(most recent call last\):?\s*$"
)


def header_only(f: Failure) -> bool:
    """A crash report whose exception line is not in the log: the excerpt ends inside the traceback."""
    return f.kind == "crash" and _HEADER_ONLY_RE.search(unmark(f.text).strip()) is not None


def _exhausted_cause(main: Failure) -> tuple[str, str, bool | None]:
    text = unmark(main.text)
    pool = "request-slot pool" if "req_slots" in text or "request slots" in text else "KV-cache token pool"
    cause = (f"SGLang's {pool} had no room for the next batch while serving (\"{_short(text)[:160]}\"): this is "
             "SGLang's own accounting of the pool it sized at startup, not a failed device allocation; when the "
             "message shows free room in the pool, it is a scheduler bug (paged or overlap allocation)")
    fix = ("lower --max-running-requests or --chunked-prefill-size so fewer tokens are scheduled at once; if the "
           "pool had room, retry with --disable-overlap-schedule (and a page size of 1 where the release takes one) and "
           "report it")
    return cause + ".", fix, None


def _error_cause(main: Failure, stage: str) -> tuple[str, str, bool | None]:
    exc = main.values.get("exc")
    name = f"{exc}" if exc else "an error"
    where = stage.replace("_", " ")
    text = unmark(main.text)
    if header_only(main):
        frames = _frames(main)
        last = f" (the last SGLang frame shown: {frames[-1]})" if frames else ""
        cause = (f"SGLang stopped during {where}, but the log is cut off inside the traceback{last}: the exception "
                 "line that says what failed is not in it")
        return cause + ".", "find the rest of the traceback: its last line names the error", None
    if (m := _RESOURCE_RE.search(text)) is not None:
        cause = (f"a Triton kernel asked for {m.group(2)} bytes of {m.group(1)} per block and this GPU allows "
                 f"{m.group(3)} (OutOfResources during {where}): a memory error of the GPU's on-chip "
                 f"{m.group(1)}, not of its global memory, so --mem-fraction-static and the KV pool play no part")
        fix = ("use a kernel/backend built for this GPU (another --attention-backend, or an SGLang release that "
               "tunes this kernel for it); Triton's own advice is smaller block sizes or num_stages")
    elif "illegal memory access" in text or "misaligned address" in text:
        cause = (f"SGLang stopped with {name} during {where}: a kernel touched memory it does not own (a memory "
                 f"access fault: a kernel bug or a kernel not built for this GPU, not a lack of free memory)")
        fix = "rerun with CUDA_LAUNCH_BLOCKING=1 to find the kernel; try another --attention-backend or SGLang release"
    elif "device-side assert" in text:
        cause = (f"SGLang stopped with {name} during {where}: a kernel hit a device-side assertion (a kernel bug, or an "
                 f"input it does not accept such as an out-of-range token id or shape), not a lack of memory")
        fix = ("rerun with CUDA_LAUNCH_BLOCKING=1 to find the kernel and the request; try another --attention-backend "
               "or SGLang release")
    elif main.kind == "capture_failed":
        said = unmark(str(main.values.get("msg") or text)).strip()
        cause = (f"CUDA-graph capture failed on something other than memory: \"{_short(said)[:200]}\"; SGLang's "
                 "advice to lower --mem-fraction-static or the graph batch size does not apply to it")
        if "ptxas" in text or "PTX" in text or "sm_" in text:
            cause += " (the kernel compiler does not support this GPU's architecture)"
        return cause + ".", ("run with --disable-cuda-graph to confirm, then use a Triton/SGLang build that supports "
                             "this GPU (or another --attention-backend)"), False
    elif "Errno 12" in text or "Cannot allocate memory" in text:
        cause = (f"SGLang stopped with {name} during {where}: the host ran out of memory (ENOMEM, \"Cannot allocate "
                 "memory\"): CPU RAM, shared memory or a memory cgroup limit, not GPU memory")
        fix = ("check the host's free memory and the container's limits (--memory, --shm-size); with several GPUs each "
               "scheduler process needs its own host memory")
    elif main.values.get("memory") or MEMORY_TALK_RE.search(text) is not None:
        msg = str(main.values.get("msg") or text).strip()
        cause = (f"SGLang stopped with {name} during {where}: \"{_short(msg)[:200]}\"; the message is about memory, "
                 f"but it is neither one of SGLang's KV-budget errors nor a CUDA out-of-memory, so the startup's "
                 f"free-memory readings alone do not explain it")
        fix = "read the traceback above the error line; the memory it names is the one to free or enlarge"
    else:
        said = str(main.values.get("msg") or "").strip()
        if said and exc:
            name = f"{exc} (\"{_short(said)[:160]}\")"
        cause = f"SGLang stopped with {name} during {where}; this is not a memory error"
        fix = "read the traceback above the error line"
    if stage == "warmup":
        cause += " (the warmup request after startup failed)"
    return cause + ".", fix, None


def _incomplete(nodes: tuple[NodeLog, ...], ranks: tuple[RankMemory, ...]) -> Finding:
    if not ranks and not any(n.saw_sglang for n in nodes):
        return Finding("incomplete", None, None, None, None,
                       "no SGLang startup lines were found in the input.", None)
    # the furthest step the log shows: a rank's progress lines, or the frames of a traceback cut before its error
    seen = [r.stage for r in ranks] + [f.stage for n in nodes for f in n.failures]
    cut = [n.traceback_stage for n in nodes if n.traceback_stage]
    seen += cut
    stage = max(seen, key=STAGES.index) if seen else "init"
    if stage in cut:
        cause = (f"the log ends inside a traceback whose SGLang frames are in {stage.replace('_', ' ')}: its error "
                 "line is not in the log (an excerpt cut short), so what failed cannot be told")
        return Finding("incomplete", stage, None, None, None, cause + ".",
                       "find the rest of the traceback: its last line names the error")
    cause = (f"the log ends during {stage.replace('_', ' ')} with no error line and no 'server is fired up': "
             "the process was killed (OOM killer, timeout, Ctrl-C) or the log is cut off")
    return Finding("incomplete", stage, None, None, None, cause + ".",
                   "look for the rest of the log (journalctl, dmesg for the OOM killer)")


def _ok(ranks: tuple[RankMemory, ...], bench: bool = False) -> Finding:
    parts = ["the benchmark run completed" if bench else "the server came up"]
    kv = [r for r in ranks if r.kv_tokens is not None]
    if kv:
        r = min(kv, key=lambda x: x.kv_tokens or 0)
        size = f" ({r.kv_size_gib:.2f} GiB)" if r.kv_size_gib is not None else ""
        parts.append(f"KV pool {r.kv_tokens} tokens{size}")
    graphs = [r.cuda_graph_mem_gib for r in ranks if r.cuda_graph_mem_gib is not None]
    if graphs:
        parts.append(f"CUDA graphs {max(graphs):.2f} GiB")
    finals = [(r.avail_final_gib, r.label) for r in ranks if r.avail_final_gib is not None]
    if finals:
        lo = min(finals)
        parts.append(f"{lo[0]:.2f} GiB free at the end on {lo[1]}")
    return Finding("ok", "serving", None, None, None, ", ".join(parts) + ".", None)
