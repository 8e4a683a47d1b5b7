"""Output files as nccl-tests writes its JSON: never over an existing file, and never half-written.

The bytes go to a temporary file in the target directory first; ``os.link`` then gives it the name only if
that name is free (the ``"wx"`` of nccl-tests), else ``NAME.0``, ``NAME.1`` ... are tried in turn.
"""

from __future__ import annotations

import os
from pathlib import Path

from sglwrap.errors import ConfigError
from sglwrap.fsutil import write_temp

MAX_SUFFIX = 1000


def publish(tmp: Path, target: Path, mode: int = 0o644) -> bool:
    """Give the finished file ``tmp`` the name ``target`` unless that exists (False then); atomic either way."""
    try:
        os.link(tmp, target)
        return True
    except FileExistsError:
        return False
    except OSError:  # no hard links on this filesystem: reserve the name exclusively, then replace atomically
        try:
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode))
        except FileExistsError:
            return False
        os.replace(tmp, target)
        return True


def write_new(path: Path, data: bytes, mode: int = 0o644) -> Path:
    """Write ``data`` to ``path`` or, if that exists, to the first free ``path.N``; returns the path used."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise ConfigError(f"{path}: directory {parent} does not exist")
    try:
        tmp = write_temp(parent / path.name, data, mode)
    except OSError as e:
        raise ConfigError(f"{path}: cannot write there: {e.strerror}") from None
    try:
        for i in range(-1, MAX_SUFFIX):
            cand = path if i < 0 else path.with_name(f"{path.name}.{i}")
            if publish(tmp, cand, mode):
                return cand
        raise ConfigError(f"{path}: it and {path.name}.0 .. .{MAX_SUFFIX - 1} all exist; not overwriting")
    finally:
        tmp.unlink(missing_ok=True)
