"""Atomic file writes: a temp file in the target directory, then os.replace, so no reader sees half a file."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


def cache_dir(environ: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CACHE_HOME/sglwrap`` (default ``~/.cache/sglwrap``)."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CACHE_HOME") or os.path.join(env.get("HOME") or os.path.expanduser("~"), ".cache")
    return Path(base) / "sglwrap"


def atomic_write_text(path: Path, text: str, mode: int = 0o600) -> None:
    """Write ``text`` to ``path`` atomically with permission bits ``mode``."""
    atomic_write_bytes(path, text.encode("utf-8"), mode)


def write_temp(path: Path, data: bytes, mode: int = 0o600) -> Path:
    """``data`` in a finished (fsynced, ``mode``) temp file beside ``path``, ready to be renamed or linked to it."""
    import tempfile  # not on the fast path's import list: only writers need it

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def atomic_write_bytes(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Write ``data`` to ``path`` atomically (temp file in the same directory, fsync, rename) with ``mode``."""
    tmp = write_temp(path, data, mode)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
