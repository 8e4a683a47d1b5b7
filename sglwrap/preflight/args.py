"""The few SGLang launch arguments preflight reasons about, read from argv without importing SGLang.

Aliases follow SGLang 0.5.23's parser (``--tp``/``--tp-size``/``--tensor-parallel-size`` ...). The flag table
check (``sglang-flags``) separately verifies that every option exists in the installed SGLang.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

_ALIASES: dict[str, str] = {
    "--tp": "tp", "--tp-size": "tp", "--tensor-parallel-size": "tp",
    "--pp": "pp", "--pp-size": "pp", "--pipeline-parallel-size": "pp",
    "--dp": "dp", "--dp-size": "dp", "--data-parallel-size": "dp",
    "--ep": "ep", "--ep-size": "ep", "--expert-parallel-size": "ep",
    "--attn-dp-size": "attn_dp", "--nnodes": "nnodes",
    "--moe-a2a-backend": "moe_a2a_backend", "--chunked-prefill-size": "chunked_prefill_size",
    "--flashinfer-allreduce-fusion-backend": "fusion_backend", "--device": "device", "--dtype": "dtype",
}


@dataclass(frozen=True)
class LaunchArgs:
    """Parallelism and communication options of one launch (SGLang defaults where absent)."""

    argv: tuple[str, ...] = ()
    options: frozenset[str] = frozenset()  # every --option written (value part stripped)
    values: dict[str, str] = field(default_factory=dict)  # canonical name -> last value

    def _int(self, key: str, default: int) -> int:
        try:
            return int(self.values[key])
        except (KeyError, ValueError):
            return default

    @property
    def tp(self) -> int:
        return self._int("tp", 1)

    @property
    def pp(self) -> int:
        return self._int("pp", 1)

    @property
    def dp(self) -> int:
        return self._int("dp", 1)

    @property
    def ep(self) -> int:
        return self._int("ep", 1)

    @property
    def nnodes(self) -> int:
        return self._int("nnodes", 1)

    @property
    def attn_dp(self) -> int:
        """Attention-DP size: ``--attn-dp-size`` (0.5.23), or ``--dp-size`` with ``--enable-dp-attention``."""
        if "attn_dp" in self.values:
            return self._int("attn_dp", 1)
        return self.dp if "--enable-dp-attention" in self.options else 1

    @property
    def gpus_needed(self) -> int:
        """GPUs the launch occupies across all nodes: tp x pp, times dp unless DP lives inside attention."""
        dp_outside = 1 if self.attn_dp > 1 else self.dp
        return self.tp * self.pp * dp_outside

    def has(self, *flags: str) -> bool:
        return any(f in self.options for f in flags)

    def get(self, key: str) -> str | None:
        return self.values.get(key)


def parse_launch_args(argv: Sequence[str]) -> LaunchArgs:
    """Read ``--flag value`` / ``--flag=value`` pairs; values are the next token unless it is an option."""
    options: set[str] = set()
    values: dict[str, str] = {}
    i = 0
    toks = list(argv)
    while i < len(toks):
        tok = toks[i]
        i += 1
        if not tok.startswith("--") or tok == "--":
            continue
        name, eq, val = tok.partition("=")
        options.add(name)
        if not eq and i < len(toks) and _is_value(toks[i]):
            val = toks[i]
            i += 1
        if name in _ALIASES and (eq or val):
            values[_ALIASES[name]] = val
    return LaunchArgs(argv=tuple(toks), options=frozenset(options), values=values)


def _is_value(tok: str) -> bool:
    if not tok.startswith("-"):
        return True
    try:
        float(tok)
        return True
    except ValueError:
        return False
