"""What a profile's ``sglang:`` settings and ``features:`` mean, and which SGLang flags express them.

Profiles name server settings by meaning (``cuda_graph_max_bs``); the flag that carries the meaning changed
between SGLang versions (the release data shows ``--cuda-graph-max-bs-decode``/``-prefill`` from 0.5.14, the old
``--cuda-graph-max-bs`` a deprecated alias until it is gone in 0.5.20, where the parser's abbreviation matching makes
it an "ambiguous option" error). Candidates are listed newest first; ``sglwrap.sglang.flags.setting_flag`` picks the
first one the target release's flag table has, matched exactly: this list is the only place a spelling is named.
"""

from __future__ import annotations

from sglwrap.record import Record



class Setting(Record):
    """A server setting a profile may set; ``flags`` are candidate spellings, newest first."""

    name: str
    kind: str  # int, float, str, bool
    flags: tuple[str, ...]
    meaning: str
    minimum: float | None = None
    maximum: float | None = None


SETTINGS: dict[str, Setting] = {s.name: s for s in (
    Setting("cuda_graph_max_bs", "int", ("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs"),
            "largest decode batch captured in a CUDA graph (graph memory grows with it)", 1, 4096),
    Setting("cuda_graph_max_bs_prefill", "int", ("--cuda-graph-max-bs-prefill",),
            "largest prefill batch captured in a CUDA graph", 1, 65536),
    Setting("mem_fraction_static", "float", ("--mem-fraction-static",),
            "fraction of free GPU memory for weights + KV cache", 0.01, 0.99),
    Setting("chunked_prefill_size", "int", ("--chunked-prefill-size",),
            "tokens per prefill chunk (-1 disables chunking)", -1, 1 << 20),
    Setting("max_running_requests", "int", ("--max-running-requests",), "concurrent requests cap", 1, 1 << 20),
    Setting("max_total_tokens", "int", ("--max-total-tokens",), "KV pool size cap in tokens", 1, 1 << 30),
    Setting("context_length", "int", ("--context-length",), "maximum context length", 1, 1 << 24),
    Setting("kv_cache_dtype", "str", ("--kv-cache-dtype",), "KV cache data type (auto, fp8_e4m3, ...)"),
    Setting("attention_backend", "str", ("--attention-backend",), "attention kernel backend"),
    Setting("quantization", "str", ("--quantization",), "the method SGLang loads the checkpoint's weights with"),
    Setting("dsa_prefill_backend", "str", ("--dsa-prefill-backend", "--nsa-prefill-backend"),
            "prefill kernel backend of DeepSeek-V3.2 / GLM-5 sparse (DSA, NSA before 0.5.13) attention"),
    Setting("dsa_decode_backend", "str", ("--dsa-decode-backend", "--nsa-decode-backend"),
            "decode kernel backend of DeepSeek-V3.2 / GLM-5 sparse (DSA, NSA before 0.5.13) attention"),
    Setting("speculative_moe_runner_backend", "str", ("--speculative-moe-runner-backend",),
            "MoE kernel backend of the speculative draft model"),
    Setting("speculative_draft_attention_backend", "str", ("--speculative-draft-attention-backend",),
            "attention kernel backend of the speculative draft model"),
    Setting("schedule_conservativeness", "float", ("--schedule-conservativeness",),
            "how conservatively the scheduler admits requests", 0.0, 100.0),
)}


class Feature(Record):
    """A communication feature a profile can ask for; how it is turned on and off in SGLang."""

    name: str
    meaning: str
    on_flags: tuple[tuple[str, ...], ...]  # candidate argv fragments that enable it, newest first
    off_flags: tuple[tuple[str, ...], ...]  # candidate argv fragments that disable it ((),) = SGLang's default
    on_env: tuple[tuple[str, str], ...] = ()  # variables that enable it (when it is an env knob)


FEATURE_MODES = ("require", "prefer", "off", "auto")

FEATURES: dict[str, Feature] = {f.name: f for f in (
    Feature("flashinfer_allreduce_fusion", "FlashInfer all-reduce + RMSNorm fusion",
            on_flags=(("--flashinfer-allreduce-fusion-backend", "auto"), ("--enable-flashinfer-allreduce-fusion",)),
            off_flags=(("--enforce-disable-flashinfer-allreduce-fusion",), ())),
    Feature("torch_symm_mem", "torch symmetric-memory all-reduce (--enable-torch-symm-mem)",
            on_flags=(("--enable-torch-symm-mem",),), off_flags=((),)),
    Feature("symm_mem", "NCCL symmetric-memory windows (--enable-symm-mem; forces NCCL_NVLS_ENABLE=1)",
            on_flags=(("--enable-symm-mem",),), off_flags=((),)),
    Feature("custom_all_reduce", "SGLang's custom all-reduce kernel (on by default)",
            on_flags=((),), off_flags=(("--disable-custom-all-reduce",),)),
    Feature("pcie_ipc_allreduce", "FlashInfer PCIe-IPC all-reduce (SGLANG_ENABLE_PCIE_IPC_ALLREDUCE, opt-in)",
            on_flags=((),), off_flags=((),), on_env=(("SGLANG_ENABLE_PCIE_IPC_ALLREDUCE", "1"),)),
    Feature("shared_experts_fusion", "MoE shared expert run as an extra routed expert (on where SGLang fuses it)",
            on_flags=((),), off_flags=(("--disable-shared-experts-fusion",),)),
)}
