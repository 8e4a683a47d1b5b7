"""SGLang's command-line flags per release: introspected from the installed SGLang (once per version, in a
subprocess, cached) or read from the release data bundled with sglwrap (``sglwrap/data/sglang/``).

SGLang's parser (``argparse.ArgumentParser(prog="sglang serve")`` + ``ServerArgs.add_cli_args``) keeps
``allow_abbrev=True``: a prefix of a flag binds silently, and a prefix of two flags is an "ambiguous option"
error (``--cuda-graph-max-bs`` in 0.5.23). Importing ``sglang.srt.server_args`` pulls in torch (seconds) and
``import sglang`` edits ``os.environ``, hence the subprocess. ``sglwrap.sglang.cmdline`` builds a parser from a
table; nothing else reads SGLang's argv.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from sglwrap.errors import ConfigError
from sglwrap.fsutil import atomic_write_text
from sglwrap.sglang.release import TargetRelease, installed_version_text, resolve_target, target_python
from sglwrap.versions import parse as parse_version

TABLE_SCHEMA = 2

_INTROSPECT = r"""
import argparse, importlib.metadata as md, json, sys
from sglang.srt.server_args import ServerArgs
p = argparse.ArgumentParser(prog="sglang serve")
ServerArgs.add_cli_args(p)
def jsonable(v):
    try:
        json.dumps(v)
        return v
    except (TypeError, ValueError):
        return repr(v)
def type_name(t):
    if t is None:
        return None
    n = getattr(t, "__name__", type(t).__name__)
    if t in (int, float, str):
        return n
    if n == "loads" and getattr(t, "__module__", "") == "json":
        return "json"
    if n in ("str2bool", "strtobool", "_str2bool", "parse_bool", "bool"):
        return "bool"
    return "other:" + n
flags = []
for a in p._actions:
    if not a.option_strings:
        continue
    nargs = a.nargs
    if nargs is None:
        nargs = 1
    flags.append({
        "options": list(a.option_strings), "dest": a.dest, "nargs": nargs, "action": type(a).__name__,
        "type": type_name(a.type) if a.type is not None or nargs == 0 else "str",
        "choices": [jsonable(c) for c in a.choices] if a.choices else None,
        "new_flag": getattr(a, "new_flag", None), "required": bool(a.required),
        "const": jsonable(a.const),
        "default": jsonable(a.default),
    })
env = {}
try:
    from sglang.srt import environ as E
    for name, obj in vars(E.Envs).items():
        if name.startswith("SGLANG_") or isinstance(obj, E.EnvField):
            if isinstance(obj, E.EnvField):
                d = getattr(obj, "default", None)
                env[name] = {"type": type(obj).__name__,
                             "default": d if isinstance(d, (int, float, str, bool, type(None))) else repr(d)}
except Exception as e:  # the flag table is still useful without the env registry
    env = {"__error__": repr(e)}
json.dump({"schema": %d, "version": md.version("sglang"), "flags": flags, "env": env}, sys.stdout)
""" % TABLE_SCHEMA


@dataclass(frozen=True)
class FlagInfo:
    """One SGLang option: its spellings, destination, how many values it takes and of what type."""

    options: tuple[str, ...]
    dest: str
    nargs: int | str  # 0 (switch), 1, or argparse's '?', '*', '+'
    action: str
    choices: tuple[Any, ...] | None = None
    new_flag: str | None = None
    type: str | None = None  # "int" "float" "str" "json" "bool" "other:<name>"; None: unknown or a switch
    default: Any = None
    required: bool = False
    const: Any = None


@dataclass(frozen=True)
class FlagTable:
    """The flags of one SGLang version, by every option string."""

    version: str
    flags: dict[str, FlagInfo]
    env: dict[str, dict[str, Any]] = field(default_factory=dict)
    source: str = ""  # "introspected:<python>", "cache:<file>", "bundled:<file>"
    extra: dict[str, Any] = field(default_factory=dict)  # release data beyond the flags (architectures, …)

    def dests(self) -> set[str]:
        return {f.dest for f in self.flags.values()}

    def unique(self) -> list[FlagInfo]:
        """Each option once, in the table's order."""
        seen: set[int] = set()
        out: list[FlagInfo] = []
        for info in self.flags.values():
            if id(info) not in seen:
                seen.add(id(info))
                out.append(info)
        return out

    def by_dest(self, dest: str) -> FlagInfo | None:
        """The first option that stores into ``dest``."""
        for info in self.flags.values():
            if info.dest == dest:
                return info
        return None


def table_from_json(raw: dict[str, Any], source: str) -> FlagTable:
    """Build a FlagTable from introspection or generated release JSON (schema 1 or 2)."""
    flags: dict[str, FlagInfo] = {}
    for f in raw["flags"]:
        info = FlagInfo(tuple(f["options"]), f["dest"], f["nargs"], f["action"],
                        tuple(f["choices"]) if f.get("choices") else None, f.get("new_flag"),
                        f.get("type"), f.get("default"), bool(f.get("required", False)), f.get("const"))
        for opt in info.options:
            flags[opt] = info
    env = {k: v for k, v in raw.get("env", {}).items() if not k.startswith("__")}
    extra = {k: v for k, v in raw.items() if k not in ("flags", "env", "version", "schema")}
    return FlagTable(version=str(raw["version"]), flags=flags, env=env, source=source, extra=extra)


def installed_sglang_version(python: str) -> str | None:
    """The SGLang version installed for ``python`` (no import of sglang), or None."""
    return installed_version_text(python)


def cache_dir(environ: dict[str, str] | None = None) -> Path:
    """``$XDG_CACHE_HOME/sglwrap`` (default ``~/.cache/sglwrap``)."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CACHE_HOME") or os.path.join(env.get("HOME", "/tmp"), ".cache")
    return Path(base) / "sglwrap"


def bundled_dir() -> Path:
    """Where the generated per-release data ships."""
    return Path(__file__).resolve().parent.parent / "data" / "sglang"


def bundled_versions() -> list[str]:
    """SGLang releases whose data ships with sglwrap, oldest first."""
    found: list[tuple[Version, str]] = []
    for p in bundled_dir().glob("sglang-*.json"):
        text = p.name.removeprefix("sglang-").removesuffix(".json")
        try:
            found.append((Version(text), text))
        except InvalidVersion:
            continue
    return [t for _, t in sorted(found)]


def introspect(python: str) -> dict[str, Any]:
    """Run the introspection script under ``python``; raises ConfigError with SGLang's output on failure."""
    try:
        proc = subprocess.run([python, "-c", _INTROSPECT], capture_output=True, text=True, timeout=300,
                              check=False, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ConfigError(f"could not run {python} to read SGLang's flags: {e}") from None
    if proc.returncode != 0:
        tail = "\n    ".join(proc.stderr.strip().splitlines()[-8:])
        raise ConfigError(f"{python} could not import SGLang's ServerArgs (exit {proc.returncode}):\n    {tail}")
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def table_for(target: TargetRelease, environ: dict[str, str] | None = None) -> FlagTable:
    """The flag table of ``target``: introspected when it is the installed release, else bundled data."""
    if target.source == "installed":
        return _installed_table(target.python, target.text, environ)
    return bundled_table(target.text)


def flag_table(python: str | None = None, *, assume_version: str | None = None,
               environ: dict[str, str] | None = None) -> FlagTable:
    """The flag table for the release sglwrap plans for (see ``sglwrap.sglang.release``)."""
    return table_for(target_release(python, assume_version, environ), environ)


def target_release(python: str | None = None, assume_version: str | None = None,
                   environ: dict[str, str] | None = None) -> TargetRelease:
    """Which SGLang release: assumed, else installed, else the newest bundled."""
    bundled = [Version(v) for v in bundled_versions()]
    return resolve_target(python or target_python(environ), assume_version, bundled)


def _installed_table(python: str, version: str, environ: dict[str, str] | None) -> FlagTable:
    # keyed by the interpreter and by this introspection script, so a newer sglwrap never reads an older reading
    key = hashlib.sha256((os.path.realpath(python) + _INTROSPECT).encode()).hexdigest()[:10]
    cached = cache_dir(environ) / "sglang" / f"flags-{version}-{key}.json"
    if cached.is_file():
        try:
            raw = json.loads(cached.read_text())
            if raw.get("schema") == TABLE_SCHEMA and raw.get("version") == version:
                return table_from_json(raw, f"cache:{cached}")
        except (OSError, json.JSONDecodeError):
            pass
    sys.stderr.write(f"sglwrap: reading SGLang {version}'s flags from {python} (once per version, ~10 s)…\n")
    raw = introspect(python)
    cached.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(cached, json.dumps(raw), mode=0o644)
    return table_from_json(raw, f"introspected:{python}")


def bundled_table(version: str | None = None) -> FlagTable:
    """Shipped release data: the exact version, else the newest one not newer than it, else the oldest."""
    versions = bundled_versions()
    if not versions:
        raise ConfigError("SGLang is not installed and no bundled flag table ships with this sglwrap")
    pick = versions[-1]
    want = parse_version(version)
    if want is not None:
        exact = [v for v in versions if Version(v) == want]
        older = [v for v in versions if Version(v) <= want]
        pick = exact[0] if exact else (older[-1] if older else versions[0])
    path = bundled_dir() / f"sglang-{pick}.json"
    return table_from_json(json.loads(path.read_text()), f"bundled:{path.name}")


def pick_flag(candidates: list[str] | tuple[str, ...], table: FlagTable) -> str | None:
    """The first candidate spelling that exists exactly in ``table``."""
    for c in candidates:
        if c in table.flags:
            return c
    return None


def snapshot(python: str, out_dir: Path) -> Path:
    """Write the introspected table of ``python``'s SGLang as a bundled snapshot (maintainers' tool)."""
    raw = introspect(python)
    path = out_dir / f"sglang-{raw['version']}.json"
    atomic_write_text(path, json.dumps(raw, indent=0, sort_keys=True) + "\n", mode=0o644)
    return path
