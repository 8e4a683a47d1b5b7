"""Load, inherit and validate profiles; what leaves this module is a frozen, hashed ``Profile``.

Search order for ``NAME.yaml``: each directory of ``$SGLWRAP_PROFILE_PATH`` (colon-separated),
``~/.config/sglwrap/profiles``, ``/etc/sglwrap/profiles``, then the built-ins shipped with sglwrap.
The file name is the profile's name (``name:`` may repeat it, never differ). A profile that ``extends`` its own name
inherits from the next file of that name on the path.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sglwrap import envvars, yamlcache
from sglwrap.errors import ProfileError
from sglwrap.record import Record, field, replace
from sglwrap.settings import FEATURE_MODES, FEATURES, SETTINGS

TOP_KEYS = ("name", "description", "evidence", "extends", "env", "sglang", "features")
ENV_ENTRY_KEYS = ("value", "force")
_MAX_DEPTH = 16


class EnvSetting(Record):
    """One variable: the exact string to set and whether to overwrite a value SGLang or the user already set."""

    value: str
    force: bool = False


def _sha256_hex(data: bytes) -> str:
    """SHA-256 of ``data``, hex, from the interpreter's own implementation (``_sha2``, ``_sha256`` before 3.12) when
    it has one: ``import hashlib`` loads OpenSSL first, 2-4 ms of every preflight."""
    try:
        from _sha2 import sha256  # type: ignore[import-not-found]
    except ImportError:
        try:
            from _sha256 import sha256  # type: ignore[import-not-found]
        except ImportError:
            from hashlib import sha256
    return str(sha256(data).hexdigest())


class Profile(Record):
    """A resolved profile (inheritance applied, every value validated)."""

    name: str
    description: str
    env: dict[str, EnvSetting]
    sglang: dict[str, Any]
    features: dict[str, str]
    sources: tuple[str, ...]  # files, most derived first
    evidence: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default=())

    @property
    def hash(self) -> str:
        """sha256 of the resolved content (name, env, sglang settings, features), hex."""
        return _sha256_hex(canonical_json(self).encode())

    @property
    def short_hash(self) -> str:
        return self.hash[:12]

    def to_dict(self) -> dict[str, Any]:
        """The resolved form, JSON-ready."""
        return {
            "name": self.name,
            "hash": self.hash,
            "description": self.description,
            "evidence": list(self.evidence),
            "env": {k: {"value": v.value, "force": v.force} for k, v in sorted(self.env.items())},
            "sglang": dict(sorted(self.sglang.items())),
            "features": dict(sorted(self.features.items())),
            "sources": list(self.sources),
        }

    def without_feature(self, feature: str, reason: str) -> Profile:
        """A copy with ``feature`` dropped (a preflight downgrade), the reason kept in ``notes``."""
        features = {k: v for k, v in self.features.items() if k != feature}
        return replace(self, features=features, notes=self.notes + (f"dropped {feature}: {reason}",))


def canonical_json(profile: Profile) -> str:
    """The text the hash is computed over: sorted keys, no whitespace, behaviour-relevant fields only."""
    body = {
        "name": profile.name,
        "env": {k: [v.value, v.force] for k, v in sorted(profile.env.items())},
        "sglang": profile.sglang,
        "features": profile.features,
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)


def builtin_dir() -> Path:
    """Where the built-in profiles live: inside the installed package, or the checkout's ``profiles/``."""
    pkg = Path(__file__).resolve().parent
    for cand in (pkg / "_profiles", pkg.parent / "profiles"):
        if cand.is_dir() and any(cand.glob("*.yaml")):
            return cand
    return pkg / "_profiles"


def search_dirs(environ: Mapping[str, str] | None = None) -> list[tuple[Path, str]]:
    """Profile directories in lookup order, each with where it comes from (for people: ``profiles list``)."""
    env = os.environ if environ is None else environ
    dirs = [(Path(p).expanduser(), "$SGLWRAP_PROFILE_PATH")
            for p in env.get("SGLWRAP_PROFILE_PATH", "").split(":") if p]
    home = env.get("HOME")
    xdg = env.get("XDG_CONFIG_HOME") or (f"{home}/.config" if home else None)
    if xdg:
        dirs.append((Path(xdg) / "sglwrap" / "profiles", "user"))
    dirs.append((Path(env.get("SGLWRAP_SYSTEM_PROFILE_DIR", "/etc/sglwrap/profiles")), "/etc"))
    dirs.append((builtin_dir(), "built-in"))
    return dirs


def search_path(environ: Mapping[str, str] | None = None) -> list[Path]:
    """Profile directories in lookup order."""
    return [d for d, _ in search_dirs(environ)]


def file_problem(path: Path) -> str | None:
    """Why ``path`` (found by name on the search path) cannot be a profile file, or None when it is a file."""
    if path.is_symlink() and not path.exists():
        return f"{path}: a symlink to {os.readlink(path)}, which does not exist"
    if path.is_dir():
        return f"{path}: a directory, not a profile file (a profile is one YAML file)"
    if path.exists() and not path.is_file():
        return f"{path}: not a regular file"
    return None


def _candidates(name: str, dirs: list[Path]) -> list[Path]:
    """The files named ``name`` on the path, in order; a directory or a dangling symlink of that name is an error
    (it would otherwise be skipped silently and a profile further down the path used instead)."""
    out: list[Path] = []
    for d in dirs:
        for ext in (".yaml", ".yml"):
            p = d / f"{name}{ext}"
            problem = file_problem(p)
            if problem is not None:
                if not out:
                    raise ProfileError(problem)
                return out  # what lies past a broken entry is not reachable by name either
            if p.is_file():
                out.append(p)
                break
    return out


class ListedProfile(Record):
    """One name on the search path: the file that wins, where it comes from, and the profile or why it is broken."""

    name: str
    path: Path
    source: str  # "$SGLWRAP_PROFILE_PATH", "user", "/etc", "built-in"
    profile: Profile | None = None
    error: str | None = None


def _entries(environ: Mapping[str, str] | None) -> list[tuple[str, Path, str]]:
    seen: dict[str, tuple[Path, str]] = {}
    for d, source in search_dirs(environ):
        try:
            files = sorted(d.iterdir()) if d.is_dir() else []
        except OSError:
            continue
        for p in files:
            if p.suffix in (".yaml", ".yml") and p.stem not in seen:
                seen[p.stem] = (p, source)
    return [(name, p, source) for name, (p, source) in sorted(seen.items())]


def list_profiles(environ: Mapping[str, str] | None = None) -> list[tuple[str, Path]]:
    """Every profile name visible on the search path with the file that wins (broken ones included)."""
    return [(name, p) for name, p, _ in _entries(environ)]


def scan_profiles(environ: Mapping[str, str] | None = None) -> list[ListedProfile]:
    """Every name on the search path, loaded: each entry holds its profile, or the one-line reason it is broken."""
    out: list[ListedProfile] = []
    for name, path, source in _entries(environ):
        try:
            problem = file_problem(path)
            if problem is not None:
                raise ProfileError(problem)
            out.append(ListedProfile(name, path, source, profile=load_profile(str(path), environ)))
        except ProfileError as e:
            out.append(ListedProfile(name, path, source, error=e.message))
    return out


def find_profile(name: str, environ: Mapping[str, str] | None = None, after: Path | None = None) -> Path:
    """The file that defines ``name``; with ``after``, the next one past that file on the path."""
    _check_name(name, "profile name")
    found = _candidates(name, search_path(environ))
    if after is not None:
        idx = [p.resolve() for p in found].index(after.resolve()) if after.resolve() in [
            p.resolve() for p in found] else -1
        found = found[idx + 1:]
    if not found:
        known = [n for n, _ in list_profiles(environ)]
        import difflib

        close = difflib.get_close_matches(name, known, n=1)
        hint = f" Did you mean {close[0]!r}?" if close else ""
        where = ", ".join(str(d) for d in search_path(environ))
        raise ProfileError(f"profile {name!r} not found.{hint} Known profiles: {', '.join(known) or 'none'}. "
                           f"Searched: {where}")
    return found[0]


def _check_name(name: str, what: str) -> None:
    if not name or "/" in name or name.startswith(".") or not all(c.isalnum() or c in "-_." for c in name):
        raise ProfileError(f"{what} {name!r} is not valid: use letters, digits, '-', '_' and '.'")


def load_profile(name_or_path: str, environ: Mapping[str, str] | None = None) -> Profile:
    """Resolve a profile by name (search path) or by file path, with inheritance, fully validated."""
    if name_or_path.endswith((".yaml", ".yml")) or "/" in name_or_path:
        path = Path(name_or_path).expanduser()
        problem = file_problem(path)
        if problem is not None:
            raise ProfileError(problem)
        if not path.is_file():
            raise ProfileError(f"{path}: no such profile file")
    else:
        path = find_profile(name_or_path, environ)
    chain = _load_chain(path, environ)
    return _merge(chain)


def _load_chain(path: Path, environ: Mapping[str, str] | None) -> list[tuple[Path, dict[str, Any]]]:
    chain: list[tuple[Path, dict[str, Any]]] = []
    seen: set[Path] = set()
    current: Path | None = path
    while current is not None:
        if current.resolve() in seen or len(chain) >= _MAX_DEPTH:
            names = " -> ".join(str(p) for p, _ in chain)
            raise ProfileError(f"{path}: 'extends' forms a cycle: {names} -> {current}")
        seen.add(current.resolve())
        raw = _read_yaml(current)
        chain.append((current, raw))
        parent = raw.get("extends")
        if parent is None:
            current = None
        else:
            same = parent == current.stem
            if same and not _candidates_after(current, environ):
                raise ProfileError(
                    f"{current}: 'extends: {parent}' names this profile itself, and no other {parent}.yaml follows it "
                    f"on the search path ({', '.join(str(d) for d in search_path(environ))}); an 'extends' of its own "
                    "name inherits from the next file of that name. Extend another profile or remove 'extends'")
            current = find_profile(parent, environ, after=current if same else None)
    return chain


def _candidates_after(path: Path, environ: Mapping[str, str] | None) -> list[Path]:
    found = [p.resolve() for p in _candidates(path.stem, search_path(environ))]
    here = path.resolve()
    return found[found.index(here) + 1:] if here in found else found


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise ProfileError(f"{path}: cannot read: {e.strerror}") from None
    except UnicodeDecodeError:
        raise ProfileError(f"{path}: not UTF-8 text") from None
    try:
        data = yamlcache.safe_load(text)
    except yamlcache.YamlSyntaxError as e:
        where = f" line {e.line}, column {e.column}" if e.line is not None else ""
        raise ProfileError(f"{path}:{where}: not valid YAML: {e.problem}") from None
    if not isinstance(data, dict):
        raise ProfileError(f"{path}: the top level must be a mapping with keys {', '.join(TOP_KEYS)}; "
                           f"found {type(data).__name__}")
    _validate_top(path, data)
    return data


def _validate_top(path: Path, data: dict[str, Any]) -> None:
    for key in data:
        if key not in TOP_KEYS:
            raise ProfileError(_unknown(path, str(key), None, TOP_KEYS, "top-level key"))
    name = data.get("name")
    if name is None:
        name = path.stem  # optional: the file name is the name
    if not isinstance(name, str) or name != path.stem:
        raise ProfileError(f"{path}: key 'name': {name!r} differs from the file name {path.stem!r}; the file name is "
                           f"the profile's name: remove 'name:' or rename the file to {name}{path.suffix}")
    desc = data.get("description")
    if not isinstance(desc, str) or not desc.strip():
        raise ProfileError(f"{path}: key 'description': required, a non-empty string saying when to use "
                           "the profile and what evidence backs it")
    ev = data.get("evidence", [])
    if not isinstance(ev, list) or not all(isinstance(x, str) for x in ev):
        raise ProfileError(f"{path}: key 'evidence': must be a list of strings")
    ext = data.get("extends")
    if ext is not None and not isinstance(ext, str):
        raise ProfileError(f"{path}: key 'extends': {ext!r} must be the name of another profile")
    for section in ("env", "sglang", "features"):
        val = data.get(section)
        if val is not None and not isinstance(val, dict):
            raise ProfileError(f"{path}: key '{section}': must be a mapping, found {type(val).__name__}")


def _unknown(path: Path, key: str, section: str | None, allowed: tuple[str, ...] | list[str], what: str) -> str:
    import difflib

    close = difflib.get_close_matches(key.rsplit(".", 1)[-1], list(allowed), n=1, cutoff=0.6)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    where = f"{section}.{key}" if section else key
    return f"{path}: key '{where}': unknown {what}.{hint} Allowed: {', '.join(allowed)}"


def _merge(chain: list[tuple[Path, dict[str, Any]]]) -> Profile:
    env: dict[str, EnvSetting] = {}
    sglang: dict[str, Any] = {}
    features: dict[str, str] = {}
    for path, raw in reversed(chain):  # base first, most derived last
        for name, entry in (raw.get("env") or {}).items():
            setting = _env_setting(path, str(name), entry)
            if setting is None:
                env.pop(str(name), None)
            else:
                env[str(name)] = setting
        for key, value in (raw.get("sglang") or {}).items():
            if value is None:
                sglang.pop(str(key), None)
            else:
                sglang[str(key)] = _sglang_value(path, str(key), value)
        for key, mode in (raw.get("features") or {}).items():
            features[str(key)] = _feature_mode(path, str(key), mode)
    top_path, top = chain[0]
    return Profile(
        name=top.get("name") or top_path.stem,
        description=top["description"].strip(),
        evidence=tuple(top.get("evidence", [])),
        env=env,
        sglang=sglang,
        features=features,
        sources=tuple(str(p) for p, _ in chain),
    )


def _env_setting(path: Path, name: str, entry: Any) -> EnvSetting | None:
    force = False
    value = entry
    if isinstance(entry, dict):
        for k in entry:
            if k not in ENV_ENTRY_KEYS:
                raise ProfileError(_unknown(path, f"{name}.{k}", "env", ENV_ENTRY_KEYS, "key of a variable"))
        if "value" not in entry:
            raise ProfileError(f"{path}: key 'env.{name}': a mapping needs 'value' (and optionally 'force: true')")
        value, force = entry["value"], entry.get("force", False)
        if not isinstance(force, bool):
            raise ProfileError(f"{path}: key 'env.{name}.force': {force!r} must be true or false")
    if value is None:
        return None  # removes an inherited variable
    var = envvars.REGISTRY.get(name)
    if var is None:
        return EnvSetting(_unregistered_value(path, name, value), force)
    try:
        return EnvSetting(envvars.canonical_value(var, value), force)
    except envvars.EnvValueError as e:
        raise ProfileError(f"{path}: key 'env.{name}': bad value {value!r}: {e.problem}. "
                           f"Allowed: {e.allowed}") from None


def _unregistered_value(path: Path, name: str, value: Any) -> str:
    if not name.replace("_", "").isalnum() or not name.isupper():
        raise ProfileError(f"{path}: key 'env.{name}': not a valid variable name (upper-case letters, digits, _)")
    if name.startswith("SGLANG_"):
        from sglwrap import sglang_env

        return sglang_env.check(path, name, value)
    for prefix in envvars.STRICT_PREFIXES:
        if name.startswith(prefix):
            known = [n for n in envvars.REGISTRY if n.startswith(prefix)]
            guess = envvars.suggest(name, known)
            hint = f" Did you mean {guess!r}?" if guess else ""
            raise ProfileError(
                f"{path}: key 'env.{name}': unknown {prefix}* variable ({prefix.rstrip('_')} would silently "
                f"ignore it).{hint} Known: {', '.join(sorted(known))}")
    if isinstance(value, (dict, list)) or value is None:
        raise ProfileError(f"{path}: key 'env.{name}': {value!r} must be a scalar")
    return str(value).lower() if isinstance(value, bool) else str(value)


def _sglang_value(path: Path, key: str, value: Any) -> Any:
    setting = SETTINGS.get(key)
    if setting is None:
        raise ProfileError(_unknown(path, key, "sglang", sorted(SETTINGS), "server setting"))
    ok_types: dict[str, tuple[type, ...]] = {"int": (int,), "float": (float, int), "str": (str,), "bool": (bool,)}
    if isinstance(value, bool) and setting.kind != "bool" or not isinstance(value, ok_types[setting.kind]):
        raise ProfileError(f"{path}: key 'sglang.{key}': {value!r} must be {_kind_word(setting.kind)}")
    if setting.kind in ("int", "float"):
        lo, hi = setting.minimum, setting.maximum
        num = float(value)  # type: ignore[arg-type]  # checked above to be an int or a float
        if lo is not None and num < lo or hi is not None and num > hi:
            raise ProfileError(f"{path}: key 'sglang.{key}': {value!r} is out of range; allowed: {lo} to {hi}")
    return value


def _kind_word(kind: str) -> str:
    return {"int": "an integer", "float": "a number", "str": "a string", "bool": "true or false"}[kind]


def _feature_mode(path: Path, key: str, mode: Any) -> str:
    if key not in FEATURES:
        raise ProfileError(_unknown(path, key, "features", sorted(FEATURES), "feature"))
    if mode is False:
        mode = "off"  # YAML reads a bare `off` as false
    if not isinstance(mode, str) or mode not in FEATURE_MODES:
        raise ProfileError(f"{path}: key 'features.{key}': {mode!r} is not a mode; allowed: "
                           f"{', '.join(FEATURE_MODES)}")
    return mode
