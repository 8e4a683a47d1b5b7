"""Render the ``sitecustomize.py`` that carries a profile into every SGLang process, and the private run dir.

Values are rendered as Python literals with ``repr`` and never pasted as code. The run directory is
``$RUNTIME_DIRECTORY`` under systemd, else ``$XDG_RUNTIME_DIR/sglwrap/<profile-hash>``, else a fresh
``mkdtemp``; it must be a real directory owned by this user and writable by nobody else.
"""

from __future__ import annotations

import os
import stat
import string
import tempfile
from collections.abc import Mapping
from pathlib import Path

from sglwrap import __version__
from sglwrap.errors import ConfigError
from sglwrap.fsutil import atomic_write_text
from sglwrap.profiles import Profile

TEMPLATE_NAME = "sitecustomize.py.tmpl"
# Shown in each worker-env line besides NCCL_* and the profile's own variables.
ALSO_SHOWN = ("CUDA_DEVICE_MAX_CONNECTIONS", "CUDA_VISIBLE_DEVICES", "PYTORCH_CUDA_ALLOC_CONF",
              "TORCH_NCCL_ASYNC_ERROR_HANDLING", "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE")


def template_dir() -> Path:
    """Where the templates live: inside the installed package, or the checkout's ``sitecustomize_templates/``."""
    pkg = Path(__file__).resolve().parent
    for cand in (pkg / "_templates", pkg.parent / "sitecustomize_templates"):
        if (cand / TEMPLATE_NAME).is_file():
            return cand
    return pkg / "_templates"


def render_sitecustomize(profile: Profile, extra_env: Mapping[str, str] | None = None) -> str:
    """The sitecustomize.py text for ``profile`` (plus ``extra_env`` set-unless-set, e.g. feature knobs)."""
    settings = {name: (s.value, s.force) for name, s in sorted(profile.env.items())}
    for name, value in sorted((extra_env or {}).items()):
        settings.setdefault(name, (value, False))
    template = string.Template((template_dir() / TEMPLATE_NAME).read_text(encoding="utf-8"))
    comment = f"{profile.name} ({profile.hash})".replace("\n", " ")
    return template.substitute(
        SGLWRAP_VERSION=__version__,
        PROFILE_COMMENT=comment,
        PROFILE_NAME=repr(profile.name),
        PROFILE_HASH=repr(profile.hash),
        ENV_SETTINGS=repr(settings),
        ALSO_SHOWN=repr(ALSO_SHOWN),
    )


def _check_private_dir(path: Path) -> None:
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise ConfigError(f"run directory {path} is a symbolic link; refusing to write the injector there")
    if not stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"run directory {path} is not a directory")
    if st.st_uid != os.getuid():
        raise ConfigError(f"run directory {path} is owned by uid {st.st_uid}, not by you (uid {os.getuid()}); "
                          "refusing to use it")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ConfigError(f"run directory {path} is writable by others (mode {stat.S_IMODE(st.st_mode):o}); "
                          "refusing to use it")


def _ensure_private(path: Path) -> Path:
    try:
        path.mkdir(mode=0o700, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"cannot create run directory {path}: {e.strerror}") from None
    _check_private_dir(path)
    os.chmod(path, 0o700)
    return path


def run_dir_for(profile_hash: str, environ: Mapping[str, str] | None = None) -> Path:
    """Create (or validate) the private run directory of this launch: ``$RUNTIME_DIRECTORY`` (systemd: one unit,
    one launch), else ``$XDG_RUNTIME_DIR/sglwrap/<hash>-<pid>`` (the PID SGLang keeps after the exec), else a
    fresh ``mkdtemp``. Two launches never share one."""
    env = os.environ if environ is None else environ
    runtime = env.get("RUNTIME_DIRECTORY")
    if runtime:
        return _ensure_private(Path(runtime.split(":")[0]))
    xdg = env.get("XDG_RUNTIME_DIR")
    if xdg and Path(xdg).is_dir():
        parent = _ensure_private(Path(xdg) / "sglwrap")
        return _ensure_private(parent / f"{profile_hash[:16]}-{os.getpid()}")
    return Path(tempfile.mkdtemp(prefix=f"sglwrap-{profile_hash[:12]}-"))


def planned_run_dir(profile_hash: str, environ: Mapping[str, str] | None = None) -> Path:
    """Where ``run_dir_for`` would put this launch's files, without creating anything (for dry runs)."""
    env = os.environ if environ is None else environ
    runtime = env.get("RUNTIME_DIRECTORY")
    if runtime:
        return Path(runtime.split(":")[0])
    xdg = env.get("XDG_RUNTIME_DIR")
    if xdg and Path(xdg).is_dir():
        return Path(xdg) / "sglwrap" / f"{profile_hash[:16]}-{os.getpid()}"
    return Path(tempfile.gettempdir()) / f"sglwrap-{profile_hash[:12]}-XXXXXXXX"


def write_sitecustomize(run_dir: Path, text: str) -> Path:
    """Write ``sitecustomize.py`` into ``run_dir`` atomically; returns its path."""
    path = run_dir / "sitecustomize.py"
    atomic_write_text(path, text, mode=0o600)
    return path
