"""The budget in SGLang's own order: P before weights, W, KV = P*f - W, tokens, then the runtime slack P*(1-f).

Formulas: ``srt/mem_cache/kv_cache_configurator.py:2990-3060`` (``_profile_available_bytes``),
``srt/model_executor/pool_configurator.py:637-647`` (tokens) and ``:85-99`` (the "Not enough memory" check),
``kv_cache_configurator.py:3119-3172`` (max running requests -> req_to_token). All sizes are bytes per rank on
the most constrained rank (SGLang takes the minimum over ranks). The empirical terms (overhead before weights,
NCCL at init, decode graphs, non-parameter weight buffers) come from ``fits`` with the ± of their fit; every
derived quantity carries its ± (root-sum-square of independent terms).
"""

from __future__ import annotations

from sglwrap.memory.args import ServerArgs
from sglwrap.memory.cells import Cell
from sglwrap.memory.defaults import Resolved
from sglwrap.memory.fits import Term, exact, rss
from sglwrap.memory.mamba import MambaPool, min_rest_bytes, size_pool, state_slots_per_request, too_few_requests_error
from sglwrap.memory.model import ModelShape
from sglwrap.memory.nccl import NcclCost
from sglwrap.memory.swa import SwaPool, split_pool
from sglwrap.memory.weights import Weights
from sglwrap.record import Record, field

MIB = 1 << 20
GIB = 1 << 30
CUDA_CONTEXT_BYTES = int(528.875 * MIB)  # measured: torch 2.11 + CUDA 13 on H200 (shared/docs/measurements-h200.md)
DRIVER_RESERVED_BYTES = int((143771 - 143155.9375) * MIB)  # nvidia-smi total - cudaMemGetInfo total, H200
VLM_CACHE_BYTES = 100 * MIB  # SGLANG_VLM_CACHE_SIZE_MB default (kv_cache_configurator.py:202-219)
SYMM_MEM_BYTES = 4 * GIB  # --enable-symm-mem preallocation (memory_hook.py:349-353)
CUSTOM_AR_BYTES = 3 * 8 * MIB  # custom all-reduce IPC buffers, ~3 x _MAX_CAR_SIZE (custom_all_reduce.py:42-140)
OBSERVED_PM = int(0.01 * GIB)  # SGLang prints GiB with two decimals


class Terms(Record):
    """The terms ``plan`` resolves before the budget: the fitted ones with their ±, and the modelled extras."""

    overhead: Term = field(default_factory=lambda: exact(DRIVER_RESERVED_BYTES + CUDA_CONTEXT_BYTES, "H200"))
    nccl_init: Term | None = None  # None: the NCCL model's own figure, ± 0
    decode_graphs: Term | None = None  # None: no decode graphs
    weights_extra: Term = field(default_factory=lambda: exact(0, "none"))
    draft_weights: Term = field(default_factory=lambda: exact(0, "no draft model"))
    draft_in_weights: bool = True  # SGLang >= 0.5.14 loads the draft before sizing the KV pool
    draft_graphs: Term = field(default_factory=lambda: exact(0, "no draft model"))
    deepep: Term = field(default_factory=lambda: exact(0, "no DeepEP"))
    lora: Term = field(default_factory=lambda: exact(0, "no LoRA"))
    weights_rel_pm: float = 0.0  # relative ± of W computed from parameters


class Observed(Record):
    """Numbers read off a real run, replacing the predicted P (free before weights) and W (weights)."""

    avail_before_weights_bytes: int | None = None
    weights_bytes: int | None = None


class Budget(Record):
    """Every term of one rank's budget, in bytes, and the derived pool."""

    gpu_total: int
    driver_reserved: int
    cuda_context: int
    other_processes: int
    nccl_init: int
    custom_allreduce: int
    pre_weights_free: int  # P
    p_source: str
    weights: int  # W
    w_source: str
    mem_fraction_static: float
    mfs_source: str
    static_limit: int  # P*f
    mm_reserve: int
    kv_budget: int  # P*f - W - mm  (SGLang's rest_memory)
    cell_bytes: int
    page_size: int
    kv_tokens: int
    kv_pool: int
    slack: int  # P*(1-f)
    req_to_token: int
    decode_graphs: int
    prefill_graphs: int
    activations: int
    nccl_late: int
    symm_mem: int
    runtime_need: int
    max_running_requests: int
    context_len: int
    min_mem_fraction_static: float
    sglang_suggested_mfs: float | None  # what 0.5.23's error would print
    notes: tuple[str, ...] = field(default=())
    swa_tokens: int | None = None  # hybrid SWA: tokens of the SWA pool (kv_tokens is then the full pool's)
    swa_error: str | None = None  # hybrid SWA: SGLang's rejection of a pool too small for one window
    swa_cell: float | None = None  # hybrid SWA: bytes per full token incl. the ratio's SWA share
    mamba: MambaPool | None = None  # mamba / linear-attention hybrid: the state pool sized before the KV pool
    mamba_error: str | None = None  # SGLang's RuntimeError for a state pool too small (K <= 0 or K // ratio = 0)
    mamba_error_sure: bool = True  # the error stands at the KV budget's + its ± too (else it is within the ±)
    mamba_state: int = 0  # bytes of the state pool ((K + 1) x per request), taken from rest before the KV pool
    overhead: int = 0  # driver reserve + CUDA context + torch before NCCL (fitted per GPU family)
    p_pm: int = 0  # ± of P
    w_pm: int = 0  # ± of W
    kv_pm: int = 0  # ± of the KV budget: f x ±P and ±W
    slack_pm: int = 0  # ± of the slack: (1 - f) x ±P
    need_pm: int = 0  # ± of the runtime need
    draft_weights: int = 0  # speculative draft model weights (inside W from SGLang 0.5.14, else in the need)
    draft_graphs: int = 0
    deepep: int = 0  # DeepEP / NVSHMEM buffers, created at the first MoE dispatch (after KV sizing)
    lora: int = 0  # LoRA adapter buffers (allocated before the KV pool is sized: they come out of P*f)
    lora_pm: int = 0  # ± of the LoRA buffers (all of them when the adapters' rank is not known)
    weights_peak: int = 0  # the loading peak per rank when it exceeds W (online quantisation of a 16-bit checkpoint)
    term_sources: tuple[tuple[str, str], ...] = ()

    @property
    def kv_tokens_pm(self) -> int:
        """± of the KV token count."""
        return self.kv_pm // max(1, self.cell_bytes)

    @property
    def margin_pm(self) -> int:
        """± of the runtime margin (slack - need)."""
        return rss(self.slack_pm, self.need_pm)

    @property
    def runtime_free(self) -> int:
        """What the slack keeps after everything allocated after the KV pool."""
        return self.slack - self.runtime_need


def _max_reqs(args: ServerArgs, tokens: int, context_len: int, mamba: MambaPool | None = None) -> int:
    """``resolve_max_num_reqs`` (kv_cache_configurator.py:3119-3172), without the floor of 1 when the mamba
    state cap K // ratio drives it to 0 (SGLang then raises)."""
    estimated = min(max(int(tokens / max(1, context_len) * 512), 2048), 4096)
    cap = args.max_running_requests // max(1, args.attn_dp_size) if args.max_running_requests else estimated
    reqs = max(1, min(cap, max(1, tokens // 2)))
    if mamba is not None and mamba.error is None:
        reqs = min(reqs, mamba.slots // max(1, mamba.slots_per_request))
    return reqs


def _activations(shape: ModelShape, args: ServerArgs, cps: int) -> int:
    """Peak prefill activations for one chunk: tokens x widest per-rank layer x bf16 x 4 live buffers + 256 MiB
    of attention metadata. An estimate (documented in docs/memory-model.md), not SGLang's formula."""
    tokens = max(cps, 2048) if cps > 0 else 2048
    inter = shape.moe_intermediate_size * 8 if shape.is_moe else shape.intermediate_size
    width = max(shape.hidden_size, 2 * inter // max(1, args.tp_size))
    return tokens * width * 2 * 4 + 256 * MIB


def compute(*, shape: ModelShape, args: ServerArgs, resolved: Resolved, cell: Cell, weights: Weights,
            gpu_total: int, other_processes: int, nccl: NcclCost, p2p: bool, observed: Observed,
            terms: Terms | None = None) -> Budget:
    """One rank's budget; ``gpu_total`` is the smallest GPU's nvidia-smi total in bytes."""
    t = terms or Terms()
    notes: list[str] = []
    world_tp = args.tp_size
    nccl_t = _nccl_init(t, args, nccl)
    nccl_init = nccl_t.bytes
    # a TP group across nodes: SGLang disables custom all-reduce ("this process group spans across nodes",
    # 0.5.23 custom_all_reduce_utils.py:462)
    custom_ar = CUSTOM_AR_BYTES if (world_tp > 1 and p2p and not args.disable_custom_all_reduce
                                    and not args.tp_spans_nodes) else 0
    if observed.avail_before_weights_bytes is not None:
        p = observed.avail_before_weights_bytes
        p_source = "observed (--avail-before-weights-gib)"
        p_pm = OBSERVED_PM
    else:
        p = gpu_total - t.overhead.bytes - nccl_init - custom_ar - other_processes
        p_source = "predicted"
        p_pm = rss(t.overhead.pm, nccl_t.pm)
    draft_w = t.draft_weights.bytes
    w, w_source, w_pm = _weights_term(t, weights, observed)
    # online quantisation loads the 16-bit model first (weights.online_load_peak); with W observed it is unknown
    w_peak = w if observed.weights_bytes is not None else w - weights.per_rank_bytes + weights.peak_bytes
    f = resolved.mem_fraction_static
    mm = VLM_CACHE_BYTES if shape.is_multimodal else 0
    static_limit = int(p * f)
    # LoRA buffers: model_runner initialises the LoRA manager after loading and before sizing the KV pool (0.3.6
    # model_runner.py:153-165, 0.5.23 :733 "before the KV cache is sized"), so they come out of the KV budget
    lora = t.lora.bytes
    rest = static_limit - w - mm - lora
    kv_pm = rss(f * p_pm, w_pm, t.lora.pm)
    mpool = _mamba_pool(cell, rest, args) if cell.mamba is not None else None
    mamba_error = mpool.error if mpool is not None else None
    # a failure of the state pool is sure only when the budget at the top of its ± fails too (an unknown LoRA rank
    # carries ± all of its buffers: it widens the verdict instead of deciding it)
    mamba_sure = mpool is None or _mamba_fails(_mamba_pool(cell, rest + int(kv_pm), args))
    if mpool is not None and args.speculative_algorithm and (args.max_running_requests is None
                                                             or args.speculative_num_draft_tokens is None):
        notes.append("speculative decoding's intermediate mamba state (kv_cache_configurator.py:3357-3380) is not "
                     "reserved: pass --max-running-requests and --speculative-num-draft-tokens to model it")
    if mpool is not None and mpool.error is None:
        rest = mpool.rest_after  # kv_cache_configurator.py:3040, what the KV pool is sized from
    pool = _swa_pool(cell, rest, args) if cell.swa is not None else None
    tokens, kv_pool = _kv_tokens(cell, rest, args, pool, notes)
    context_len = args.context_length or shape.context_len
    reqs = _max_reqs(args, tokens, context_len, mpool)
    if mpool is not None and mamba_error is None and reqs <= 0:
        mamba_error = too_few_requests_error(mpool.slots, mpool.slots_per_request, reqs)
    reqs = max(1, reqs)
    req_to_token = (reqs + 1) * context_len * 4
    graphs_t = t.decode_graphs if (resolved.decode_graph and t.decode_graphs is not None) else exact(0, "off")
    decode_graphs = graphs_t.bytes
    prefill_graphs = (1536 * MIB if shape.is_mla else 8 * MIB * resolved.prefill_graph_sizes) \
        if resolved.prefill_graph else 0
    acts = _activations(shape, args, resolved.chunked_prefill_size)
    late = nccl.per_comm_bytes if world_tp > 1 else 0  # torch ProcessGroupNCCL, created at first eager collective
    symm = SYMM_MEM_BYTES if args.enable_symm_mem else 0
    slack = p - static_limit
    draft_late = 0 if t.draft_in_weights else draft_w
    draft_graphs = t.draft_graphs.bytes if resolved.decode_graph else 0
    need = (req_to_token + decode_graphs + prefill_graphs + acts + late + symm + draft_late + draft_graphs
            + t.deepep.bytes)
    # prefill graphs: SGLang's own reserve, unmeasured here (± all of it); activations: an estimate (± half)
    need_pm = rss(graphs_t.pm, prefill_graphs, acts // 2, t.deepep.pm,
                  t.draft_graphs.pm if resolved.decode_graph else 0, 0 if t.draft_in_weights else t.draft_weights.pm)
    slack_pm = int((1 - f) * p_pm)
    min_pool = _min_pool_bytes(cell, args.page_size)
    if mpool is not None:
        min_pool = min_rest_bytes(mpool, cell.bytes_per_token * args.page_size)
    min_f = (w + mm + lora + min_pool) / p if p > 0 else 1.0
    suggested = None
    if p > 0 and rest <= 0:
        import math

        suggested = math.ceil((1 - (p - w - lora) / p) * 1000) / 1000
    return Budget(
        gpu_total=gpu_total, driver_reserved=_driver(t, observed), cuda_context=_context(t, observed), other_processes=other_processes, nccl_init=nccl_init,
        custom_allreduce=custom_ar, pre_weights_free=p, p_source=p_source, weights=w, w_source=w_source,
        mem_fraction_static=f, mfs_source=resolved.mfs_source, static_limit=static_limit, mm_reserve=mm,
        kv_budget=rest, cell_bytes=cell.bytes_per_token, page_size=args.page_size, kv_tokens=tokens,
        kv_pool=kv_pool, slack=slack, req_to_token=req_to_token,
        decode_graphs=decode_graphs, prefill_graphs=prefill_graphs, activations=acts, nccl_late=late,
        symm_mem=symm, runtime_need=need, max_running_requests=reqs, context_len=context_len,
        min_mem_fraction_static=min_f, sglang_suggested_mfs=suggested, notes=tuple(notes),
        swa_tokens=None if pool is None else pool.swa_tokens, swa_error=None if pool is None else pool.error,
        swa_cell=None if pool is None else pool.cell, mamba=mpool, mamba_error=mamba_error,
        mamba_error_sure=mamba_error is None or mamba_sure,
        mamba_state=mpool.state_bytes if mpool is not None and mpool.error is None else 0,
        overhead=t.overhead.bytes if observed.avail_before_weights_bytes is None else 0, p_pm=p_pm, w_pm=w_pm,
        kv_pm=int(kv_pm), slack_pm=slack_pm, need_pm=need_pm, draft_weights=draft_w, draft_graphs=draft_graphs,
        deepep=t.deepep.bytes, lora=lora, lora_pm=t.lora.pm, weights_peak=w_peak if w_peak > w else 0,
        term_sources=(("overhead", t.overhead.source), ("nccl_init", nccl_t.source),
                      ("decode_graphs", graphs_t.source), ("weights_extra", t.weights_extra.source),
                      ("draft_weights", t.draft_weights.source), ("draft_graphs", t.draft_graphs.source),
                      ("deepep", t.deepep.source), ("lora", t.lora.source)))


def _nccl_init(t: Terms, args: ServerArgs, nccl: NcclCost) -> Term:
    """NCCL's memory at init: none on one rank, else the fitted term (or the NCCL model) plus channel buffers per
    communicator (one for TP, one for PP)."""
    comms = (1 if args.tp_size > 1 else 0) + (1 if args.pp_size > 1 else 0)
    if not comms:
        return exact(0, "single rank: no NCCL communicator")
    if t.nccl_init is not None:
        return Term(t.nccl_init.bytes + comms * nccl.per_comm_bytes, t.nccl_init.pm,
                    f"{t.nccl_init.source} + {comms} x channel buffers")
    return exact(nccl.process_fixed_bytes + comms * nccl.per_comm_bytes, "NCCL model")


def _weights_term(t: Terms, weights: Weights, observed: Observed) -> tuple[int, str, int]:
    """W, what one rank's weights take: observed (``--weights-gib``) or predicted, plus a draft model loaded with
    them; ``(bytes, source, ±)``."""
    if observed.weights_bytes is not None:
        w, w_source = observed.weights_bytes, "observed (--weights-gib)"
        w_pm = OBSERVED_PM
    else:
        w = weights.per_rank_bytes + t.weights_extra.bytes
        w_source = weights.source + (" + fitted non-parameter buffers" if t.weights_extra.bytes else "")
        w_pm = rss(t.weights_extra.pm, t.weights_rel_pm * weights.per_rank_bytes)
    if t.draft_weights.bytes and t.draft_in_weights:
        w += t.draft_weights.bytes
        w_pm = rss(w_pm, t.draft_weights.pm)
        w_source += " + draft model"
    return w, w_source, w_pm


def _kv_tokens(cell: Cell, rest: int, args: ServerArgs, pool: SwaPool | None, notes: list[str]) -> tuple[int, int]:
    """``(max_total_tokens, KV pool bytes)`` on ``rest`` bytes, in whole pages, capped by --max-total-tokens (a
    note says so)."""
    if pool is not None:
        if args.max_total_tokens is not None and pool.max_total_tokens >= args.max_total_tokens:
            notes.append(f"--max-total-tokens {args.max_total_tokens} caps the pool below what fits")
        return pool.max_total_tokens, pool.pool_bytes
    tokens = rest // cell.bytes_per_token if rest > 0 and cell.bytes_per_token else 0
    tokens = tokens // args.page_size * args.page_size
    if args.max_total_tokens is not None and tokens > args.max_total_tokens:
        tokens = args.max_total_tokens
        notes.append(f"--max-total-tokens {args.max_total_tokens} caps the pool below what fits")
    return tokens, tokens * cell.bytes_per_token


def _driver(t: Terms, observed: Observed) -> int:
    """The driver's share of the fitted overhead (the H200 measurement, at most the whole overhead)."""
    return 0 if observed.avail_before_weights_bytes is not None else min(DRIVER_RESERVED_BYTES, t.overhead.bytes)


def _context(t: Terms, observed: Observed) -> int:
    """CUDA context and torch: the fitted overhead beyond the driver's share."""
    return 0 if observed.avail_before_weights_bytes is not None else t.overhead.bytes - _driver(t, observed)


def _mamba_fails(pool: MambaPool) -> bool:
    """Whether SGLang rejects this state pool: K <= 0, or K // ratio leaves no request (``_max_reqs``)."""
    if pool.error is not None:
        return True
    return pool.slots // max(1, pool.slots_per_request) <= 0


def _mamba_pool(cell: Cell, rest: int, args: ServerArgs) -> MambaPool:
    """The state pool of a mamba / linear-attention hybrid (mamba.size_pool) on ``rest`` bytes."""
    mc = cell.mamba
    assert mc is not None
    spec = bool(args.speculative_algorithm)
    overlap = not args.disable_overlap_schedule
    slots = state_slots_per_request(disable_radix_cache=args.disable_radix_cache,
                                    strategy=args.mamba_radix_cache_strategy, overlap=overlap,
                                    page_size=args.page_size)
    return size_pool(rest, per_req=mc.per_request_bytes, ratio=args.mamba_full_memory_ratio,
                     max_mamba_cache_size=args.max_mamba_cache_size, disable_radix_cache=args.disable_radix_cache,
                     max_running_requests=args.max_running_requests, attn_dp=args.attn_dp_size,
                     draft_tokens=args.speculative_num_draft_tokens if spec else None, slots_per_request=slots)


def _swa_pool(cell: Cell, rest: int, args: ServerArgs) -> SwaPool:
    """The hybrid SWA split of ``rest`` bytes (swa.split_pool)."""
    sc = cell.swa
    assert sc is not None
    return split_pool(full_per=sc.full_per_layer, swa_per=sc.swa_per_layer, full_layers=sc.full_layers,
                      swa_layers=sc.swa_layers, ratio=sc.ratio, available=rest, page_size=args.page_size,
                      window=sc.window, draft_full_layers=sc.draft_full_layers, max_tokens=args.max_total_tokens)


def _min_pool_bytes(cell: Cell, page: int) -> float:
    """Smallest KV budget SGLang accepts: one page, and for hybrid SWA an SWA pool above window + page
    (``pool_configurator.py:198-216``)."""
    sc = cell.swa
    if sc is None:
        return float(cell.bytes_per_token * page)
    unit = sc.full_per_layer * (sc.full_layers + sc.draft_full_layers) + sc.ratio * sc.swa_per_layer * sc.swa_layers
    if not sc.full_layers:
        return float((sc.swa_per_layer * sc.swa_layers + sc.full_per_layer * sc.draft_full_layers) * page)
    if sc.window is None:
        return unit * page
    swa_min = ((sc.window + page) // page + 1) * page  # smallest page-aligned SWA pool above window + page
    full_min = -(-int(swa_min / sc.ratio + 1) // page) * page
    return unit * full_min

