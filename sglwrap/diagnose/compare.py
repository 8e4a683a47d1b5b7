"""Disagreements: ranks whose memory differs, and workers or nodes that ran with different NCCL settings."""

from __future__ import annotations

from collections import Counter
from typing import Final

from sglwrap.diagnose.sources import Manifest
from sglwrap.diagnose.timeline import RankMemory, WorkerEnv
from sglwrap.record import Record

COMPARED: Final = ("avail_before_weights_gib", "weight_mem_gib", "avail_after_weights_gib", "avail_final_gib")
ENV_PREFIXES: Final = ("NCCL_", "CUDA_", "SGLANG_", "TORCH_", "PYTORCH_")


class Imbalance(Record):
    """One memory field on which the ranks disagree by more than ``threshold``."""

    field: str
    min_label: str
    min_gib: float
    max_label: str
    max_gib: float

    @property
    def spread_gib(self) -> float:
        """max − min."""
        return round(self.max_gib - self.min_gib, 2)


def imbalances(ranks: tuple[RankMemory, ...]) -> tuple[Imbalance, ...]:
    """Fields whose spread over ranks is at least 0.5 GiB and 5% of the largest value."""
    out = []
    for name in COMPARED:
        vals = [(getattr(r, name), _where(r)) for r in ranks if getattr(r, name) is not None]
        if len(vals) < 2:
            continue
        lo, hi = min(vals), max(vals)
        if hi[0] - lo[0] >= max(0.5, 0.05 * abs(hi[0])):
            out.append(Imbalance(name, lo[1], lo[0], hi[1], hi[0]))
    return tuple(out)


def _where(r: RankMemory) -> str:
    return r.label if not r.node else f"{r.node}:{r.label}"


def nccl_env(env: dict[str, str]) -> dict[str, str]:
    """Only the NCCL variables of an environment."""
    return {k: v for k, v in sorted(env.items()) if k.startswith("NCCL_")}


def _runs_nccl(w: WorkerEnv) -> bool:
    # The launcher logs its line at interpreter start, before SGLang sets its own NCCL defaults in that process
    # (engine.py _set_envs_and_config), and the resource tracker never runs NCCL: compare the workers only.
    return w.role not in ("resource-tracker",) and not str(w.role or "").startswith("module:sglang")


def worker_disagreements(workers: tuple[WorkerEnv, ...]) -> tuple[str, ...]:
    """Sentences naming workers whose profile hash or NCCL variables differ from the majority."""
    out: list[str] = []
    ranked = [w for w in workers if _runs_nccl(w)]
    sig = Counter(tuple(nccl_env(w.env).items()) for w in ranked)
    common = sig.most_common(1)[0][0] if len(ranked) >= 2 else ()
    for w in ranked if len(ranked) >= 2 else []:
        mine = tuple(nccl_env(w.env).items())
        if mine != common:
            diff = _diff(dict(common), dict(mine))
            where = f", {w.node}" if w.node else ""
            out.append(f"worker pid {w.pid} ({w.role or 'unknown role'}{where}) ran {diff}")
    hashes = Counter(w.hash for w in workers)
    if len(workers) >= 2 and len(hashes) > 1:
        top = hashes.most_common(1)[0][0]
        for w in workers:
            if w.hash != top:
                out.append(f"worker pid {w.pid} ({w.node}) used profile {w.profile} hash {str(w.hash)[:12]}, "
                           f"most workers {str(top)[:12]}")
    return tuple(out[:50])


def _diff(base: dict[str, str], other: dict[str, str]) -> str:
    keys = sorted(set(base) | set(other))
    bits = [f"{k}={other.get(k, '(unset)')} (others {base.get(k, '(unset)')})" for k in keys
            if base.get(k) != other.get(k)]
    return ", ".join(bits) or "the same NCCL variables"


def manifest_disagreements(manifests: tuple[Manifest, ...]) -> tuple[str, ...]:
    """Sentences naming launch manifests (one per node) whose profile hash or NCCL variables differ."""
    if len(manifests) < 2:
        return ()
    out: list[str] = []
    ref = manifests[0]
    for m in manifests[1:]:
        if m.profile_hash != ref.profile_hash or m.profile_name != ref.profile_name:
            out.append(f"{m.source} launched profile {m.profile_name} ({str(m.profile_hash)[:12]}) but "
                       f"{ref.source} launched {ref.profile_name} ({str(ref.profile_hash)[:12]})")
        a, b = nccl_env(ref.env), nccl_env(m.env)
        if a != b:
            out.append(f"{m.source} has {_diff(a, b).replace('others', ref.source)}")
    return tuple(out)


def manifest_vs_workers(manifests: tuple[Manifest, ...], workers: tuple[WorkerEnv, ...]) -> tuple[str, ...]:
    """NCCL variables a worker really ran with that differ from what its launch manifest asked for."""
    if not manifests or not workers:
        return ()
    want = nccl_env(manifests[0].env)
    out = []
    for w in workers:
        got = nccl_env(w.env)
        bad = [k for k in want if got.get(k) != want[k] and k in got]
        if bad:
            out.append(f"worker pid {w.pid} ran " + ", ".join(f"{k}={got[k]} (manifest {want[k]})" for k in bad))
    return tuple(out[:50])
