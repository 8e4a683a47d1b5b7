"""The few SGLang server arguments the memory budget depends on, read the way SGLang's argparse reads them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sglwrap.errors import ArgValueError, UsageError
from sglwrap.record import Record, field
from sglwrap.sglang.cmdline import SglangCmdline, cmdline_for

# dest -> how the value is converted; everything else in the argv is ignored here.
_INT = ("tp_size", "pp_size", "dp_size", "nnodes", "attn_dp_size", "ep_size", "context_length", "cuda_graph_max_bs_decode",
        "cuda_graph_max_bs", "chunked_prefill_size", "max_running_requests", "page_size", "max_total_tokens",
        "speculative_num_draft_tokens", "max_mamba_cache_size")
_FLOAT = ("mem_fraction_static", "swa_full_tokens_ratio", "mamba_full_memory_ratio")
_STR = ("model_path", "kv_cache_dtype", "quantization", "dtype", "speculative_algorithm",
        "speculative_draft_model_path", "cuda_graph_backend_decode", "cuda_graph_backend_prefill",
        "mamba_ssm_dtype", "mamba_radix_cache_strategy")
_BOOL = ("enable_dp_attention", "disable_cuda_graph", "disable_decode_cuda_graph", "disable_prefill_cuda_graph",
         "disable_custom_all_reduce", "enable_symm_mem", "enable_nccl_nvls", "disable_hybrid_swa_memory",
         "disable_radix_cache", "disable_overlap_schedule")


class ServerArgs(Record):
    """SGLang settings that move the memory budget; None means "SGLang's default"."""

    model_path: str
    tp_size: int = 1
    pp_size: int = 1
    dp_size: int = 1
    attn_dp_size: int = 1
    ep_size: int = 1
    nnodes: int = 1
    mem_fraction_static: float | None = None
    kv_cache_dtype: str = "auto"
    context_length: int | None = None
    cuda_graph_max_bs: int | None = None
    decode_graph: bool = True
    prefill_graph: bool = True
    chunked_prefill_size: int | None = None
    max_running_requests: int | None = None
    max_total_tokens: int | None = None
    page_size: int = 1
    quantization: str | None = None
    dtype: str = "auto"
    speculative_algorithm: str | None = None
    speculative_draft_model_path: str | None = None
    speculative_num_draft_tokens: int | None = None
    disable_custom_all_reduce: bool = False
    enable_symm_mem: bool = False
    enable_nccl_nvls: bool = False
    swa_full_tokens_ratio: float | None = None  # None: SGLang's fallback 0.8 (arg_groups/fields/schedule.py:150)
    disable_hybrid_swa_memory: bool = False
    # mamba / linear-attention hybrids (arg_groups/fields/schedule.py:216-227, memory.py:64, exec_.py:490-519)
    max_mamba_cache_size: int | None = None
    mamba_full_memory_ratio: float | None = None  # None: SGLang's fallback 0.9
    mamba_ssm_dtype: str | None = None
    mamba_radix_cache_strategy: str | None = None  # None: "auto"
    disable_radix_cache: bool = False
    disable_overlap_schedule: bool = False
    # everything the launch sets (the profile's settings under the user's options), by today's SGLang destination
    # names, typed by the release's parser: what sglwrap.sglang.resolved reads to fill in that release's defaults
    given: Mapping[str, object] = field(default_factory=dict, compare=False, repr=False)

    @property
    def attn_tp_size(self) -> int:
        """Attention TP group size: ``tp / attn_dp`` under DP attention."""
        return max(1, self.tp_size // max(1, self.attn_dp_size))

    @property
    def gpus(self) -> int:
        """GPUs one server uses: TP x PP, times DP replicas when DP is not DP attention."""
        replicas = self.dp_size if self.attn_dp_size <= 1 else 1
        return self.tp_size * self.pp_size * replicas

    @property
    def gpus_per_node(self) -> int:
        """GPUs of one node (``--nnodes`` splits the server evenly, as SGLang's ranks do)."""
        return -(-self.gpus // max(1, self.nnodes))

    @property
    def tp_spans_nodes(self) -> bool:
        """Whether one TP group crosses nodes (SGLang then turns its custom all-reduce off)."""
        return self.tp_size > self.gpus_per_node


def _values(cmd: SglangCmdline) -> dict[str, object]:
    """dest -> value for the options the user gave that the budget reads (already typed by SGLang's parser)."""
    raw: dict[str, object] = {}
    for dest, value in cmd.canonical_given().items():
        if value is None:
            continue
        if dest in _BOOL:
            raw[dest] = bool(value)
        elif dest in _INT:
            try:
                raw[dest] = int(value)  # type: ignore[call-overload]
            except (TypeError, ValueError):
                raise UsageError(f"{cmd.flag_for(dest)} {value!r}: not a number") from None
        elif dest in _FLOAT:
            try:
                raw[dest] = float(value)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                raise UsageError(f"{cmd.flag_for(dest)} {value!r}: not a number") from None
        elif dest in _STR:
            raw[dest] = value if isinstance(value, str) else str(value)
    return raw


def parse_server_args(argv: Sequence[str] | SglangCmdline, *, version: str | None = None,
                      profile_sglang: Mapping[str, object] | None = None) -> ServerArgs:
    """The budget's view of the user's command line (``argv`` parsed with release ``version``'s table when it is
    not already a SglangCmdline), with the profile's ``sglang:`` settings under it (the user's args win)."""
    cmd = argv if isinstance(argv, SglangCmdline) else cmdline_for(argv, version)
    raw: dict[str, object] = {}
    for key, value in (profile_sglang or {}).items():  # settings by meaning; only the ones we model
        name = "cuda_graph_max_bs_decode" if key == "cuda_graph_max_bs" else key
        if name in _INT + _FLOAT + _STR:
            raw[name] = value
    given = _values(cmd)
    options = _given_options(cmd, profile_sglang)
    if "cuda_graph_max_bs" in given:  # SGLang < 0.5.23 spelling of the same decode-graph setting
        given.setdefault("cuda_graph_max_bs_decode", given.pop("cuda_graph_max_bs"))
    raw.update(given)
    if not raw.get("model_path"):
        raise UsageError("memory needs the model: pass --model-path DIR|NAME after `--` "
                         "(a local directory, a Hugging Face name in the local cache, or a built-in name "
                         "such as Llama-3.1-8B)")
    tp = int(raw.get("tp_size", 1))  # type: ignore[call-overload]
    dp = int(raw.get("dp_size", 1))  # type: ignore[call-overload]
    attn_dp = int(raw.get("attn_dp_size", 1))  # type: ignore[call-overload]
    if raw.get("enable_dp_attention") and attn_dp <= 1:
        attn_dp = dp  # 0.5.23 turns --dp-size N --enable-dp-attention into --attn-dp-size N
    for name, value in (("--tp-size", tp), ("--dp-size", dp), ("--attn-dp-size", attn_dp)):
        if value < 1:
            raise ArgValueError(f"{name} {value}: must be a positive integer")
    if attn_dp > 1 and tp % attn_dp:
        raise ArgValueError(f"--attn-dp-size {attn_dp} must divide --tp-size {tp}")
    f = raw.get("mem_fraction_static")
    if f is not None and not 0.0 < float(f) < 1.0:  # type: ignore[arg-type]
        raise ArgValueError(f"--mem-fraction-static {f}: must be between 0 and 1 (exclusive): a fraction, 0.85 for 85%")
    r = raw.get("swa_full_tokens_ratio")
    if r is not None and not 0.0 < float(r) <= 1.0:  # type: ignore[arg-type]
        raise ArgValueError(f"--swa-full-tokens-ratio {r}: should be in range (0, 1.0]")  # kv_cache_hook.py:427-428
    mr = raw.get("mamba_full_memory_ratio")
    if mr is not None and float(mr) < 0:  # type: ignore[arg-type]  # sglwrap's check: r/(1+r) needs r >= 0
        raise ArgValueError(f"--mamba-full-memory-ratio {mr}: must not be negative")
    graph_bs = raw.get("cuda_graph_max_bs_decode", raw.get("cuda_graph_max_bs"))
    disabled = bool(raw.get("disable_cuda_graph"))
    return ServerArgs(
        model_path=str(raw["model_path"]), tp_size=tp, pp_size=int(raw.get("pp_size", 1)),  # type: ignore[call-overload]
        dp_size=dp, attn_dp_size=attn_dp, ep_size=int(raw.get("ep_size", 1)),  # type: ignore[call-overload]
        nnodes=max(1, int(raw.get("nnodes", 1))),  # type: ignore[call-overload]
        mem_fraction_static=None if f is None else float(f),  # type: ignore[arg-type]
        kv_cache_dtype=str(raw.get("kv_cache_dtype", "auto")),
        context_length=raw.get("context_length"),  # type: ignore[arg-type]
        cuda_graph_max_bs=None if graph_bs is None else int(graph_bs),  # type: ignore[call-overload]
        decode_graph=not (disabled or raw.get("disable_decode_cuda_graph")
                          or raw.get("cuda_graph_backend_decode") == "disabled"),
        prefill_graph=not (disabled or raw.get("disable_prefill_cuda_graph")
                           or raw.get("cuda_graph_backend_prefill") == "disabled"),
        chunked_prefill_size=raw.get("chunked_prefill_size"),  # type: ignore[arg-type]
        max_running_requests=raw.get("max_running_requests"),  # type: ignore[arg-type]
        max_total_tokens=raw.get("max_total_tokens"),  # type: ignore[arg-type]
        page_size=int(raw.get("page_size") or 1),  # type: ignore[call-overload]
        quantization=raw.get("quantization"),  # type: ignore[arg-type]
        dtype=str(raw.get("dtype", "auto")),
        speculative_algorithm=raw.get("speculative_algorithm"),  # type: ignore[arg-type]
        speculative_draft_model_path=raw.get("speculative_draft_model_path"),  # type: ignore[arg-type]
        speculative_num_draft_tokens=raw.get("speculative_num_draft_tokens"),  # type: ignore[arg-type]
        disable_custom_all_reduce=bool(raw.get("disable_custom_all_reduce")),
        enable_symm_mem=bool(raw.get("enable_symm_mem")),
        enable_nccl_nvls=bool(raw.get("enable_nccl_nvls")),
        swa_full_tokens_ratio=None if r is None else float(r),  # type: ignore[arg-type]
        disable_hybrid_swa_memory=bool(raw.get("disable_hybrid_swa_memory")),
        max_mamba_cache_size=raw.get("max_mamba_cache_size"),  # type: ignore[arg-type]
        mamba_full_memory_ratio=None if mr is None else float(mr),  # type: ignore[arg-type]
        mamba_ssm_dtype=raw.get("mamba_ssm_dtype"),  # type: ignore[arg-type]
        mamba_radix_cache_strategy=raw.get("mamba_radix_cache_strategy"),  # type: ignore[arg-type]
        disable_radix_cache=bool(raw.get("disable_radix_cache")),
        disable_overlap_schedule=bool(raw.get("disable_overlap_schedule")),
        given=options,
    )


def _given_options(cmd: SglangCmdline, profile_sglang: Mapping[str, object] | None) -> dict[str, object]:
    """The launch's options for the release rules: profile settings (by meaning) under the user's values; the decode
    graph size under its pre-0.5.23 name ``cuda_graph_max_bs``, which the rules read for every release."""
    out: dict[str, object] = {}
    for key, value in (profile_sglang or {}).items():
        if value is not None:
            out["cuda_graph_max_bs" if key == "cuda_graph_max_bs_decode" else str(key)] = value
    for dest, value in cmd.canonical_given().items():
        if value is not None:
            out["cuda_graph_max_bs" if dest == "cuda_graph_max_bs_decode" else dest] = value
    return out
