"""NCCL device memory as a function of the profile's NCCL variables, fitted to measurements on 2x H200.

Data: ``docs/data/nccl_memory_h200x2.json`` (``benchmarks/gpu/nccl_memory_sweep.py``, NCCL 2.28.9, torch 2.11)
and ``shared/data/nccl_sweep_h200x2.json``. Fit and residuals: ``docs/memory-model.md``. The model is

    process_fixed (first communicator in a process, once)              448 MiB
  + per communicator: k0 + n_coll x per_channel(cuMem, buffsize) + max(0, n_p2p - n_coll) x per_p2p_channel

with ``n_coll``/``n_p2p`` NCCL's channel counts after ``NCCL_MIN/MAX_NCHANNELS``. More than 2 ranks connect a
tree beside the ring (NCCL ``src/transport/generic.cc``): the per-channel term is doubled there, an
extrapolation not measured here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from sglwrap.envvars import nccl_int
from sglwrap.record import Record

MIB = 1 << 20
PROCESS_FIXED_MIB = 448.0  # init - second communicator, all 36 configurations (spread 446-448)
# per channel (MiB) by buffer size (bytes), measured at 1/2/4/8/16/32 forced channels, 2 ranks, P2P over NVLink
_PER_CHANNEL = {
    "0": {131072: 8.25, 1 << 20: 12.0, 4 << 20: 20.0, 16 << 20: 32.0},  # NCCL_CUMEM_ENABLE=0 (SGLang's default)
    "1": {131072: 14.0, 4 << 20: 18.0},
}
_K0 = {"0": 2.0, "1": 4.0}
_PER_P2P_ONLY_CHANNEL = {"0": 8.0, "1": 6.0}  # default: 24 coll + 32 p2p channels -> 64 / 48 MiB more
_SHM_PER_CHANNEL = {"0": 2.0, "1": 6.0}  # NCCL_P2P_DISABLE=1: buffers in host memory
# NCCL's own channel choice when not forced (measured: 2x H200 NV18 "24 coll channels ... 32 p2p channels").
DEFAULT_CHANNELS = {"nvswitch": (24, 32), "nvlink": (24, 32), "pcie": (4, 4)}
DEFAULT_BUFFSIZE = 4 << 20


class NcclSettings(Record):
    """The NCCL variables that move device memory, as SGLang's workers will see them."""

    min_channels: int | None
    max_channels: int | None
    buffsize: int
    cumem: str  # "0" or "1"
    p2p: bool
    nvls: bool

    @classmethod
    def from_env(cls, env: Mapping[str, str], *, p2p_possible: bool, sglang_sets_cumem: bool = True
                 ) -> NcclSettings:
        """Read the profile's env; SGLang forces NCCL_CUMEM_ENABLE=0 and NCCL_NVLS_ENABLE=0 unless set
        (``srt/entrypoints/engine.py:1878-1921``)."""
        def _int(name: str) -> int | None:  # as NCCL reads it: strtoll, so "4M" is 4 (never a crash)
            return nccl_int(env.get(name) or env.get(name.replace("NCHANNELS", "NRINGS")))

        buff = _int("NCCL_BUFFSIZE")
        cumem = env.get("NCCL_CUMEM_ENABLE", "0" if sglang_sets_cumem else "1")
        return cls(
            min_channels=_int("NCCL_MIN_NCHANNELS"), max_channels=_int("NCCL_MAX_NCHANNELS"),
            buffsize=buff if buff and buff > 0 else DEFAULT_BUFFSIZE,
            cumem="1" if cumem.strip() not in ("0", "") else "0",
            p2p=p2p_possible and env.get("NCCL_P2P_DISABLE", "0") in ("0", ""),
            nvls=env.get("NCCL_NVLS_ENABLE", "0") not in ("0", ""),
        )


class NcclCost(Record):
    """Device memory of NCCL per rank, split by when it appears in SGLang's startup."""

    process_fixed_bytes: int
    per_comm_bytes: int
    coll_channels: int
    p2p_channels: int
    formula: str


def channels(s: NcclSettings, interconnect: str) -> tuple[int, int]:
    """(coll, p2p) channels: NCCL's topology default clamped by MAX, raised to MIN (``graph/connect.cc``)."""
    coll, p2p = DEFAULT_CHANNELS.get(interconnect, (4, 4))
    if s.max_channels is not None:
        coll = min(coll, s.max_channels)
        p2p = min(p2p, 1 << max(0, math.ceil(math.log2(max(1, s.max_channels)))))
    if s.min_channels is not None:
        coll = max(coll, s.min_channels)
        p2p = max(p2p, coll)
    if s.min_channels is not None or s.max_channels is not None:
        p2p = coll  # forced counts: the sweep saw "N coll channels ... N p2p channels" every time
    return max(1, min(coll, 64)), max(1, min(p2p, 64))


def per_channel_mib(cumem: str, buffsize: int) -> float:
    """Interpolate the measured per-channel cost in log2(buffsize); beyond the range, +1 MiB per MiB."""
    table = sorted(_PER_CHANNEL[cumem].items())
    if buffsize <= table[0][0]:
        return table[0][1]
    if buffsize >= table[-1][0]:
        return table[-1][1] + (buffsize - table[-1][0]) / MIB
    for (b0, c0), (b1, c1) in zip(table, table[1:]):
        if b0 <= buffsize <= b1:
            t = (math.log2(buffsize) - math.log2(b0)) / (math.log2(b1) - math.log2(b0))
            return c0 + t * (c1 - c0)
    return table[-1][1]


def _p2p_only_mib(cumem: str, per_channel: float) -> float:
    """Cost of a p2p channel beyond the coll channels: with cuMem off it scales with the buffer (0 at 128 KiB,
    8 MiB at 4 MiB: cumem0_default vs cumem0_default_buf128k); with cuMem on it is 6 MiB at both."""
    if cumem == "1":
        return _PER_P2P_ONLY_CHANNEL["1"]
    low, high = _PER_CHANNEL["0"][131072], _PER_CHANNEL["0"][4 << 20]
    return max(0.0, _PER_P2P_ONLY_CHANNEL["0"] * (per_channel - low) / (high - low))


def comm_cost(s: NcclSettings, *, ranks: int, interconnect: str) -> NcclCost:
    """Memory one rank pays for one communicator over ``ranks`` ranks (0 for a single rank)."""
    if ranks <= 1:
        return NcclCost(0, 0, 0, 0, "single rank: SGLang builds no NCCL communicator")
    coll, p2p = channels(s, interconnect)
    if s.p2p:
        per = per_channel_mib(s.cumem, s.buffsize)
        extra = max(0, p2p - coll) * _p2p_only_mib(s.cumem, per)
    else:
        per, extra = _SHM_PER_CHANNEL[s.cumem], 0.0
    algos = 2 if ranks > 2 else 1  # ring + tree beyond 2 ranks (extrapolated)
    comm = _K0[s.cumem] + coll * per * algos + extra
    formula = (f"{_K0[s.cumem]:g} + {coll} ch x {per:.2f} MiB{' x 2 (ring+tree)' if algos == 2 else ''}"
               f"{f' + {extra:g} (p2p-only channels)' if extra else ''} = {comm:.0f} MiB/communicator"
               f" (cuMem {s.cumem}, buffsize {s.buffsize}, {'P2P' if s.p2p else 'SHM'})")
    return NcclCost(int(PROCESS_FIXED_MIB * MIB), int(comm * MIB), coll, p2p, formula)
