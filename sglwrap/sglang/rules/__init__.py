"""SGLang's launch-time defaults, one module per era of release ranges; ``ALL_RANGES`` is every range, oldest first."""

from sglwrap.sglang.rules import bucket_reserve, legacy, terms
from sglwrap.sglang.rules._base import Range

ALL_RANGES: tuple[Range, ...] = legacy.RANGES + bucket_reserve.RANGES + terms.RANGES

__all__ = ["ALL_RANGES", "Range"]
