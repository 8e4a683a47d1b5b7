"""Registry of the environment variables a profile may set: type, default, range or tokens, and who else writes them.

This module is data plus one validator. NCCL parses integers with ``strtoll`` and only warns at INFO level, so
``NCCL_BUFFSIZE=4M`` silently becomes 4 bytes and ``NCCL_P2P_LEVEL=pxb`` is silently ignored (NCCL 2.30.7
``src/misc/param.cc:78-106``, ``src/graph/paths.cc:243-292``). sglwrap refuses such values before launch.
Sources: shared research-preflight §5.4 and §6 (NCCL 2.30.7 source, SGLang 0.5.23 ``engine.py``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from sglwrap.record import Record


_INT_RE = re.compile(r"-?(0[xX][0-9a-fA-F]+|\d+)")


class EnvVar(Record):
    """One known variable. ``kind`` is int, enum, list, str or path; ``tokens`` are the allowed words."""

    name: str
    kind: str
    meaning: str
    default: str | None = None
    minimum: int | None = None
    maximum: int | None = None
    tokens: tuple[str, ...] = ()
    list_funcs: tuple[str, ...] = ()  # NCCL_PROTO/NCCL_ALGO: allowed "func:" prefixes
    sglang_writes: str | None = None  # how SGLang 0.5.23 itself sets it in the launcher, if it does
    sglang_overrides_when: tuple[str, ...] = ()  # SGLang arg dests that make it overwrite a set value; "*" always
    power_of_two: bool = False


_NCCL_FUNCS = ("Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce", "SendRecv")
_P2P_LEVELS = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS")

_VARS: tuple[EnvVar, ...] = (
    # --- NCCL: channels and buffers (connect.cc:327-359, init.cc:810-828) ---
    EnvVar("NCCL_MIN_NCHANNELS", "int", "minimum number of channels (rings/trees) per communicator", None, 0, 64,
           sglang_writes="overwritten with --enable-deterministic-inference (SGLANG_DETERMINISTIC_NCCL_NCHANNELS)",
           sglang_overrides_when=("enable_deterministic_inference",)),
    EnvVar("NCCL_MAX_NCHANNELS", "int", "maximum number of channels per communicator", "64", 1, 64,
           sglang_writes="overwritten with --enable-deterministic-inference (SGLANG_DETERMINISTIC_NCCL_NCHANNELS)",
           sglang_overrides_when=("enable_deterministic_inference",)),
    EnvVar("NCCL_MIN_NRINGS", "int", "legacy name of NCCL_MIN_NCHANNELS", None, 0, 64),
    EnvVar("NCCL_MAX_NRINGS", "int", "legacy name of NCCL_MAX_NCHANNELS", None, 1, 64),
    EnvVar("NCCL_MIN_CTAS", "int", "minimum CTAs per collective (ncclConfig_t minCTAs)", "1", 1, 64),
    EnvVar("NCCL_MAX_CTAS", "int", "maximum CTAs per collective (ncclConfig_t maxCTAs)", "64", 1, 64),
    EnvVar("NCCL_BUFFSIZE", "int", "Simple-protocol buffer per channel and peer, in bytes", "4194304",
           4096, 1 << 30, power_of_two=True),
    EnvVar("NCCL_LL_BUFFSIZE", "int", "LL-protocol buffer in bytes", None, 4096, 1 << 30, power_of_two=True),
    EnvVar("NCCL_LL128_BUFFSIZE", "int", "LL128-protocol buffer in bytes", None, 4096, 1 << 30, power_of_two=True),
    EnvVar("NCCL_NTHREADS", "int", "threads per CTA", None, 64, 512, tokens=()),
    EnvVar("NCCL_P2P_NVL_CHUNKSIZE", "int", "P2P chunk size over NVLink, bytes", None, 1024, 1 << 26),
    EnvVar("NCCL_P2P_PCI_CHUNKSIZE", "int", "P2P chunk size over PCIe, bytes", None, 1024, 1 << 26),
    EnvVar("NCCL_P2P_NET_CHUNKSIZE", "int", "P2P chunk size over the network, bytes", None, 1024, 1 << 26),
    EnvVar("NCCL_NCHANNELS_PER_NET_PEER", "int", "channels per network peer", None, 1, 64),
    # --- NCCL: algorithm and protocol selection (tuning.cc, init.cc:52-55) ---
    EnvVar("NCCL_PROTO", "list", "protocols NCCL may use", None,
           tokens=("LL", "LL128", "Simple"), list_funcs=_NCCL_FUNCS),
    EnvVar("NCCL_ALGO", "list", "algorithms NCCL may use", None,
           tokens=("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT"),
           list_funcs=_NCCL_FUNCS,
           sglang_writes="set to allreduce:tree with --enable-deterministic-inference",
           sglang_overrides_when=("enable_deterministic_inference",)),
    # --- NCCL: transports and topology (paths.cc, shm.cc, nvls.cc, cudawrap.cc) ---
    EnvVar("NCCL_P2P_LEVEL", "enum", "farthest PCI path over which GPUs use P2P (case-sensitive)", "PXB",
           tokens=_P2P_LEVELS + ("0", "1", "2", "3", "4", "5")),
    EnvVar("NCCL_P2P_DISABLE", "int", "1 disables P2P between GPUs (traffic goes through host memory)", "0", 0, 1),
    EnvVar("NCCL_SHM_DISABLE", "int", "1 disables the shared-memory transport", "0", 0, 1),
    EnvVar("NCCL_P2P_USE_CUDA_MEMCPY", "int", "use copy engines for P2P", "0", 0, 1),
    EnvVar("NCCL_NVLS_ENABLE", "int", "NVLink SHARP (multicast): 0 off, 1 forced, 2 auto", "2", 0, 2,
           sglang_writes="set to 0 when unset; forced to 1 by --enable-nccl-nvls/--enable-symm-mem",
           sglang_overrides_when=("enable_nccl_nvls", "enable_symm_mem")),
    EnvVar("NCCL_CUMEM_ENABLE", "int", "cuMem-based buffers (0/1)", None, 0, 1,
           sglang_writes="set to 0 when unset; forced to 1 by --enable-symm-mem",
           sglang_overrides_when=("enable_symm_mem",)),
    EnvVar("NCCL_MNNVL_ENABLE", "int", "multi-node NVLink (0 off, 1 on, 2 auto)", "2", 0, 2),
    EnvVar("NCCL_GRAPH_MIXING_SUPPORT", "int", "graph/non-graph launch mixing support (0/1)", "1", 0, 1,
           sglang_writes="set to 0 when dcp_size > 1"),
    EnvVar("NCCL_GRAPH_REGISTER", "int", "buffer registration inside CUDA graphs (0/1)", "1", 0, 1,
           sglang_writes="defaulted to 0 when captured graphs hold collectives"),
    EnvVar("NCCL_RUNTIME_CONNECT", "int", "connect channels lazily on first use (0/1)", "1", 0, 1),
    EnvVar("NCCL_COLLNET_ENABLE", "int", "CollNet/SHARP (0/1)", "0", 0, 1),
    EnvVar("NCCL_PXN_DISABLE", "int", "disable PXN (0/1)", "0", 0, 1),
    EnvVar("NCCL_IGNORE_CPU_AFFINITY", "int", "ignore the process CPU affinity (0/1)", "0", 0, 1),
    EnvVar("NCCL_CROSS_NIC", "int", "allow rings/trees across NICs (0, 1, 2)", "2", 0, 2),
    EnvVar("NCCL_NET_GDR_LEVEL", "enum", "farthest path for GPU Direct RDMA",
           None, tokens=_P2P_LEVELS + ("0", "1", "2", "3", "4", "5")),
    EnvVar("NCCL_LAUNCH_MODE", "enum", "kernel launch mode", None, tokens=("PARALLEL", "GROUP")),
    EnvVar("NCCL_CTA_POLICY", "int", "CTA scheduling policy (0 default, 1 efficiency, 2 zero-CTA)", None, 0, 2),
    EnvVar("NCCL_TOPO_FILE", "path", "XML topology file read instead of probing"),
    EnvVar("NCCL_TOPO_DUMP_FILE", "path", "where to dump the detected topology XML"),
    EnvVar("NCCL_GRAPH_DUMP_FILE", "path", "where to dump the search graphs"),
    EnvVar("NCCL_CONF_FILE", "path", "NCCL configuration file"),
    # --- NCCL: network ---
    EnvVar("NCCL_IB_DISABLE", "int", "1 disables the InfiniBand/RoCE transport", "0", 0, 1),
    EnvVar("NCCL_IB_HCA", "str", "InfiniBand HCAs to use (prefix list)"),
    EnvVar("NCCL_IB_TIMEOUT", "int", "InfiniBand verbs timeout exponent", "20", 1, 31),
    EnvVar("NCCL_IB_RETRY_CNT", "int", "InfiniBand retry count", "7", 0, 7),
    EnvVar("NCCL_IB_GID_INDEX", "int", "RoCE GID index", None, -1, 255),
    EnvVar("NCCL_SOCKET_IFNAME", "str", "network interfaces for bootstrap and sockets (prefix list)"),
    EnvVar("NCCL_SOCKET_NTHREADS", "int", "socket helper threads per connection", None, 1, 16),
    EnvVar("NCCL_NSOCKS_PERTHREAD", "int", "sockets per helper thread", None, 1, 64),
    EnvVar("NCCL_NET", "str", "network plugin name to use"),
    EnvVar("NCCL_NET_PLUGIN", "str", "network plugin library suffix or path"),
    EnvVar("NCCL_TUNER_PLUGIN", "str", "tuner plugin library"),
    # --- NCCL: debugging (debug.cc:45-78) ---
    EnvVar("NCCL_DEBUG", "enum", "log level", None, tokens=("VERSION", "WARN", "INFO", "ABORT", "TRACE")),
    EnvVar("NCCL_DEBUG_SUBSYS", "str", "subsystems to log, comma-separated, ^ inverts"),
    EnvVar("NCCL_DEBUG_FILE", "path", "log file pattern (%h host, %p pid)"),
    EnvVar("NCCL_SET_THREAD_NAME", "int", "name NCCL's threads (0/1)", "0", 0, 1),
    # --- CUDA runtime ---
    EnvVar("CUDA_VISIBLE_DEVICES", "str", "GPUs this process may use (indices or UUIDs)"),
    EnvVar("CUDA_DEVICE_ORDER", "enum", "how CUDA numbers devices", "FASTEST_FIRST",
           tokens=("FASTEST_FIRST", "PCI_BUS_ID")),
    EnvVar("CUDA_DEVICE_MAX_CONNECTIONS", "int", "hardware work queues per device", "8", 1, 32,
           sglang_writes="always overwritten with 8 by SGLang's launcher", sglang_overrides_when=("*",)),
    EnvVar("CUDA_LAUNCH_BLOCKING", "int", "synchronous kernel launches (debug only, very slow)", "0", 0, 1),
    EnvVar("CUDA_MODULE_LOADING", "enum", "module loading", "LAZY", tokens=("LAZY", "EAGER")),
    EnvVar("CUDA_HOME", "path", "CUDA toolkit used by JIT compilers (FlashInfer, sgl-kernel)"),
    # --- PyTorch ---
    EnvVar("PYTORCH_CUDA_ALLOC_CONF", "str", "caching allocator options (key:value,...)"),
    EnvVar("PYTORCH_NVML_BASED_CUDA_CHECK", "int", "is_available() through NVML, no CUDA context (0/1)", "0", 0, 1),
    EnvVar("TORCH_CUDA_ARCH_LIST", "str", "architectures for torch extension builds (e.g. '9.0 12.0+PTX')"),
    EnvVar("TORCH_NCCL_ASYNC_ERROR_HANDLING", "int", "c10d NCCL error handling mode", None, 0, 3),
    EnvVar("TORCH_NCCL_BLOCKING_WAIT", "int", "blocking wait on NCCL work (0/1)", "0", 0, 1),
    EnvVar("TORCH_NCCL_AVOID_RECORD_STREAMS", "int", "avoid recordStream in c10d (0/1)", None, 0, 1),
    EnvVar("TORCH_NCCL_DUMP_ON_TIMEOUT", "int", "dump the flight recorder on timeout (0/1)", "0", 0, 1),
    EnvVar("TORCH_NCCL_TRACE_BUFFER_SIZE", "int", "flight recorder entries", "0", 0, 1 << 20),
    EnvVar("TORCH_NCCL_ENABLE_MONITORING", "int", "c10d heartbeat monitor (0/1)", "1", 0, 1),
    EnvVar("TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", "int", "c10d heartbeat timeout, seconds", "480", 1, 86400),
    EnvVar("TORCH_DISTRIBUTED_DEBUG", "enum", "c10d debug level", "OFF", tokens=("OFF", "INFO", "DETAIL")),
    EnvVar("TORCH_SYMM_MEM_DISABLE_MULTICAST", "int", "never use NVLink multicast in torch symm-mem (0/1)",
           None, 0, 1),
    # --- FlashInfer / NVSHMEM ---
    EnvVar("FLASHINFER_CUDA_ARCH_LIST", "str", "FlashInfer JIT target archs, space separated (e.g. '12.0f')"),
    EnvVar("FLASHINFER_DISABLE_VERSION_CHECK", "int", "skip the cubin/jit-cache version check (0/1)", "0", 0, 1),
    EnvVar("FLASHINFER_WORKSPACE_BASE", "path", "FlashInfer JIT cache base directory"),
    EnvVar("NVSHMEM_DISABLE_NVLS", "int", "never use NVLink SHARP in NVSHMEM (0/1)", None, 0, 1),
)

REGISTRY: dict[str, EnvVar] = {v.name: v for v in _VARS}

# Prefixes whose unknown names are errors (a typo there is silently ignored by the consumer).
STRICT_PREFIXES: tuple[str, ...] = ("NCCL_", "CUDA_", "TORCH_", "PYTORCH_", "FLASHINFER_", "NVSHMEM_")

_ALLOC_CONF_KEYS = (
    "backend", "max_split_size_mb", "roundup_power2_divisions", "max_non_split_rounding_mb",
    "garbage_collection_threshold", "expandable_segments", "release_lock_on_cudamalloc",
    "pinned_use_cuda_host_register", "pinned_num_register_threads", "pinned_use_background_threads",
    "per_process_memory_fraction", "graph_capture_record_stream_reuse",
)


class EnvValueError(ValueError):
    """A variable's value is not one the consumer would read as intended; ``allowed`` says what is."""

    def __init__(self, problem: str, allowed: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.allowed = allowed


def suggest(name: str, known: list[str] | None = None) -> str | None:
    """The closest known variable name to ``name``, for a "did you mean" hint."""
    pool = known if known is not None else list(REGISTRY)
    import difflib

    close = difflib.get_close_matches(name, pool, n=1, cutoff=0.75)
    return close[0] if close else None


def canonical_value(var: EnvVar, raw: object) -> str:
    """Validate ``raw`` (a YAML scalar) for ``var`` and return the exact string to put in the environment."""
    if isinstance(raw, bool):
        if var.kind == "int" and var.minimum == 0 and var.maximum == 1:
            return "1" if raw else "0"
        raise EnvValueError(f"a boolean ({raw!r}) is not a value of {var.name}", _allowed(var))
    if isinstance(raw, float):
        raise EnvValueError(f"{raw!r} is a float", _allowed(var))
    if raw is None or isinstance(raw, (list, dict)):
        raise EnvValueError(f"{raw!r} is not a scalar", _allowed(var))
    text = str(raw).strip()
    if var.kind == "int":
        return _check_int(var, text)
    if var.kind == "enum":
        if text not in var.tokens:
            hint = _case_hint(text, var.tokens)
            raise EnvValueError(f"{text!r} is not one of the values {var.name} accepts{hint}", _allowed(var))
        return text
    if var.kind == "list":
        return _check_list(var, text)
    if var.name == "PYTORCH_CUDA_ALLOC_CONF":
        return _check_alloc_conf(text)
    if not text:
        raise EnvValueError("the value is empty", _allowed(var))
    return text


def _allowed(var: EnvVar) -> str:
    if var.kind == "int":
        extra = ", a power of two" if var.power_of_two else ""
        return f"a decimal integer from {var.minimum} to {var.maximum}{extra} (no unit suffix)"
    if var.kind == "enum":
        return "one of " + ", ".join(var.tokens) + " (exact spelling)"
    if var.kind == "list":
        return (f"a comma-separated list of {', '.join(var.tokens)} (exact spelling), optionally prefixed by ^ "
                f"to exclude, or 'Func:list' entries separated by ';' with Func in {', '.join(var.list_funcs)}")
    if var.name == "PYTORCH_CUDA_ALLOC_CONF":
        return "comma-separated key:value pairs with keys " + ", ".join(_ALLOC_CONF_KEYS)
    return "a non-empty string"


def _case_hint(text: str, tokens: tuple[str, ...]) -> str:
    for t in tokens:
        if t.lower() == text.lower():
            return f" (write {t!r}: sglwrap requires the exact spelling)"
    return ""


def _check_int(var: EnvVar, text: str) -> str:
    if not _INT_RE.fullmatch(text):
        raise EnvValueError(
            f"{text!r} is not an integer (NCCL would silently read it as {_strtoll_prefix(text)})", _allowed(var))
    value = int(text, 0)
    if var.minimum is not None and value < var.minimum or var.maximum is not None and value > var.maximum:
        raise EnvValueError(f"{value} is out of range", _allowed(var))
    if var.power_of_two and value & (value - 1):
        raise EnvValueError(f"{value} is not a power of two", _allowed(var))
    return str(value)


def _strtoll_prefix(text: str) -> int:
    """What C's strtoll(text, NULL, 0) returns: the leading integer, or 0."""
    m = re.match(r"\s*[-+]?(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9]\d*)", text)
    if not m:
        return 0
    return int(m.group(0).strip(), 0) if not re.fullmatch(r"\s*[-+]?0[0-7]+", m.group(0)) else int(m.group(0), 8)


def _check_list(var: EnvVar, text: str) -> str:
    entries = [e for e in text.split(";")] if ";" in text or ":" in text else [text]
    for entry in entries:
        body = entry
        if ":" in entry:
            func, body = entry.split(":", 1)
            if func.lower() not in {f.lower() for f in var.list_funcs}:
                raise EnvValueError(f"{func!r} is not a collective name", _allowed(var))
        body = body[1:] if body.startswith("^") else body
        tokens = [t.strip() for t in body.split(",")]
        for tok in tokens:
            if tok not in var.tokens:
                hint = _case_hint(tok, var.tokens)
                raise EnvValueError(f"{tok!r} is not a valid {var.name} token{hint}", _allowed(var))
    return text


def _check_alloc_conf(text: str) -> str:
    for pair in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = pair.partition(":")
        if not sep or not value:
            raise EnvValueError(f"{pair!r} is not key:value", _allowed(REGISTRY["PYTORCH_CUDA_ALLOC_CONF"]))
        if key not in _ALLOC_CONF_KEYS:
            raise EnvValueError(f"unknown allocator option {key!r}", _allowed(REGISTRY["PYTORCH_CUDA_ALLOC_CONF"]))
    return text


def describe(name: str, sglang_env: Mapping[str, str] | None = None) -> str:
    """One line on what a variable means, for `profiles show`."""
    var = REGISTRY.get(name)
    if var is not None:
        return var.meaning
    if sglang_env is not None and name in sglang_env:
        return f"SGLang knob ({sglang_env[name]})"
    return "unknown"


def nccl_int(text: str | None) -> int | None:
    """The integer NCCL reads from ``text`` (``strtoll(text, NULL, 0)``: ``4M`` is 4, ``0x400000`` is 4194304);
    None when unset or empty."""
    if text is None or not text.strip():
        return None
    return _strtoll_prefix(text)


def misread(name: str, text: str) -> str | None:
    """Why a variable from the user's own environment will not do what it seems to say, or None when it will.

    For the shell's values sglwrap only warns (it never refuses what the user's environment holds): NCCL reads
    integers with ``strtoll`` and ignores unknown words."""
    var = REGISTRY.get(name)
    if var is None:
        return None
    try:
        canonical = canonical_value(var, text)
    except EnvValueError as e:
        if var.kind == "int":
            return (f"{name}={text!r} in your environment: NCCL reads it as {_strtoll_prefix(text)} "
                    f"({e.problem}); allowed: {e.allowed}")
        return f"{name}={text!r} in your environment: {e.problem}; allowed: {e.allowed}"
    if var.kind == "int" and canonical != text.strip():
        return f"{name}={text!r} in your environment: NCCL reads it as {canonical}"
    return None
