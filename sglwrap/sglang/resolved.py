"""What a given SGLang release will do with a launch: the defaults its ``ServerArgs`` fills in, per release range.

``resolve_server_args(given, version, gpu, model)`` applies the rules of the release range ``version`` falls in
(``sglwrap/sglang/rules/``: ``legacy`` 0.2.15-0.4.7, ``bucket_reserve`` 0.4.8-0.5.2, ``terms`` 0.5.3-0.5.23), each
coded from that release's ``server_args.py`` (and ``srt/arg_groups/*_hook.py`` from 0.5.19) with the lines cited.
Nothing here imports SGLang or touches a GPU: the GPU facts come in as :class:`GpuInfo`.
"""

from __future__ import annotations

from collections.abc import Mapping

from sglwrap.record import Record, field
from sglwrap.versions import InvalidVersion, Version

from sglwrap.sglang.rules import ERAS, OLDEST, era_ranges
from sglwrap.sglang.rules._base import Ctx, GpuInfo, ModelTraits, Range

__all__ = ["GpuInfo", "MemoryDefaults", "ModelTraits", "ResolvedServerArgs", "UnsupportedSGLangVersion",
           "memory_defaults", "resolve_server_args", "rule_range"]


class ResolvedServerArgs(Record):
    """The values the release would run with, each with its source ("user" or "sglang X file:lines")."""

    version: str
    rules: str
    mem_fraction_static: float
    mem_fraction_static_source: str  # "user" | "default"
    reserved_mib: float | None
    chunked_prefill_size: int  # -1 = disabled
    cuda_graph_max_bs: int  # 0 when decode graphs are off
    cuda_graph_bs: tuple[int, ...]
    decode_cuda_graph: bool
    prefill_cuda_graph: bool
    prefill_graph_sizes: tuple[int, ...]
    max_running_requests: int | None
    page_size: int
    attention_backend: str | None
    auto_enabled: tuple[str, ...]
    notes: tuple[str, ...]
    sources: dict[str, str] = field(default_factory=dict)


class UnsupportedSGLangVersion(ValueError):
    """The version is older than the oldest release whose rules are coded, or not a version at all."""


# Releases whose sources were read (~/.cache/sglwrap/releases/src) or whose ServerArgs was run against the rules
# (tests/fixtures/sglang_defaults, python -m sglwrap.sglang.check_defaults); others take the rules of their range.
READ_RELEASES = frozenset({"0.2.15", "0.3.0", "0.3.3", "0.3.6", "0.4.0", "0.4.1", "0.4.2", "0.4.3", "0.4.4", "0.4.5",
                           "0.4.6", "0.4.7", "0.4.8", "0.4.9", "0.4.10"}
                          | {f"0.5.{n}" for n in range(1, 24)})

# Accepted spellings of the same option, normalised to today's destination names.
_ALIASES = {"cuda_graph_max_bs_decode": "cuda_graph_max_bs", "tensor_parallel_size": "tp_size",
            "pipeline_parallel_size": "pp_size", "data_parallel_size": "dp_size",
            "expert_parallel_size": "ep_size", "attention_data_parallel_size": "attn_dp_size",
            "cuda_graph_bs_decode": "cuda_graph_bs"}


def rule_range(version: str) -> Range:
    """The release range whose rules apply to ``version`` (the last range starting at or before it).

    Raises UnsupportedSGLangVersion for a version older than 0.2.15 or one that does not parse.
    """
    try:
        v = Version(version)
    except InvalidVersion:
        raise UnsupportedSGLangVersion(f"sglang version {version!r} is not a version (e.g. 0.5.9)") from None
    base = Version(v.base_version)  # 0.5.9rc1 takes 0.5.9's rules
    if base < Version(OLDEST):
        raise UnsupportedSGLangVersion(
            f"sglang {version}: defaults are coded from {OLDEST} on; older releases are not modelled")
    # post releases carried backports (0.4.6.post2 the big-GPU fraction, 0.4.7.post1 the bucket reserve, 0.4.9.post3
    # the ViT-size VLM factor): a range may start at one, and 0.4.6.post5 sorts after it
    key = Version(f"{v.base_version}.post{v.post}") if v.post is not None else base
    era = ERAS[0][1]
    for first, name in ERAS:  # only the era's module is imported: the ranges of the others cannot apply
        if Version(first) <= key:
            era = name
    ranges = era_ranges(era)
    chosen = ranges[0]
    for r in ranges:
        if Version(r.first) <= key:
            chosen = r
    return chosen


def _normalise(given: Mapping[str, object]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in given.items():
        name = _ALIASES.get(key, key)
        if value is None:
            continue
        if name in out and key != name:
            continue  # today's name wins over an alias given alongside it
        out[name] = value
    return out


def resolve_server_args(given: Mapping[str, object], version: str, gpu: GpuInfo | None,
                        model: ModelTraits | None = None) -> ResolvedServerArgs:
    """Apply the rules of ``version``'s release range to the user's options ``given``.

    ``given`` holds only what the user set, keyed by SGLang destination names (today's spelling; the 0.5.23
    ``cuda_graph_max_bs_decode`` and the pre-0.5.23 ``cuda_graph_max_bs`` are the same option), values already
    converted.  ``gpu`` None means unknown: SGLang's own fallback is used and noted.  Raises
    UnsupportedSGLangVersion for releases older than the oldest coded one.
    """
    rng = rule_range(version)
    ctx = Ctx(version=version, given=_normalise(given), gpu=gpu, model=model)
    if Version(version).base_version not in READ_RELEASES:
        ctx.note(f"sglang {version} was not read; the rules of the range starting at {rng.first} are applied")
    if model is None:
        ctx.note("model traits unknown: treated as a text-only, non-MLA model")
    rng.resolve(ctx)
    val = ctx.values
    src = dict(ctx.sources)
    mfs = val["mem_fraction_static"]
    return ResolvedServerArgs(
        version=version, rules=rng.label,
        mem_fraction_static=float(mfs),  # type: ignore[arg-type]
        mem_fraction_static_source=str(val.get("mem_fraction_static_source", "default")),
        reserved_mib=None if val.get("reserved_mib") is None else float(val["reserved_mib"]),  # type: ignore[arg-type]
        chunked_prefill_size=int(val["chunked_prefill_size"]),  # type: ignore[call-overload]
        cuda_graph_max_bs=int(val["cuda_graph_max_bs"]),  # type: ignore[call-overload]
        cuda_graph_bs=tuple(val["cuda_graph_bs"]),  # type: ignore[arg-type]
        decode_cuda_graph=bool(val["decode_cuda_graph"]),
        prefill_cuda_graph=bool(val["prefill_cuda_graph"]),
        prefill_graph_sizes=tuple(val["prefill_graph_sizes"]),  # type: ignore[arg-type]
        max_running_requests=None if val.get("max_running_requests") is None
        else int(val["max_running_requests"]),  # type: ignore[call-overload]
        page_size=int(val["page_size"]),  # type: ignore[call-overload]
        attention_backend=None if val.get("attention_backend") is None else str(val["attention_backend"]),
        auto_enabled=tuple(ctx.auto), notes=tuple(ctx.notes), sources=src,
    )


class MemoryDefaults(Record):
    """The few numbers most consumers need: what ``version`` picks on this GPU with no memory flags given."""

    version: str
    chunked_prefill_size: int
    cuda_graph_max_bs: int
    mem_fraction_static: float
    reserved_mib: float | None


def memory_defaults(version: str, total_mib: float | None, *, tp_size: int = 1, pp_size: int = 1,
                    capability: tuple[int, int] | None = None) -> MemoryDefaults:
    """SGLang ``version``'s default chunked prefill, decode-graph max bs and mem fraction for one GPU size.

    A view over :func:`resolve_server_args` (the tables themselves live, with citations, in the rules modules:
    ``TP_LADDER_*``, ``RESERVE_0_4_9``/``CHUNKED_0_4_9``, ``BUCKETS_*``), so nobody copies a table by hand.
    """
    gpu = None if total_mib is None else GpuInfo(total_mib=total_mib, capability=capability)
    res = resolve_server_args({"tp_size": tp_size, "pp_size": pp_size}, version, gpu)
    return MemoryDefaults(version, res.chunked_prefill_size, res.cuda_graph_max_bs, res.mem_fraction_static,
                          res.reserved_mib)
