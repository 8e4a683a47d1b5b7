"""One way for the knowledge-base tests to plan a launch: GPUs from the catalogue, a stated SGLang release (plus any
other stack versions), the baseline profile, the release's own flag table."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sglwrap.host.catalogue import resolve_assume
from sglwrap.host.probe import apply_assume_stack
from sglwrap.preflight import run_preflight
from sglwrap.profiles import load_profile
from sglwrap.sglang.flags import bundled_table


def plan(spec: str, release: str, argv: tuple[str, ...], environ: Mapping[str, str] | None = None,
         **stack: str) -> Any:
    """The preflight result of ``argv`` on ``spec`` GPUs with SGLang ``release`` and ``stack``."""
    f = apply_assume_stack(resolve_assume(spec), {"sglang": release, **stack})
    return run_preflight(f, load_profile("baseline"), argv, flags=bundled_table(release), environ=environ)


def compat(spec: str, release: str, *argv: str, **stack: str) -> Any:
    """The compat check's verdict for that launch."""
    return next(v for v in plan(spec, release, argv, **stack).checks if v.id == "compat")


def fires(entry: str, spec: str, release: str, *argv: str, **stack: str) -> bool:
    """Whether the compat check names ``entry`` for that launch."""
    return f"[{entry}]" in compat(spec, release, *argv, **stack).reason


def named_anywhere(entry: str, spec: str, release: str, argv: tuple[str, ...], environ: Mapping[str, str] | None = None,
                   **stack: str) -> bool:
    """Whether any check names ``entry`` for that launch."""
    return any(f"[{entry}]" in v.reason for v in plan(spec, release, argv, environ, **stack).checks)


def model_dir(tmp_path: Path, name: str, config: dict[str, Any]) -> str:
    """A model directory ``tmp_path/name`` holding ``config`` as its config.json (a local --model-path)."""
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(config))
    return str(d)
