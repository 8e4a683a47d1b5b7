"""Validate ``SGLANG_*`` variables against the registry of the installed SGLang (``srt/environ.py`` ``Envs``).

SGLang parses its knobs itself (``EnvBool`` accepts true/1/yes/y/false/0/no/n, ``EnvInt`` is ``int()``;
SGLang 0.5.23 ``srt/environ.py:143-158``), but an unknown name is silently ignored — hence the check here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sglwrap.errors import ProfileError

_BOOL_WORDS = ("true", "1", "yes", "y", "false", "0", "no", "n")


def _registry() -> tuple[dict[str, dict[str, Any]], str]:
    from sglwrap.sglang import flags as sglang_args

    table = sglang_args.flag_table()
    return table.env, table.version


def check(path: Path, name: str, value: Any) -> str:
    """The string to set for SGLang knob ``name``; ProfileError naming the file, key and allowed values."""
    env, version = _registry()
    if not env:
        return _scalar(path, name, value)
    spec = env.get(name)
    if spec is None:
        import difflib

        close = difflib.get_close_matches(name, [n for n in env if n.startswith("SGLANG_")], n=1, cutoff=0.75)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        raise ProfileError(f"{path}: key 'env.{name}': SGLang {version} has no such variable (it would be "
                           f"silently ignored).{hint}")
    text = _scalar(path, name, value)
    kind = spec.get("type", "EnvStr")
    if "Bool" in kind:
        if text.lower() not in _BOOL_WORDS:
            raise ProfileError(f"{path}: key 'env.{name}': bad value {value!r}; allowed: {', '.join(_BOOL_WORDS)}")
    elif "Int" in kind:
        try:
            int(text)
        except ValueError:
            raise ProfileError(f"{path}: key 'env.{name}': bad value {value!r}; allowed: an integer") from None
    elif "Float" in kind:
        try:
            float(text)
        except ValueError:
            raise ProfileError(f"{path}: key 'env.{name}': bad value {value!r}; allowed: a number") from None
    return text


def _scalar(path: Path, name: str, value: Any) -> str:
    if isinstance(value, (dict, list)) or value is None:
        raise ProfileError(f"{path}: key 'env.{name}': {value!r} must be a scalar")
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)
