"""The working state one release's rules fill in, and the helpers several release ranges share.

A rule set (one per release range, in the sibling modules) reads the user's options and the GPU/model facts from a
:class:`Ctx`, writes each resolved field with :meth:`Ctx.put` (value + the SGLang source lines it comes from), and
adds notes where it had to approximate.  Nothing here imports SGLang.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from sglwrap.record import Record, field

GIB = 1024  # SGLang compares nvidia-smi MiB against N * 1024


class GpuInfo(Record):
    """What the rules need about the GPUs (min over the TP group)."""

    total_mib: float  # memory as nvidia-smi/NVML reports it
    capability: tuple[int, int] | None  # (9, 0) for H100/H200, (12, 0) for SM120 ...
    name: str | None = None
    count: int = 1


class ModelTraits(Record):
    """From the model's config.json (the caller builds it).

    ``vision_params``: the vision tower's layers x (4 h^2 + 2 h i), as ``sglwrap.memory.model`` counts it.
    ``vision_num_hidden_layers`` / ``vision_hidden_size``: ``vision_config.num_hidden_layers`` and
    ``vision_config.hidden_size`` exactly as config.json spells them (None when absent: Qwen2.5-VL names its depth
    ``depth``), which is what SGLang's ``adjust_mem_fraction_for_vlm`` reads (defaults 24 and 1024).
    """

    architectures: tuple[str, ...] = ()
    is_mla: bool = False
    is_multimodal: bool = False
    vision_params: int | None = None
    vision_num_hidden_layers: int | None = None
    vision_hidden_size: int | None = None
    is_hybrid_swa: bool = False
    is_hybrid_mamba: bool = False
    num_hidden_layers: int | None = None



class Ctx(Record, frozen=False):
    """One resolution in progress: the inputs, and what the rules decided so far."""

    version: str
    given: Mapping[str, object]
    gpu: GpuInfo | None
    model: ModelTraits | None
    values: dict[str, object] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    auto: list[str] = field(default_factory=list)

    # ---- inputs -------------------------------------------------------------------------------------------------
    def has(self, key: str) -> bool:
        """The user set ``key`` (to anything but None)."""
        return self.given.get(key) is not None

    def int_(self, key: str, default: int) -> int:
        v = self.given.get(key)
        return default if v is None else int(v)  # type: ignore[call-overload]

    def flag(self, key: str) -> bool:
        return bool(self.given.get(key))

    def str_(self, key: str) -> str | None:
        v = self.given.get(key)
        return None if v is None else str(v)

    @property
    def tp(self) -> int:
        return self.int_("tp_size", 1)

    @property
    def pp(self) -> int:
        return self.int_("pp_size", 1)

    @property
    def dp(self) -> int:
        return self.int_("dp_size", 1)

    @property
    def gpu_mem(self) -> float | None:
        """``get_nvgpu_memory_capacity()``: nvidia-smi ``memory.total`` MiB, min over the GPUs; None when unknown."""
        return None if self.gpu is None else float(self.gpu.total_mib)

    @property
    def capability(self) -> tuple[int, int] | None:
        return None if self.gpu is None else self.gpu.capability

    @property
    def spec(self) -> str | None:
        """``--speculative-algorithm`` with SGLang's alias NEXTN -> EAGLE (server_args.py in every 0.4.6+ release)."""
        s = self.str_("speculative_algorithm")
        if s is None:
            return None
        s = s.upper()
        return "EAGLE" if s == "NEXTN" else s

    @property
    def is_mla(self) -> bool:
        return bool(self.model and self.model.is_mla)

    @property
    def is_multimodal(self) -> bool:
        return bool(self.model and self.model.is_multimodal)

    @property
    def arch(self) -> str | None:
        return self.model.architectures[0] if self.model and self.model.architectures else None

    def attn_dp(self, *, needs_dp_gt_1: bool) -> int:
        """DP-attention group count: ``--attn-dp-size`` (0.5.22+), else ``--dp-size`` under ``--enable-dp-attention``.

        ``needs_dp_gt_1``: the release turns DP attention off when dp_size == 1 (0.5.2+); before that it kept it on.
        Returns 1 when DP attention is off.
        """
        if self.int_("attn_dp_size", 1) > 1:
            return self.int_("attn_dp_size", 1)
        if self.flag("enable_dp_attention"):
            if self.dp > 1:
                return self.dp
            return 1 if needs_dp_gt_1 else max(1, self.dp)
        return 1

    # ---- outputs ------------------------------------------------------------------------------------------------
    def put(self, name: str, value: object, source: str) -> None:
        """Record a resolved field and where it came from ("user" or "sglang X file:lines")."""
        self.values[name] = value
        self.sources[name] = source

    def take(self, name: str, default: object, source: str) -> object:
        """The user's value for ``name`` when given (source "user"), else ``default`` with ``source``."""
        if self.has(name):
            self.put(name, self.given[name], "user")
        else:
            self.put(name, default, source)
        return self.values[name]

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def enable(self, path: str) -> None:
        if path not in self.auto:
            self.auto.append(path)

    def cite(self, where: str) -> str:
        """``sglang <version> <where>`` for a source entry."""
        return f"sglang {self.version} {where}"


# ---- shared formulas (each cites the first release that has it; later ranges reference it when unchanged) ------

def tp_fraction(table: Mapping[int, float], tp: int) -> float:
    """The TP-size ladder of 0.2.15-0.4.8: the entry of the largest threshold <= tp."""
    for threshold in sorted(table, reverse=True):
        if tp >= threshold:
            return table[threshold]
    return table[min(table)]


def vlm_factor(model: ModelTraits | None) -> float:
    """``adjust_mem_fraction_for_vlm`` (0.4.10 server_args.py:1946-1986, 0.5.2 :2513-2547, unchanged to 0.5.23
    memory_hook.py:417-462): 0.95 x clamp(1 - 0.1 (ratio - 1), 0.8, 1.05), ratio = ViT layers x hidden^2 relative to
    ViT-L/14 (24 x 1024^2), with ``vision_config.num_hidden_layers`` (default 24) and ``.hidden_size`` (default 1024)
    read as the config spells them.  When the caller gave neither (``ModelTraits`` built without them) the tower's
    parameter count ``vision_params`` (layers x (4 h^2 + 2 h i)) stands in, assuming i = 4h.
    """
    if model is not None and (model.vision_num_hidden_layers is not None or model.vision_hidden_size is not None):
        layers = model.vision_num_hidden_layers or 24
        hidden = model.vision_hidden_size or 1024
        ratio = layers * hidden * hidden / (24 * 1024 * 1024)
    else:
        vp = model.vision_params if model is not None else None
        ratio = vp / (24 * (4 * 1024 * 1024 + 2 * 1024 * 4096)) if vp else 1.0
    return 0.95 * max(0.8, min(1.05, 1.0 - 0.1 * (ratio - 1.0)))


def filter_capture(sizes: list[int], ctx: Ctx, max_bs: int | None, where: str, *,
                   add_pool: tuple[int, ...] = (0,)) -> list[int]:
    """Sorted unique batch sizes <= max_bs, then as the runner's ``get_batch_sizes_to_capture`` treats the request
    pool: when the largest size exceeds it, the pool size (``add_pool`` offsets: (0,) from 0.4.9, (-1, 0) in
    0.4.3-0.4.8, () before) is added and larger sizes dropped.  The pool size is taken as --max-running-requests
    when the user gave it; otherwise it is known only at load (noted).
    """
    out = sorted({s for s in sizes if s > 0 and (max_bs is None or s <= max_bs)})
    mrr = ctx.given.get("max_running_requests")
    if mrr is not None and out and max(out) > int(mrr):  # type: ignore[call-overload]
        pool = int(mrr)  # type: ignore[call-overload]
        out = sorted({s for s in out if s <= pool} | {pool + d for d in add_pool if pool + d > 0})
        ctx.note(f"cuda_graph_bs: request pool size taken as --max-running-requests {pool} ({where})")
    ctx.note(f"cuda_graph_bs: the runner also caps capture at req_to_token_pool.size, known only at load ({where})")
    return out


def bucket(table: Mapping[float | None, tuple[int, int, int]], gpu_mem: float) -> tuple[int, int, int]:
    """Look up ``(chunked_prefill_size, max_bs if tp < 4, max_bs if tp >= 4)`` by the first bound > gpu_mem (GiB)."""
    for bound, row in table.items():
        if bound is None or gpu_mem < bound * GIB:
            return row
    raise AssertionError("bucket table needs a None (unbounded) last row")


Resolver = Callable[[Ctx], None]


class Range(Record):
    """One release range: the first release it applies to, a human label with the main citation, and its rules."""

    first: str
    label: str
    resolve: Resolver
