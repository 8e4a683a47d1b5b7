"""Which Python environment an interpreter path stands for.

Two venvs built from the same base Python share one binary (``bin/python`` is a symlink to it, or a copy), so the
binary's ``realpath`` cannot tell them apart; what differs is the prefix (``sys.prefix``: the directory holding
``pyvenv.cfg``) and so the site-packages. An interpreter is identified by that prefix, never by its binary.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def _venv_of(path: Path) -> Path | None:
    # CPython looks for pyvenv.cfg beside the executable and one level up (the PEP 405 layout)
    for d in (path.parent, path.parent.parent):
        if (d / "pyvenv.cfg").is_file():
            return d
    return None


def interpreter_id(python: str) -> str:
    """A key naming the environment ``python`` runs in: its venv's resolved prefix, else the resolved binary."""
    if python == sys.executable:
        return running_id()
    if os.sep in python:
        found = python
    else:
        import shutil

        found = shutil.which(python) or python
    venv = _venv_of(Path(os.path.abspath(found)))
    if venv is not None:
        return os.path.realpath(venv)
    real = os.path.realpath(found)
    venv = _venv_of(Path(real))
    return os.path.realpath(venv) if venv is not None else real


def running_id() -> str:
    """The key of the interpreter running sglwrap (``sys.prefix`` inside a venv)."""
    if sys.prefix != sys.base_prefix:
        return os.path.realpath(sys.prefix)
    return os.path.realpath(sys.executable)


def is_running(python: str) -> bool:
    """Whether ``python`` is the environment running sglwrap (so its ``sys.path`` can be read in-process)."""
    return interpreter_id(python) == running_id()
