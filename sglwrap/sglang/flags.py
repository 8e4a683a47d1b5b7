"""The installed SGLang's command-line flags: introspected once per version in a subprocess, then cached.

SGLang's parser (``argparse.ArgumentParser(prog="sglang serve")`` + ``ServerArgs.add_cli_args``) keeps
``allow_abbrev=True``: a prefix of a flag binds silently, and a prefix of two flags is an "ambiguous option"
error (``--cuda-graph-max-bs`` in 0.5.23). sglwrap therefore emits exact flags only, resolves the user's
tokens the way argparse would, and reports ambiguity before SGLang starts. Importing ``sglang.srt.server_args``
pulls in torch (seconds) and ``import sglang`` edits ``os.environ``, hence the subprocess.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglwrap.errors import ConfigError, UsageError
from sglwrap.fsutil import atomic_write_text

TABLE_SCHEMA = 1

_INTROSPECT = r"""
import argparse, importlib.metadata as md, json, sys
from sglang.srt.server_args import ServerArgs
p = argparse.ArgumentParser(prog="sglang serve")
ServerArgs.add_cli_args(p)
flags = []
for a in p._actions:
    if not a.option_strings:
        continue
    nargs = a.nargs
    if nargs is None:
        nargs = 1
    flags.append({
        "options": list(a.option_strings), "dest": a.dest, "nargs": nargs, "action": type(a).__name__,
        "choices": sorted(map(str, a.choices)) if a.choices else None,
        "new_flag": getattr(a, "new_flag", None),
        "default": a.default if isinstance(a.default, (int, float, str, bool, type(None))) else repr(a.default),
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
    """One SGLang option: its spellings, destination and how many values it takes."""

    options: tuple[str, ...]
    dest: str
    nargs: int | str  # 0 (switch), 1, or argparse's '?', '*', '+'
    action: str
    choices: tuple[str, ...] | None = None
    new_flag: str | None = None


@dataclass(frozen=True)
class FlagTable:
    """The flags of one SGLang version, by every option string."""

    version: str
    flags: dict[str, FlagInfo]
    env: dict[str, dict[str, Any]] = field(default_factory=dict)
    source: str = ""  # "introspected:<python>", "cache:<file>", "bundled:<file>"

    def dests(self) -> set[str]:
        return {f.dest for f in self.flags.values()}


def table_from_json(raw: dict[str, Any], source: str) -> FlagTable:
    """Build a FlagTable from the introspection JSON."""
    flags: dict[str, FlagInfo] = {}
    for f in raw["flags"]:
        info = FlagInfo(tuple(f["options"]), f["dest"], f["nargs"], f["action"],
                        tuple(f["choices"]) if f.get("choices") else None, f.get("new_flag"))
        for opt in info.options:
            flags[opt] = info
    env = {k: v for k, v in raw.get("env", {}).items() if not k.startswith("__")}
    return FlagTable(version=str(raw["version"]), flags=flags, env=env, source=source)


def target_python(environ: dict[str, str] | None = None) -> str:
    """The interpreter that runs SGLang: ``$SGLWRAP_PYTHON`` or the one running sglwrap."""
    env = os.environ if environ is None else environ
    return env.get("SGLWRAP_PYTHON") or sys.executable


def installed_sglang_version(python: str) -> str | None:
    """The SGLang version installed for ``python`` (no import of sglang), or None."""
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        try:
            return importlib.metadata.version("sglang")
        except importlib.metadata.PackageNotFoundError:
            return None
    code = "import importlib.metadata as m\ntry: print(m.version('sglang'))\nexcept Exception: print('')"
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def cache_dir(environ: dict[str, str] | None = None) -> Path:
    """``$XDG_CACHE_HOME/sglwrap`` (default ``~/.cache/sglwrap``)."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CACHE_HOME") or os.path.join(env.get("HOME", "/tmp"), ".cache")
    return Path(base) / "sglwrap"


def bundled_dir() -> Path:
    return Path(__file__).resolve().parent / "data" / "sglang"


def bundled_versions() -> list[str]:
    """SGLang versions whose flag tables ship with sglwrap (snapshots of real introspection)."""
    return sorted((p.stem.removeprefix("sglang-") for p in bundled_dir().glob("sglang-*.json")),
                  key=_version_key)


def _version_key(v: str) -> tuple[int, ...]:
    parts = []
    for p in v.replace("post", ".").replace("rc", ".").split("."):
        parts.append(int(p) if p.isdigit() else 0)
    return tuple(parts)


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
    return json.loads(proc.stdout)


def flag_table(python: str | None = None, *, assume_version: str | None = None,
               environ: dict[str, str] | None = None) -> FlagTable:
    """The flag table for the SGLang that ``python`` runs (cached per version), or a bundled snapshot.

    With no SGLang installed (planning on a laptop), or with ``assume_version``, the bundled snapshot for that
    version is used; the table's ``source`` says which.
    """
    python = python or target_python(environ)
    version = installed_sglang_version(python) if assume_version is None else None
    if version is not None:
        key = hashlib.sha256(os.path.realpath(python).encode()).hexdigest()[:10]
        cached = cache_dir(environ) / "sglang" / f"flags-{version}-{key}.json"
        if cached.is_file():
            try:
                raw = json.loads(cached.read_text())
                if raw.get("schema") == TABLE_SCHEMA and raw.get("version") == version:
                    return table_from_json(raw, f"cache:{cached}")
            except (OSError, json.JSONDecodeError):
                pass
        raw = introspect(python)
        cached.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(cached, json.dumps(raw), mode=0o644)
        return table_from_json(raw, f"introspected:{python}")
    return bundled_table(assume_version)


def bundled_table(version: str | None = None) -> FlagTable:
    """A shipped snapshot: the exact version, else the newest one not newer than it, else the newest."""
    versions = bundled_versions()
    if not versions:
        raise ConfigError("SGLang is not installed and no bundled flag table ships with this sglwrap")
    pick = versions[-1]
    if version is not None:
        older = [v for v in versions if _version_key(v) <= _version_key(version)]
        pick = version if version in versions else (older[-1] if older else versions[0])
    path = bundled_dir() / f"sglang-{pick}.json"
    return table_from_json(json.loads(path.read_text()), f"bundled:{path.name}")


# --- reading argv the way SGLang's argparse reads it -------------------------------------------------------


@dataclass(frozen=True)
class ParsedArg:
    """One option occurrence in the user's SGLang argv."""

    token: str  # as written
    flag: str  # the exact option it resolves to
    dest: str
    values: tuple[str, ...]
    abbreviated: bool


def resolve_option(token: str, table: FlagTable) -> str:
    """The exact option ``token`` (``--x`` or ``--x=v``) binds to in SGLang's parser; UsageError if none/ambiguous."""
    name = token.split("=", 1)[0]
    if name in table.flags:
        return name
    matches = sorted({opt for opt in table.flags if opt.startswith(name) and opt.startswith("--")})
    if len(matches) == 1:
        return matches[0]
    if not matches:
        import difflib

        close = difflib.get_close_matches(name, [o for o in table.flags if o.startswith("--")], n=3)
        hint = f" Did you mean {', '.join(close)}?" if close else ""
        raise UsageError(f"SGLang {table.version} has no option {name!r}.{hint}")
    raise UsageError(f"SGLang {table.version}: {name!r} is ambiguous (its parser would refuse it with exit 2): "
                     f"it could match {', '.join(matches)}. Write the exact flag.")


def _is_value(tok: str) -> bool:
    return not tok.startswith("-") or _looks_negative_number(tok)


def _looks_negative_number(tok: str) -> bool:
    try:
        float(tok)
        return True
    except ValueError:
        return False


def parse_user_args(argv: Sequence[str], table: FlagTable) -> list[ParsedArg]:
    """Walk SGLang argv with its own flag table: which options the user set, with their values."""
    out: list[ParsedArg] = []
    i = 0
    while i < len(argv):
        tok = argv[i]
        i += 1
        if not tok.startswith("--") or tok == "--":
            continue  # positional or short option: SGLang's launch_server takes none of ours
        flag = resolve_option(tok, table)
        info = table.flags[flag]
        values: list[str] = []
        if "=" in tok:
            values.append(tok.split("=", 1)[1])
        elif info.nargs in (1, "?") or isinstance(info.nargs, int) and info.nargs > 1:
            want = 1 if info.nargs == "?" else int(info.nargs)
            while want and i < len(argv) and (_is_value(argv[i]) or info.nargs != "?"):
                values.append(argv[i])
                i += 1
                want -= 1
        elif info.nargs in ("*", "+"):
            while i < len(argv) and _is_value(argv[i]):
                values.append(argv[i])
                i += 1
        out.append(ParsedArg(tok, flag, info.dest, tuple(values), abbreviated=tok.split("=", 1)[0] != flag))
    return out


def config_file_dests(argv: Sequence[str], table: FlagTable) -> set[str]:
    """Destinations set through SGLang's own ``--config FILE`` (its keys are long flag names)."""
    import yaml

    dests: set[str] = set()
    for i, tok in enumerate(argv):
        if tok == "--config" and i + 1 < len(argv):
            path = Path(argv[i + 1])
            try:
                data = yaml.safe_load(path.read_text())
            except (OSError, yaml.YAMLError) as e:
                raise ConfigError(f"--config {path}: cannot read SGLang's config file: {e}") from None
            if isinstance(data, dict):
                for key in data:
                    flag = f"--{str(key).replace('_', '-')}" if not str(key).startswith("--") else str(key)
                    if flag in table.flags:
                        dests.add(table.flags[flag].dest)
    return dests


def pick_flag(candidates: Sequence[str], table: FlagTable) -> str | None:
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


if __name__ == "__main__":  # python -m sglwrap.sglang_args  -> refresh the bundled snapshot
    print(snapshot(sys.argv[1] if len(sys.argv) > 1 else sys.executable, bundled_dir()))
