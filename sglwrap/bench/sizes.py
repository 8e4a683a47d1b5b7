"""Message sizes: what a model's tensor-parallel all-reduces send, plus the standard power-of-4 sweep.

A row-parallel layer all-reduces the full hidden state of every token in the step, whatever the TP degree:
``hidden_size x tokens x dtype bytes``. Decode steps carry one token per request (batch sizes); a speculative
verify pass carries ``batch x draft tokens``. SGLang captures each decode step as a CUDA graph holding two such
all-reduces per layer (attention output and MLP down projection), so a graph of ``2 x num_hidden_layers``
all-reduces is the shape measured in ``--graph`` mode.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from sglwrap.errors import ConfigError, UsageError
from sglwrap.record import Record

KIB = 1024
MIB = 1024 * 1024
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4, "float8_e4m3fn": 1}
# nccl-tests' usual -b/-e/-f sweep, shortened to what finishes in seconds per configuration.
STANDARD_NCCL = tuple(KIB * 4**i for i in range(9))  # 1 KiB .. 64 MiB
STANDARD_GLOO = tuple(KIB * 4**i for i in range(4))  # 1 KiB .. 64 KiB: CPU-only CI
DEFAULT_DECODE_BS = (1, 8, 32, 128)
DEFAULT_VERIFY_BS = (1, 8)
DEFAULT_GRAPH_OPS = 64


class ModelShape(Record):
    """What the message sizes need from a model's config.json."""

    name: str
    hidden_size: int
    num_layers: int | None
    dtype: str
    source: str

    @property
    def dtype_bytes(self) -> int:
        return DTYPE_BYTES.get(self.dtype, 2)

    @property
    def graph_ops(self) -> int:
        """All-reduces in one decode step's CUDA graph: two per layer."""
        return 2 * self.num_layers if self.num_layers else DEFAULT_GRAPH_OPS


class Size(Record):
    """One message size and why it is measured (labels such as ``decode bs=8``; empty for the sweep)."""

    nbytes: int
    labels: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return ", ".join(self.labels)


def bundled_models_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "data" / "models"


def find_config(model: str) -> Path:
    """``config.json`` of ``model``: a directory, a config file, or a bundled model by name (or HF id's tail)."""
    p = Path(model).expanduser()
    if p.is_file():
        return p
    if (p / "config.json").is_file():
        return p / "config.json"
    bundled = bundled_models_dir() / model.rstrip("/").split("/")[-1] / "config.json"
    if bundled.is_file():
        return bundled
    known = sorted(d.name for d in bundled_models_dir().iterdir() if (d / "config.json").is_file())
    raise ConfigError(f"--model-path {model}: no config.json there and no bundled model of that name "
                      f"(bundled: {', '.join(known) or 'none'})")


def model_shape(model: str) -> ModelShape:
    """Read ``hidden_size``, ``num_hidden_layers`` and ``torch_dtype`` (top level or ``text_config``)."""
    path = find_config(model)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"{path}: cannot read the model config: {e}") from None
    cfg = raw
    if "hidden_size" not in cfg and isinstance(raw.get("text_config"), dict):
        cfg = raw["text_config"]
    hidden = cfg.get("hidden_size")
    if not isinstance(hidden, int) or hidden <= 0:
        raise ConfigError(f"{path}: no positive integer 'hidden_size' (top level or text_config)")
    layers = cfg.get("num_hidden_layers")
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or raw.get("torch_dtype") or "bfloat16")
    return ModelShape(name=Path(model).name or model, hidden_size=hidden,
                      num_layers=layers if isinstance(layers, int) and layers > 0 else None,
                      dtype=dtype, source=str(path))


def model_sizes(shape: ModelShape, decode_bs: Sequence[int] = DEFAULT_DECODE_BS,
                verify_bs: Sequence[int] = DEFAULT_VERIFY_BS, draft_tokens: int = 4) -> list[Size]:
    """Decode steps (one token per request) and speculative verify passes (``draft_tokens`` per request)."""
    per_token = shape.hidden_size * shape.dtype_bytes
    out = [Size(per_token * bs, (f"decode bs={bs}",)) for bs in decode_bs]
    if draft_tokens > 0:
        out += [Size(per_token * bs * draft_tokens, (f"verify bs={bs}x{draft_tokens}",)) for bs in verify_bs]
    return out


def parse_size(text: str) -> int:
    """``43008``, ``42K``/``42KiB`` (KiB), ``1M``/``1MiB``, ``64MB`` (MiB too: nccl-tests' -b/-e convention)."""
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    mult = 1
    if t and t[-1] in "KMG":
        mult = {"K": KIB, "M": MIB, "G": 1024 * MIB}[t[-1]]
        t = t[:-1]
    try:
        value = int(t) * mult
    except ValueError:
        raise UsageError(f"--sizes: {text!r} is not a size (e.g. 43008, 42K, 1M, 64MiB)") from None
    if value <= 0:
        raise UsageError(f"--sizes: {text!r} must be positive")
    if value > 64 * 1024 * MIB:
        raise UsageError(f"--sizes: {text!r} is more than 64 GiB, larger than any GPU's all-reduce buffer")
    return value


def parse_sizes(values: Iterable[str]) -> list[Size]:
    out = []
    for v in values:
        out += [Size(parse_size(s), ("given",)) for s in v.split(",") if s.strip()]
    return out


def merge(*groups: Iterable[Size], dtype_bytes: int = 2) -> list[Size]:
    """One Size per byte count (rounded down to whole elements), labels merged, ascending."""
    by: dict[int, list[str]] = {}
    for group in groups:
        for s in group:
            n = max(dtype_bytes, s.nbytes - s.nbytes % dtype_bytes)
            labels = by.setdefault(n, [])
            labels += [lbl for lbl in s.labels if lbl not in labels]
    return [Size(n, tuple(by[n])) for n in sorted(by)]


def human(nbytes: int) -> str:
    """1024 -> '1 KiB', 43008 -> '42 KiB', 3 MiB + 1 -> '3.0 MiB'."""
    for unit, div in (("GiB", 1024 * MIB), ("MiB", MIB), ("KiB", KIB)):
        if nbytes >= div:
            v = nbytes / div
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.1f} {unit}"
    return f"{nbytes} B"
