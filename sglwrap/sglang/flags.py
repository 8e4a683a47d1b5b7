"""SGLang's command-line flags per release: introspected from the installed SGLang (once per version, in a
subprocess, cached) or read from the release data bundled with sglwrap (``sglwrap/data/sglang/``).

SGLang's parser (``argparse.ArgumentParser(prog="sglang serve")`` + ``ServerArgs.add_cli_args``) keeps
``allow_abbrev=True``: a prefix of a flag binds silently, and a prefix of two flags is an "ambiguous option"
error (``--cuda-graph-max-bs`` in 0.5.23). Importing ``sglang.srt.server_args`` pulls in torch (seconds) and
``import sglang`` edits ``os.environ``, hence the subprocess. ``sglwrap.sglang.cmdline`` builds a parser from a
table; nothing else reads SGLang's argv.
"""

from __future__ import annotations

import json
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

from sglwrap.errors import ConfigError
from sglwrap import diskcache
from sglwrap.interpreter import interpreter_id
from sglwrap.record import Record, field, replace
from sglwrap.sglang.release import TargetRelease, resolve_target, target_python
from sglwrap.versions import Version, known_releases
from sglwrap.versions import parse as parse_version

TABLE_SCHEMA = 2

# The live table is made by the same code as the bundled release data: ``generate.py`` run as a script (standard
# library only) inside the target interpreter. Its text keys the cache, so a changed reading is never mixed with an
# older one.
_GENERATOR = Path(__file__).resolve().with_name("generate.py")


class FlagInfo(Record):
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


class FlagTable(Record):
    """The flags of one SGLang version, by every option string."""

    version: str
    flags: dict[str, FlagInfo]
    env: dict[str, dict[str, Any]] = field(default_factory=dict)
    source: str = ""  # "introspected:<python>", "cache:<file>", "bundled:<file>"
    extra: dict[str, Any] = field(default_factory=dict)  # release data beyond the flags (architectures, …)
    # the release asked for when this table is the nearest one read instead (a post release, an unread one):
    # options it does not know are then passed on unchecked rather than refused
    stands_in_for: str | None = None

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


def bundled_dir() -> Path:
    """Where the generated per-release data ships."""
    return Path(__file__).resolve().parent.parent / "data" / "sglang"


def bundled_versions() -> list[str]:
    """SGLang releases whose data ships with sglwrap, oldest first (``sglwrap.versions.known_releases``)."""
    return list(known_releases())


def introspect(python: str, version: str) -> dict[str, Any]:
    """The installed SGLang's flag table and ``SGLANG_*`` registry, read in a subprocess of ``python`` by the
    release-data generator; ConfigError with SGLang's output when its ServerArgs cannot be imported there."""
    import subprocess

    from sglwrap.sglang import generate

    try:
        data = generate.introspect(python, None, "sglang serve", permissive=False, timeout=300, isolated=False)
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as e:
        raise ConfigError(f"{python} could not import SGLang's ServerArgs: {e}") from None
    return {"schema": TABLE_SCHEMA, "version": version, "flags": data["flags"], "env": data["env"]}


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
    name = f"flags-{version}-" + diskcache.key(interpreter_id(python), diskcache.digest(_GENERATOR.read_bytes()))
    raw = diskcache.load("sglang", name, environ)
    if isinstance(raw, dict) and raw.get("schema") == TABLE_SCHEMA and raw.get("version") == version:
        return table_from_json(raw, f"cache:{diskcache.location('sglang', name, environ)}")
    sys.stderr.write(f"sglwrap: reading SGLang {version}'s flags from {python} (once per version, ~10 s)…\n")
    raw = introspect(python, version)
    diskcache.store("sglang", name, raw, environ)
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
    table = _bundled_file(pick)
    if version is not None and want is not None and Version(pick) != want:
        table = replace(table, stands_in_for=str(version).strip())
    return table


@lru_cache(maxsize=8)
def _bundled_file(pick: str) -> FlagTable:
    # package data: read once per process (the files ship with sglwrap and change only with it)
    path = bundled_dir() / f"sglang-{pick}.json"
    return table_from_json(json.loads(path.read_text()), f"bundled:{path.name}")


def pick_flag(candidates: list[str] | tuple[str, ...], table: FlagTable) -> str | None:
    """The first candidate spelling that exists exactly in ``table``."""
    for c in candidates:
        if c in table.flags:
            return c
    return None


def setting_flag(setting: str, table: FlagTable) -> str | None:
    """The flag that carries profile setting ``setting`` (``sglwrap.settings``) in ``table``'s release, or None
    when that release has none (``cuda_graph_max_bs``: ``--cuda-graph-max-bs`` up to 0.5.13,
    ``--cuda-graph-max-bs-decode`` from 0.5.14)."""
    from sglwrap.settings import SETTINGS

    return pick_flag(SETTINGS[setting].flags, table)


def release_flag(setting: str, version: str | None) -> str:
    """:func:`setting_flag` for SGLang ``version`` read from the bundled release data (the newest known when None);
    for a release older than every spelling, the oldest spelling."""
    from sglwrap.settings import SETTINGS

    return setting_flag(setting, bundled_table(version)) or SETTINGS[setting].flags[-1]
