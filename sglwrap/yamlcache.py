"""YAML documents parsed once per content: the parse is kept as JSON under the cache directory, keyed by the text's
hash, so a warm start reads JSON instead of importing PyYAML and running its pure-Python parser (about 15 ms)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sglwrap import diskcache


class YamlSyntaxError(ValueError):
    """The text is not valid YAML; ``line``/``column`` are 1-based where PyYAML knew them."""

    def __init__(self, problem: str, line: int | None, column: int | None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.line = line
        self.column = column


def safe_load(text: str, environ: Mapping[str, str] | None = None) -> Any:
    """``yaml.safe_load(text)``, from the cache when this exact text was parsed before. Raises YamlSyntaxError.
    Documents that do not round-trip through JSON (dates, non-string keys) are parsed every time."""
    name = diskcache.digest(text)
    hit = diskcache.load("yaml", name, environ)
    if hit is not None:
        return hit
    import yaml

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise YamlSyntaxError(getattr(e, "problem", None) or str(e), mark.line + 1 if mark else None,
                              mark.column + 1 if mark else None) from None
    try:
        encoded = json.dumps(data)
        if json.loads(encoded) != data:
            return data
    except (TypeError, ValueError):
        return data
    if data is not None:  # an empty document is parsed again (cheap), never mistaken for a miss
        diskcache.store("yaml", name, data, environ)
    return data
