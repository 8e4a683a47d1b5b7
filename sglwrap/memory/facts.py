"""The model's facts as every consumer reads them: its config.json (found as the memory planner finds it: a local
directory, the offline Hugging Face cache, a built-in config), where it came from, its shape, and the traits the
release rules read. Preflight's checks and the knowledge base's conditions take them from here."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from sglwrap.errors import ConfigError, UsageError
from sglwrap.memory.model import ModelShape
from sglwrap.record import Record


class ModelFacts(Record):
    """The model's config.json (raw), where it came from, and its shape as SGLang sizes it."""

    config: dict[str, Any]
    source: str
    shape: ModelShape
    directory: Path
    text: str = ""  # config.json as read (what keys a cache by its content)

    @property
    def text_config(self) -> dict[str, Any]:
        for key in ("text_config", "llm_config", "language_config"):
            sub = self.config.get(key)
            if isinstance(sub, dict) and sub.get("num_hidden_layers"):
                return sub
        return self.config

    @property
    def architectures(self) -> list[str]:
        archs = self.config.get("architectures") or self.text_config.get("architectures") or []
        return [str(a) for a in archs]


@functools.lru_cache(maxsize=16)
def read_model_facts(model_path: str) -> ModelFacts | str:
    """The model's config.json read once per run (as the memory planner finds it), or why it cannot be read."""
    from sglwrap.memory.model import config_text, find_config, shape_from_config

    try:
        path, source = find_config(model_path)
        text = config_text(path)
        cfg = json.loads(text)
        shape = shape_from_config(cfg, name=model_path.rstrip("/").rsplit("/", 1)[-1], source=source,
                                  directory=str(path.parent))
    except UsageError:
        return (f"--model-path {model_path}: no config.json (not a local directory, not in the offline Hugging Face "
                "cache, not a built-in config)")
    except (OSError, json.JSONDecodeError, ConfigError) as e:
        return f"--model-path {model_path}: cannot read its config.json ({e})"
    return ModelFacts(config=cfg, source=source, shape=shape, directory=path.parent, text=text)


def model_traits_for(model_path: str | None) -> tuple[object | None, str | None]:
    """The model facts the release rules read (the same the accountant passes), or None with why."""
    if model_path is None:
        return None, "no --model-path: the model's own rules (MLA, multimodal, hybrid) are not applied"
    from sglwrap.errors import SglwrapError
    from sglwrap.memory.defaults import model_traits
    from sglwrap.memory.model import load_shape

    try:
        return model_traits(load_shape(model_path)), None
    except SglwrapError as e:
        return None, f"the model's config was not read ({e.message}): its own rules are not applied"
