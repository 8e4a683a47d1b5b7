"""SGLang's defaults for the plan's release, read from the version-resolved server arguments.

Every default the budget depends on (``--mem-fraction-static`` and its reserve, chunked prefill, the decode capture
list, whether decode and prefill CUDA graphs run and with which sizes, page size, max running requests) comes from
``sglwrap.sglang.resolved.resolve_server_args`` for the release the plan is made for: the rules of that release's
``server_args.py`` (0.2.15 ... 0.5.23), never 0.5.23's alone.
"""

from __future__ import annotations

from collections.abc import Mapping

from sglwrap.errors import UsageError
from sglwrap.memory.args import ServerArgs
from sglwrap.memory.model import ModelShape
from sglwrap.record import Record
from sglwrap.versions import newest_known

NEWEST_RULES = newest_known()  # the release planned for when none is named (the newest in the bundled data)


class Resolved(Record):
    """The values SGLang would run with, and where each came from."""

    chunked_prefill_size: int  # -1: disabled
    decode_max_bs: int  # 0 when decode graphs are off
    prefill_graph_sizes: int  # how many prefill graphs are captured (0 when off)
    mem_fraction_static: float
    mfs_source: str  # "--mem-fraction-static", "profile", "sglang-default"
    reserved_mb: float | None  # SGLang's reserve when it computed the default
    decode_graph_sizes: tuple[int, ...] = ()
    decode_graph: bool = True
    prefill_graph: bool = True
    page_size: int = 1
    max_running_requests: int | None = None
    version: str = NEWEST_RULES
    rules: str = ""
    notes: tuple[str, ...] = ()


def prefill_graph_sizes(max_bs: int) -> list[int]:
    """``generate_prefill_cuda_graph_batch_sizes`` (0.5.23 cuda_graph_hook.py:480-497)."""
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
             + list(range(576, 1025, 64)) + list(range(1280, 4097, 256)) + list(range(4608, max_bs + 1, 512)))
    return [s for s in sizes if s <= max_bs]


def _vision_fields(shape: ModelShape) -> tuple[int | None, int | None]:
    """``vision_config.num_hidden_layers`` and ``.hidden_size`` as the model's config.json spells them (what
    SGLang's ``adjust_mem_fraction_for_vlm`` reads; Qwen2.5-VL has ``depth``, not ``num_hidden_layers``), from the
    local directory the shape was read from; (None, None) when there is none."""
    import json
    from pathlib import Path

    if not shape.is_multimodal or not shape.directory:
        return None, None
    try:
        cfg = json.loads((Path(shape.directory) / "config.json").read_text())
    except (OSError, ValueError):
        return None, None
    vision = cfg.get("vision_config") if isinstance(cfg, dict) else None
    if not isinstance(vision, dict):
        return None, None
    layers, hidden = vision.get("num_hidden_layers"), vision.get("hidden_size")
    return (int(layers) if isinstance(layers, int) else None, int(hidden) if isinstance(hidden, int) else None)


def model_traits(shape: ModelShape) -> object:
    """The model facts the release rules read (``sglwrap.sglang.resolved.ModelTraits``) from the loaded config."""
    from sglwrap.sglang.resolved import ModelTraits

    vit_layers, vit_hidden = _vision_fields(shape)
    return ModelTraits(architectures=(shape.architecture,) if shape.architecture else (), is_mla=shape.is_mla,
                       is_multimodal=shape.is_multimodal, vision_params=shape.vision_params or None,
                       vision_num_hidden_layers=vit_layers, vision_hidden_size=vit_hidden,
                       is_hybrid_swa=shape.swa is not None, is_hybrid_mamba=shape.mamba is not None,
                       num_hidden_layers=shape.num_layers)


def given_options(args: ServerArgs, profile_mfs: float | None) -> dict[str, object]:
    """What the launch sets, by SGLang destination name: the profile's settings under the user's options."""
    given: dict[str, object] = dict(args.given)
    if "mem_fraction_static" not in given and profile_mfs is not None:
        given["mem_fraction_static"] = profile_mfs
    return given


def resolve(args: ServerArgs, shape: ModelShape, gpu_mem_mib: float | None, *,
            profile_mfs: float | None = None, version: str | None = None,
            capability: tuple[int, int] | None = None, gpu_name: str | None = None,
            gpu_count: int = 1) -> Resolved:
    """SGLang ``version``'s defaults (0.5.23 when None) for this GPU (nvidia-smi MiB, min over GPUs), this model and
    these arguments. A release older than the oldest coded one is a usage error naming ``--assume-stack``."""
    from sglwrap.sglang.resolved import GpuInfo, UnsupportedSGLangVersion, resolve_server_args

    release = version or NEWEST_RULES
    gpu = None if gpu_mem_mib is None else GpuInfo(total_mib=gpu_mem_mib, capability=capability, name=gpu_name,
                                                   count=gpu_count)
    given = given_options(args, profile_mfs)
    try:
        r = resolve_server_args(given, release, gpu, model_traits(shape))  # type: ignore[arg-type]
    except UnsupportedSGLangVersion as exc:
        raise UsageError(f"memory: {exc} (--assume-stack sglang=X.Y.Z picks the release)") from None
    if args.mem_fraction_static is not None:
        source = "--mem-fraction-static"
    elif profile_mfs is not None:
        source = "profile"
    else:
        source = "sglang-default"
    n_prefill = _prefill_count(r.prefill_graph_sizes, args, shape) if r.prefill_cuda_graph else 0
    mfs, notes = r.mem_fraction_static, tuple(r.notes)
    factor = runner_multimodal_factor(release) if shape.is_multimodal else 1.0
    if factor != 1.0:
        mfs = mfs * factor
        notes += (f"multimodal: the model runner of {release} multiplies mem_fraction_static by {factor} "
                  f"(given or default) before sizing the pool",)
    return Resolved(
        chunked_prefill_size=r.chunked_prefill_size, decode_max_bs=r.cuda_graph_max_bs if r.decode_cuda_graph else 0,
        prefill_graph_sizes=n_prefill, mem_fraction_static=mfs, mfs_source=source,
        reserved_mb=r.reserved_mib if source == "sglang-default" else None,
        decode_graph_sizes=tuple(r.cuda_graph_bs) if r.decode_cuda_graph else (),
        decode_graph=r.decode_cuda_graph, prefill_graph=r.prefill_cuda_graph, page_size=r.page_size,
        max_running_requests=r.max_running_requests, version=release, rules=r.rules, notes=notes)


def runner_multimodal_factor(version: str) -> float:
    """What the ModelRunner of a release multiplies ``mem_fraction_static`` by for a multimodal model, whether the
    fraction was given or defaulted: x 0.95 up to 0.4.4 (0.3.0 ``model_runner.py:107``, 0.4.3 ``:138``, 0.4.4
    ``:242``), x 0.90 in 0.4.5-0.4.8 (0.4.5 ``:273``, 0.4.6 ``:308``, 0.4.8 ``:414``). From 0.4.9 the reduction
    moved into ``server_args`` and applies to the default only (the release rules, ``sglwrap.sglang.rules``)."""
    from sglwrap.versions import before

    if before(version, "0.4.5"):
        return 0.95
    if before(version, "0.4.9"):
        return 0.90
    return 1.0


def _prefill_count(sizes: tuple[int, ...], args: ServerArgs, shape: ModelShape) -> int:
    """Prefill graphs the runner captures: the release's list, capped at --max-total-tokens (the runner never
    captures a batch larger than the pool) and for MLA at 8192 tokens (0.5.23 cuda_graph_hook.py:510-520)."""
    cap = args.max_total_tokens
    if shape.is_mla:
        cap = 8192 if cap is None else min(cap, 8192)
    return len([s for s in sizes if cap is None or s <= cap])


def describe(resolved: Resolved) -> Mapping[str, object]:
    """The resolved defaults for the JSON output: which release's rules and what they chose."""
    return {"version": resolved.version, "rules": resolved.rules,
            "chunked_prefill_size": resolved.chunked_prefill_size,
            "cuda_graph_max_bs": resolved.decode_max_bs, "decode_cuda_graph": resolved.decode_graph,
            "decode_graph_sizes": len(resolved.decode_graph_sizes), "prefill_cuda_graph": resolved.prefill_graph,
            "prefill_graph_sizes": resolved.prefill_graph_sizes, "page_size": resolved.page_size,
            "reserved_mib": resolved.reserved_mb}
