"""The fingerprint of a rehearsal: everything that can change whether this launch starts, hashed.

Parts (each hashed on its own, so a miss can say what changed; no value of a variable or argument is stored, as
they may hold secrets):
- ``argv``: the launch's exact argv (interpreter, entry point, the user's and the profile's SGLang arguments) and
  the rehearsal's ``--layers``;
- ``profile``: the profile's hash (its variables, settings and features);
- ``env``: every variable SGLang, NCCL, CUDA, torch, Triton, FlashInfer or the Hugging Face libraries read
  (by prefix, plus ``PATH``, ``LD_LIBRARY_PATH``, ``LD_PRELOAD``, ``PYTHONPATH``, ``OMP_NUM_THREADS``), one digest
  per variable, sglwrap's own ``SGLWRAP_*`` left out;
- ``packages``: version and file stamp (inode, size, mtime of the ``RECORD``/``METADATA`` file and of the import
  directory) of SGLang, sgl-kernel, torch, FlashInfer, Triton, NCCL, transformers and the other kernels SGLang
  loads: an upgrade, a reinstall or a downgrade of any of them changes it;
- ``host``: the driver version, CUDA's driver API version, the GPUs' names, memory and count, and
  ``CUDA_VISIBLE_DEVICES``;
- ``model``: the content of the model's ``config.json`` and stamps of its other small top-level files (tokenizer,
  quantization config, remote code); not its weight files, which a rehearsal never reads.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from sglwrap import __version__, diskcache
from sglwrap.host.facts import HostFacts
from sglwrap.record import Record

ENV_PREFIXES: Final = ("NCCL_", "SGLANG_", "SGL_", "CUDA_", "TORCH_", "TORCHINDUCTOR_", "PYTORCH_", "TRITON_",
                       "FLASHINFER_", "NVSHMEM_", "NVIDIA_", "GLOO_", "UCX_", "HF_", "HUGGINGFACE_", "TRANSFORMERS_",
                       "TOKENIZERS_", "MC_", "ASCEND_", "ROCM_", "HIP_")
ENV_NAMES: Final = frozenset({"PATH", "LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONPATH", "OMP_NUM_THREADS",
                              "CUDA_HOME", "CUDA_PATH"})
DISTRIBUTIONS: Final = ("sglang", "sglang-kernel", "sgl-kernel", "torch", "flashinfer-python", "flashinfer-cubin",
                        "flashinfer-jit-cache", "triton", "nvidia-nccl-cu12", "nvidia-nccl-cu13", "transformers",
                        "sgl-deep-gemm", "deep-gemm", "sgl-deep-ep", "deep-ep", "sgl-flash-mla", "vllm",
                        "nvidia-cutlass-dsl", "cuda-python", "torch-memory-saver", "xgrammar", "sglang-router")
MODEL_FILE_SUFFIXES: Final = (".json", ".py", ".model", ".txt", ".jinja", ".tiktoken")
MODEL_FILES_MAX: Final = 64
WEIGHT_INDEX_RE: Final = re.compile(r"\.(safetensors|bin|pt|gguf)\.index\.json$")


class Fingerprint(Record):
    """The digest and, per part, what went into it (digests only: never a secret's value)."""

    digest: str
    parts: dict[str, Any]

    @property
    def short(self) -> str:
        return self.digest[:12]

    def changed_since(self, other: Mapping[str, Any]) -> list[str]:
        """What differs from ``other`` (an earlier fingerprint's parts), in words: ``env NCCL_ALGO``, ``packages
        sglang``, ``profile``, ``model config.json``."""
        out: list[str] = []
        for part, value in self.parts.items():
            old = other.get(part)
            if old == value:
                continue
            if isinstance(value, dict) and isinstance(old, dict):
                names = sorted(k for k in set(value) | set(old) if value.get(k) != old.get(k))
                out.append(f"{part} {', '.join(names)}" if names else part)
            else:
                out.append(part)
        return out


def relevant_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables SGLang and the libraries it loads read, each as a digest of its value."""
    return {k: diskcache.key(v) for k, v in sorted(environ.items())
            if not k.startswith("SGLWRAP_") and (k in ENV_NAMES or k.startswith(ENV_PREFIXES))}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _stamp(path: Path) -> list[int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return [st.st_ino, st.st_size, st.st_mtime_ns]


def package_stamps(site_dirs: Iterable[str], names: Sequence[str] = DISTRIBUTIONS) -> dict[str, Any]:
    """Per installed distribution among ``names``: its version and the stamps of its metadata and import dir."""
    wanted = {_norm(n): n for n in names}
    out: dict[str, Any] = {}
    for site in site_dirs:
        try:
            entries = sorted(os.listdir(site))
        except OSError:
            continue
        for entry in entries:
            if not entry.endswith((".dist-info", ".egg-info")):
                continue
            stem = entry.rsplit(".", 1)[0]
            dist, _, version = stem.partition("-")
            name = wanted.get(_norm(dist))
            if name is None or name in out:
                continue  # the first site directory on the path wins, as for the import
            meta = Path(site) / entry
            record = meta / "RECORD" if (meta / "RECORD").exists() else meta / "METADATA"
            top = Path(site) / _norm(dist)
            out[name] = {"version": version, "metadata": _stamp(record),
                         "import_dir": _stamp(top) if top.is_dir() else None}
    return out


def host_part(facts: HostFacts | None) -> dict[str, Any]:
    """Driver, CUDA driver API and the GPUs (names, memory, count), as NVML reported them."""
    if facts is None:
        return {"facts": None}
    return {"driver": facts.driver_version, "cuda_driver": facts.cuda_driver_version,
            "gpus": [[g.index, g.name, g.memory_total_bytes, list(g.compute_capability)] for g in facts.gpus],
            "count": len(facts.gpus), "cuda_visible_devices": facts.cuda_visible_devices}


def model_part(model_path: str | None) -> dict[str, Any]:
    """The content digest of the model's config.json and stamps of its small top-level files (no weights)."""
    if not model_path:
        return {"config": None}
    from sglwrap.errors import SglwrapError
    from sglwrap.memory.model import find_config

    try:
        config, where = find_config(model_path)
        text = config.read_bytes()
    except (SglwrapError, OSError):
        return {"path": model_path, "config": None}
    out: dict[str, Any] = {"config": diskcache.digest(text),
                           "from": where.split(" ", 1)[0]}
    if where.startswith(("local", "hf-cache")):
        files: dict[str, Any] = {}
        for p in sorted(config.parent.iterdir())[:4096]:
            if p.name == "config.json" or not p.name.endswith(MODEL_FILE_SUFFIXES) or WEIGHT_INDEX_RE.search(p.name):
                continue
            if len(files) >= MODEL_FILES_MAX:
                break
            st = _stamp(p)
            if st is not None:
                files[p.name] = st[1:]  # size and mtime: an HF snapshot's files are symlinks into blobs
        out["files"] = diskcache.key(files)
    return out


def fingerprint(argv: Sequence[str], *, profile_hash: str, environ: Mapping[str, str], facts: HostFacts | None,
                model_path: str | None, site_dirs: Iterable[str], layers: int | None = None) -> Fingerprint:
    """The fingerprint of rehearsing the launch ``argv`` (see the module docstring for the parts)."""
    parts: dict[str, Any] = {
        "argv": diskcache.key([list(argv), layers]),
        "profile": profile_hash,
        "env": relevant_env(environ),
        "packages": {k: diskcache.key(v) for k, v in package_stamps(site_dirs).items()},
        "host": diskcache.key(host_part(facts)),
        "model": diskcache.key(model_part(model_path)),
        "sglwrap": __version__,
    }
    return Fingerprint(digest=diskcache.key(parts), parts=parts)
