"""Generate sglwrap's per-release SGLang data, ``sglwrap/data/sglang/sglang-<version>.json`` (schema 2).

Maintainers' tool, never imported at run time::

    python -m sglwrap.sglang.generate [--versions 0.5.9 0.5.23 ...] [--out sglwrap/data/sglang]

Each release is read from its own wheel (``~/.cache/sglwrap/releases/wheels``, fetched with
``pip download --no-deps`` when missing; python files unpacked to ``~/.cache/sglwrap/releases/src/<version>``):

- ``flags``: ``ServerArgs.add_cli_args`` run on a fresh ``argparse.ArgumentParser`` in a child interpreter with the
  unpacked release first on ``sys.path``. Old releases import torch/triton-era code that the current venv cannot
  import, so each ``sglang.*`` module is executed one top-level statement at a time: a statement that raises
  (a missing ``vllm``, an old triton API) is skipped and the names it would bind become permissive stubs. Every
  skipped statement is listed in ``source``; a stub that reaches a flag (its type, choices, default) is an error.
  Single-file releases (``add_argument`` calls in ``server_args.py``) are cross-checked against a static ``ast``
  read of those calls (option strings and dests must agree).
- ``architectures``: the ``EntryClass`` names of ``srt/models/*.py`` (read with ``ast``, no import).
- ``server_args_defaults``: the ``ServerArgs`` field defaults, read with ``ast`` (literal values; other
  expressions as source text in ``server_args_default_exprs``).

This file uses the standard library only: it is also run as a script (``--child``) inside the interpreter
being introspected.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

SCHEMA = 2
_HERE = Path(__file__).resolve()
_REPO_DATA = _HERE.parent.parent / "data" / "sglang"


# --- where the releases are ---------------------------------------------------------------------------------


def releases_dir() -> Path:
    """``$XDG_CACHE_HOME/sglwrap/releases`` (default ``~/.cache/sglwrap/releases``)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sglwrap" / "releases"


def version_key(text: str) -> tuple[int, ...]:
    """Sort key for plain release numbers (``0.5.10`` after ``0.5.9``)."""
    return tuple(int(p) if p.isdigit() else -1 for p in text.split("."))


def find_wheel(version: str, wheels: Path) -> Path | None:
    """The downloaded wheel of ``sglang==version``, or None."""
    found = sorted(wheels.glob(f"sglang-{version}-*.whl"))
    return found[0] if found else None


def ensure_wheel(version: str, wheels: Path) -> Path:
    """The wheel of ``sglang==version``, downloaded with ``pip download --no-deps`` when missing."""
    wheel = find_wheel(version, wheels)
    if wheel is None:
        wheels.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                        f"sglang=={version}", "-d", str(wheels)], check=True)
        wheel = find_wheel(version, wheels)
        if wheel is None:
            raise SystemExit(f"generate: pip downloaded no wheel for sglang=={version} into {wheels}")
    return wheel


def ensure_source(version: str, wheel: Path, src_root: Path) -> Path:
    """``src_root/<version>`` holding the wheel's python files (unpacked here when missing)."""
    dest = src_root / version
    if not (dest / "sglang" / "srt" / "server_args.py").is_file():
        tmp = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=src_root if src_root.is_dir() else None))
        with zipfile.ZipFile(wheel) as zf:
            for name in zf.namelist():
                if name.startswith("sglang/") and name.endswith(".py"):
                    zf.extract(name, tmp)
        src_root.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, dest)
    return dest


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# --- static reads (ast, no import) ----------------------------------------------------------------------------


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_bytes(), filename=str(path))  # bytes: some files start with a BOM


def _entry_names(tree: ast.Module) -> list[str] | None:
    """The class names a model module's top-level ``EntryClass = X`` / ``[X, Y]`` names, imports resolved."""
    aliases: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom):
            for a in node.names:
                aliases[a.asname or a.name] = a.name
    value: ast.expr | None = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "EntryClass"
                                                for t in node.targets):
            value = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                and node.target.id == "EntryClass" and node.value is not None:
            value = node.value
    if value is None:
        return None
    elts = value.elts if isinstance(value, (ast.List, ast.Tuple)) else [value]
    names = []
    for e in elts:
        if isinstance(e, ast.Name):
            names.append(aliases.get(e.id, e.id))
        elif isinstance(e, ast.Attribute):
            names.append(e.attr)
        else:
            raise ValueError(f"EntryClass element is not a name: {ast.unparse(e)}")
    return names


def read_architectures(pkg: Path) -> dict[str, Any]:
    """Model architectures registered by ``srt/models``: every top-level module's ``EntryClass`` names.

    SGLang's registry imports the non-package modules directly under ``srt/models`` (``pkgutil.iter_modules``)
    and registers ``EntryClass`` (a class or a list of classes) by class name.
    """
    models = pkg / "srt" / "models"
    files = sorted(p for p in models.glob("*.py") if p.name != "__init__.py")
    names: set[str] = set()
    with_entry = 0
    for f in files:
        found = _entry_names(_parse(f))
        if found:
            with_entry += 1
            names.update(found)
    return {"architectures": sorted(names), "model_files": len(files), "model_files_with_entry": with_entry,
            "model_py_files_total": sum(1 for _ in models.rglob("*.py"))}


def _literal(node: ast.expr) -> tuple[bool, Any]:
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False, None
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False, None
    if isinstance(value, tuple):
        return False, None  # a tuple would come back as a list: keep its source text
    return True, value


def _is_classvar(ann: ast.expr) -> bool:
    text = ast.unparse(ann)
    return text.startswith(("ClassVar", "typing.ClassVar"))


def _class_fields(cls: ast.ClassDef, defaults: dict[str, Any], exprs: dict[str, str], required: list[str]) -> None:
    for node in cls.body:
        if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
            continue
        name = node.target.id
        if _is_classvar(node.annotation):
            continue
        if node.value is None:
            required.append(name)
            continue
        ok, value = _literal(node.value)
        if ok:
            defaults[name] = value
        else:
            exprs[name] = ast.unparse(node.value)


def _find_class(tree: ast.Module, name: str) -> ast.ClassDef | None:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    return None


def read_server_args_defaults(pkg: Path) -> dict[str, Any]:
    """``ServerArgs`` field defaults, statically.

    Up to 0.5.19 ``ServerArgs`` is a dataclass in ``srt/server_args.py``; from 0.5.20 its input fields are the
    namespaces of ``_INPUT_NAMESPACES`` (classes in ``srt/arg_groups/fields/``) plus its own annotations.
    """
    server_args = pkg / "srt" / "server_args.py"
    tree = _parse(server_args)
    defaults: dict[str, Any] = {}
    exprs: dict[str, str] = {}
    required: list[str] = []
    where = ["srt/server_args.py:ServerArgs"]
    namespaces: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_INPUT_NAMESPACES"
                                                for t in node.targets) and isinstance(node.value, ast.List):
            namespaces = [e.id for e in node.value.elts if isinstance(e, ast.Name)]
    if namespaces:
        imported: dict[str, str] = {}
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sglang.srt.arg_groups"):
                for a in node.names:
                    imported[a.asname or a.name] = node.module
        for ns in namespaces:
            module = imported.get(ns)
            if module is None:
                raise ValueError(f"{server_args}: namespace {ns} is not imported from sglang.srt.arg_groups")
            path = pkg.parent / (module.replace(".", "/") + ".py")
            cls = _find_class(_parse(path), ns)
            if cls is None:
                raise ValueError(f"{path}: no class {ns}")
            _class_fields(cls, defaults, exprs, required)
            where.append(f"{module.removeprefix('sglang.')}:{ns}")
    own = _find_class(tree, "ServerArgs")
    if own is None:
        raise ValueError(f"{server_args}: no class ServerArgs")
    _class_fields(own, defaults, exprs, required)
    return {"server_args_defaults": dict(sorted(defaults.items())),
            "server_args_default_exprs": dict(sorted(exprs.items())),
            "server_args_required": sorted(required), "server_args_fields_from": where}


def read_prog(pkg: Path) -> str | None:
    """The ``prog=`` of the parser ``prepare_server_args`` builds (None: argparse's default, argv[0])."""
    tree = _parse(pkg / "srt" / "server_args.py")
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == "prepare_server_args":
            for call in ast.walk(node):
                if isinstance(call, ast.Call) and ast.unparse(call.func).endswith("ArgumentParser"):
                    for kw in call.keywords:
                        if kw.arg == "prog" and isinstance(kw.value, ast.Constant):
                            return str(kw.value.value)
                    return None
    return None


def _opt_dest(options: list[str]) -> str:
    long = [o for o in options if o.startswith("--")]
    return (long[0] if long else options[0]).lstrip("-").replace("-", "_")


def _with_no_variants(options: list[str]) -> list[str]:
    """argparse.BooleanOptionalAction's option strings: each ``--x`` followed by ``--no-x``."""
    return [o for opt in options for o in ((opt, f"--no-{opt[2:]}") if opt.startswith("--") else (opt,))]


def _add_argument_calls(method: ast.FunctionDef) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for call in ast.walk(method):
        if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr == "add_argument"):
            continue
        options = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        if len(options) != len(call.args) or not options:
            out.append({"options": None, "dest": None, "line": call.lineno, "source": ast.unparse(call)[:120]})
            continue
        dest = None
        for kw in call.keywords:
            if kw.arg == "dest" and isinstance(kw.value, ast.Constant):
                dest = kw.value.value
            if kw.arg == "action" and ast.unparse(kw.value).split(".")[-1] == "BooleanOptionalAction":
                options = _with_no_variants(options)
        out.append({"options": options, "dest": dest or _opt_dest(options), "line": call.lineno})
    return out


def _field_cli_flags(cls: ast.ClassDef) -> list[dict[str, Any]]:
    """What ``add_cli_args_from_dataclass`` makes of a class's ``A[T, "help"]`` / ``A[T, Arg(...)]`` fields."""
    out: list[dict[str, Any]] = []
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        ann = node.annotation
        if not (isinstance(ann, ast.Subscript) and ast.unparse(ann.value) in ("A", "Annotated", "typing.Annotated")):
            continue
        meta_nodes = ann.slice.elts[1:] if isinstance(ann.slice, ast.Tuple) else []
        name = node.target.id
        meta: ast.expr | None = None
        for m in meta_nodes:
            if isinstance(m, ast.Call) and ast.unparse(m.func).split(".")[-1] == "Arg":
                meta = m
                break
            if isinstance(m, (ast.Constant, ast.JoinedStr, ast.BinOp)) and not (
                    isinstance(m, ast.Constant) and not isinstance(m.value, str)):
                meta = None
                break
        else:
            # other metadata (e.g. NS('device')) makes no flag; a bare name could be an Arg: unreadable
            if any(isinstance(m, (ast.Name, ast.Attribute, ast.Subscript)) for m in meta_nodes):
                out.append({"options": None, "dest": name, "line": node.lineno, "source": ast.unparse(ann)[:120]})
            continue
        cli_name = f"--{name.replace('_', '-')}"
        aliases: list[str] = []
        if meta is not None:
            kws = {kw.arg: kw.value for kw in meta.keywords if kw.arg}
            if "no_cli" in kws:
                ok, value = _literal(kws["no_cli"])
                if not ok:
                    out.append({"options": None, "dest": name, "line": node.lineno, "source": "no_cli=?"})
                    continue
                if value:
                    continue
            if "cli_name" in kws:
                ok, value = _literal(kws["cli_name"])
                if ok and value:
                    cli_name = value
            if "aliases" in kws:
                ok, value = _literal(kws["aliases"])
                aliases = list(value or []) if ok else []
            if "action" in kws and ast.unparse(kws["action"]).split(".")[-1] == "BooleanOptionalAction":
                cli_name, *aliases = _with_no_variants([cli_name, *aliases])
        out.append({"options": [cli_name, *aliases], "dest": name, "line": node.lineno})
    return out


def static_cli_flags(pkg: Path) -> tuple[str, list[dict[str, Any]]] | None:
    """Option strings and dests SGLang's parser should have, read with ``ast``.

    Up to 0.5.13: the ``add_argument`` calls of ``ServerArgs.add_cli_args``. From 0.5.14: the fields that
    ``add_cli_args_from_dataclass`` turns into flags (``A[T, ...]`` annotations, ``Arg(cli_name=, aliases=,
    no_cli=)``; on ``ServerArgs`` or, from 0.5.20, its ``_INPUT_NAMESPACES``) plus the remaining calls.
    """
    server_args = pkg / "srt" / "server_args.py"
    tree = _parse(server_args)
    cls = _find_class(tree, "ServerArgs")
    method = None
    if cls is not None:
        for node in cls.body:
            if isinstance(node, ast.FunctionDef) and node.name == "add_cli_args":
                method = node
    if cls is None or method is None:
        return None
    calls = _add_argument_calls(method)
    if not any(isinstance(n, ast.Call) and ast.unparse(n.func).endswith("add_cli_args_from_dataclass")
               for n in ast.walk(method)):
        return "ast: the add_argument calls in ServerArgs.add_cli_args", calls
    classes = [cls]
    for where in read_server_args_defaults(pkg)["server_args_fields_from"][1:]:
        module, ns = where.split(":")
        path = pkg / (module.replace(".", "/") + ".py")
        found = _find_class(_parse(path), ns)
        if found is not None:
            classes.append(found)
    fields = [f for c in classes for f in _field_cli_flags(c)]
    return ("ast: the A[...] fields add_cli_args_from_dataclass turns into flags, plus the add_argument calls "
            "in ServerArgs.add_cli_args", fields + calls)


# --- the child: import the release permissively and read its parser -----------------------------------------

_CHILD_FAILURES: list[dict[str, Any]] = []


class _Stub:
    """Stands for whatever a skipped statement would have bound: callable, empty, falsy, subclassable."""

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "_stub_name", name)

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        return _Stub(f"{object.__getattribute__(self, '_stub_name')}.{attr}")

    def __setattr__(self, attr: str, value: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and (isinstance(args[0], type) or callable(args[0])) \
                and not isinstance(args[0], _Stub):
            return args[0]  # used as a decorator
        return _Stub(f"{object.__getattribute__(self, '_stub_name')}()")

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (object,)

    def __iter__(self) -> Any:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __bool__(self) -> bool:
        return False

    def __contains__(self, item: Any) -> bool:
        return False

    def __getitem__(self, key: Any) -> Any:
        return _Stub(f"{object.__getattribute__(self, '_stub_name')}[]")

    def __or__(self, other: Any) -> Any:
        return self

    __ror__ = __or__
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __floordiv__ = __or__
    __and__ = __rand__ = __mod__ = __pow__ = __neg__ = __or__

    def __int__(self) -> int:
        return 0

    __index__ = __int__

    def __float__(self) -> float:
        return 0.0

    def __lt__(self, other: Any) -> bool:
        return False

    __le__ = __gt__ = __ge__ = __lt__

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def __repr__(self) -> str:
        return f"<stub {object.__getattribute__(self, '_stub_name')}>"


def _bound_names(stmt: ast.stmt) -> list[str]:
    """Names a top-level statement binds (assignments, imports, defs, also inside if/try/with/for)."""
    names: list[str] = []
    for node in ast.walk(stmt):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for a in node.names:
                if a.name != "*":
                    names.append(a.asname or a.name.split(".")[0])
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.append(node.id)
    return names


def _install_permissive_import(src: Path | None) -> None:
    import __future__
    import importlib.abc
    import importlib.machinery

    class Loader(importlib.machinery.SourceFileLoader):
        def exec_module(self, module: Any) -> None:
            path = self.get_filename(module.__name__)
            tree = ast.parse(Path(path).read_bytes(), filename=path)
            flags = 0
            for stmt in tree.body:
                if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
                    for a in stmt.names:
                        flags |= getattr(__future__, a.name).compiler_flag
            for stmt in tree.body:
                code = compile(ast.Module(body=[stmt], type_ignores=[]), path, "exec", flags=flags,
                               dont_inherit=True)
                try:
                    exec(code, module.__dict__)
                except (Exception, SystemExit) as e:  # noqa: BLE001 - any failure is recorded and stubbed
                    _CHILD_FAILURES.append({"module": module.__name__, "line": stmt.lineno,
                                            "error": f"{type(e).__name__}: {e}"[:300]})
                    for name in _bound_names(stmt):
                        module.__dict__.setdefault(name, _Stub(f"{module.__name__}.{name}"))
                    if any(isinstance(n, ast.ImportFrom) and any(a.name == "*" for a in n.names)
                           for n in ast.walk(stmt)):
                        module.__dict__.setdefault("__getattr__", lambda attr, _m=module.__name__:
                                                   _Stub(f"{_m}.{attr}"))

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
            if fullname.split(".")[0] != "sglang":
                return None
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
            if spec is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
                return spec
            if src is not None and not str(spec.origin).startswith(str(src)):
                return spec
            spec.loader = Loader(fullname, str(spec.origin))
            return spec

    sys.meta_path.insert(0, Finder())


def _is_stub(value: Any) -> bool:
    if isinstance(value, _Stub):
        return True
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(_is_stub(v) for v in value)
    if isinstance(value, dict):
        return any(_is_stub(k) or _is_stub(v) for k, v in value.items())
    return False


def _repr(value: Any) -> str:
    """A repr without memory addresses: ``<callable Envs.<lambda>>`` for a function (default computed later)."""
    target = getattr(value, "__wrapped__", value)
    name = getattr(target, "__qualname__", None)
    if callable(value) and not isinstance(value, type) and isinstance(name, str):
        return f"<callable {name}>"
    return re.sub(r" at 0x[0-9a-fA-F]+", "", repr(value))


def _jsonable(value: Any) -> Any:
    """``value`` if it survives a JSON round trip unchanged (lists, dicts of plain values), else its repr."""
    if isinstance(value, tuple):
        return _repr(value)
    try:
        text = json.dumps(value, allow_nan=False, sort_keys=True)
    except (TypeError, ValueError):
        return _repr(value)
    return value if json.loads(text) == value else _repr(value)


def type_name(action: argparse.Action) -> str | None:
    """``int`` ``float`` ``str`` ``json`` ``bool`` or ``other:<callable>``; None for switches (no value)."""
    if action.nargs == 0:
        return None
    t = action.type
    if t is None or t is str:
        return "str"
    if t is int:
        return "int"
    if t is float:
        return "float"
    if t is bool:
        return "bool"
    if t is json.loads:
        return "json"
    name = getattr(t, "__qualname__", None) or getattr(t, "__name__", None) or type(t).__name__
    return f"other:{name}"


def _choices(action: argparse.Action) -> list[Any] | None:
    if action.choices is None:
        return None
    values = list(action.choices)
    if isinstance(action.choices, (set, frozenset, dict)):
        values.sort(key=lambda v: (str(type(v)), str(v)))
    return [_jsonable(v) for v in values]


def describe_action(action: argparse.Action) -> dict[str, Any]:
    """One flag of the release's parser as schema-2 JSON (no help text)."""
    nargs = action.nargs
    return {
        "options": list(action.option_strings),
        "dest": action.dest,
        "nargs": 1 if nargs is None else nargs,
        "action": type(action).__name__,
        "type": type_name(action),
        "choices": _choices(action),
        "default": _jsonable(action.default),
        "required": bool(action.required),
        "const": _jsonable(action.const),
        "new_flag": getattr(action, "new_flag", None),
    }


def _read_env_registry() -> tuple[dict[str, Any], str | None]:
    try:
        from sglang.srt import environ as E  # type: ignore[import-not-found]
    except Exception as e:  # noqa: BLE001
        return {}, f"no srt/environ.py registry ({type(e).__name__}: {e})"
    envs = getattr(E, "Envs", None)
    field_cls = getattr(E, "EnvField", None)
    if not isinstance(envs, type) or not isinstance(field_cls, type):
        return {}, "srt/environ.py has no Envs/EnvField registry"
    out: dict[str, Any] = {}
    for name, obj in vars(envs).items():
        if isinstance(obj, field_cls):
            out[name] = {"type": type(obj).__name__, "default": _jsonable(getattr(obj, "default", None))}
    return dict(sorted(out.items())), None


def _live_field_defaults(cls: Any) -> dict[str, Any]:
    import dataclasses

    out: dict[str, Any] = {}
    if dataclasses.is_dataclass(cls):
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                out[f.name] = _jsonable(f.default)
        return out
    try:
        import msgspec  # type: ignore[import-not-found]

        for sf in msgspec.structs.fields(cls):
            if sf.default is not msgspec.NODEFAULT:
                out[sf.name] = _jsonable(sf.default)
    except Exception:  # noqa: BLE001 - a cross-check only
        pass
    return out


def child_main(spec: dict[str, Any]) -> dict[str, Any]:
    """In the child interpreter: import the release's ServerArgs and describe its parser."""
    here = str(_HERE.parent)
    sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") != here]
    src = Path(spec["src"]).resolve() if spec.get("src") else None
    if src is not None:
        sys.path.insert(0, str(src))
    if spec.get("permissive"):
        _install_permissive_import(src)
    import importlib

    mod = importlib.import_module("sglang.srt.server_args")
    server_args = getattr(mod, "ServerArgs")
    if isinstance(server_args, _Stub):
        raise SystemExit(f"ServerArgs itself failed to define: {_CHILD_FAILURES[-5:]}")
    parser = argparse.ArgumentParser(prog=spec["prog"]) if spec.get("prog") else argparse.ArgumentParser()
    server_args.add_cli_args(parser)
    flags, leaks = [], []
    for action in parser._actions:
        if not action.option_strings:
            continue
        for attr in ("type", "choices", "default", "const"):
            if _is_stub(getattr(action, attr)):
                leaks.append(f"{action.option_strings[0]}.{attr}: {getattr(action, attr)!r}")
        flags.append(describe_action(action))
    env, env_note = _read_env_registry()
    import sglang  # type: ignore[import-not-found]

    return {"flags": flags, "env": env, "env_note": env_note, "stub_leaks": leaks,
            "failures": _CHILD_FAILURES, "sglang_file": str(Path(sglang.__file__).resolve()),
            "live_field_defaults": _live_field_defaults(server_args)}


def introspect(python: str, src: Path | None, prog: str | None, *, permissive: bool,
               timeout: float = 900, isolated: bool = True) -> dict[str, Any]:
    """Run :func:`child_main` under ``python`` (``src`` first on its path; None: the installed SGLang).

    ``isolated`` (release data): no SGLANG_/XDG_/HF_ variables, no PYTHONPATH, ``HOME="~"``, so the data holds no
    trace of this machine. Not isolated (sglwrap reading the SGLang a launch will run): the caller's environment, as
    that SGLang will see it."""
    with tempfile.TemporaryDirectory(prefix="sglwrap-gen-") as tmp:
        out = Path(tmp) / "out.json"
        spec = {"src": str(src) if src else None, "prog": prog, "permissive": permissive, "out": str(out)}
        if isolated:
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith(("SGLANG_", "XDG_", "HF_")) and k not in ("PYTHONPATH", "TMPDIR")}
            # HOME="~": a default made with os.path.expanduser("~/...") at import time reads "~/..." in the data,
            # not this machine's home; anything the import writes under it lands in the temporary cwd
            env.update(CUDA_VISIBLE_DEVICES="", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1",
                       PYTHONDONTWRITEBYTECODE="1", HOME="~")
        else:
            env = dict(os.environ)
        env["PYTHONWARNINGS"] = "ignore"
        proc = subprocess.run([python, str(_HERE), "--child", json.dumps(spec)], capture_output=True, text=True,
                              timeout=timeout, check=False, env=env, cwd=tmp if isolated else None)
        if proc.returncode != 0 or not out.is_file():
            tail = "\n    ".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
            raise RuntimeError(f"introspection under {python} (src={src}) failed, exit {proc.returncode}:\n    {tail}")
        data: dict[str, Any] = json.loads(out.read_text())
        return data


# --- one release ----------------------------------------------------------------------------------------------


def _choices_of(flags: list[dict[str, Any]], option: str) -> list[Any] | None:
    for f in flags:
        if option in f["options"]:
            return f["choices"]
    return None


def cross_check(flags: list[dict[str, Any]], static: tuple[str, list[dict[str, Any]]] | None) -> dict[str, Any]:
    """Compare introspected (options, dest) pairs with the static read of the release's flags."""
    if static is None:
        return {"method": "none: no ServerArgs.add_cli_args found by ast"}
    method, read_flags = static
    live = {(tuple(f["options"]), f["dest"]) for f in flags if f["options"] != ["-h", "--help"]}
    read = {(tuple(s["options"]), s["dest"]) for s in read_flags if s["options"] is not None}
    unreadable = [f"line {s['line']}: {s['source']}" for s in read_flags if s["options"] is None]
    return {"method": method, "agree": len(live & read), "only_introspected": sorted(map(list, live - read)),
            "only_static": sorted(map(list, read - live)), "unreadable": unreadable}


def build_release(version: str, *, python: str, rel: Path) -> dict[str, Any]:
    """The schema-2 document of one release."""
    wheel = ensure_wheel(version, rel / "wheels")
    root = ensure_source(version, wheel, rel / "src")
    pkg = root / "sglang"
    prog = read_prog(pkg)
    live = introspect(python, root, prog, permissive=True)
    if not live["sglang_file"].startswith(str(root.resolve())):
        raise RuntimeError(f"{version}: the child imported {live['sglang_file']}, not the release under {root}")
    if live["stub_leaks"]:
        raise RuntimeError(f"{version}: stubs reached the parser: {live['stub_leaks']}")
    flags = live["flags"]
    check = cross_check(flags, static_cli_flags(pkg))
    if check.get("only_introspected") or check.get("only_static"):
        raise RuntimeError(f"{version}: static and introspected flags disagree: {check}")
    defaults = read_server_args_defaults(pkg)
    mismatched = sorted(k for k, v in defaults["server_args_defaults"].items()
                        if k in live["live_field_defaults"] and live["live_field_defaults"][k] != v)
    failures = live["failures"]
    doc: dict[str, Any] = {
        "version": version,
        "schema": SCHEMA,
        "source": {
            "wheel": wheel.name,
            "sha256": sha256_of(wheel),
            "method": "introspected: ServerArgs.add_cli_args on a fresh argparse parser, the wheel's python files "
                      "first on sys.path, each sglang module run statement by statement (a failing statement "
                      "skipped, its names stubbed); architectures and ServerArgs defaults read with ast",
            "python": f"{sys.version_info.major}.{sys.version_info.minor}",
            "generated": datetime.date.today().isoformat(),
            "generator": "python -m sglwrap.sglang.generate",
            "static_cross_check": check,
            "defaults_cross_check": {"literal_defaults": len(defaults["server_args_defaults"]),
                                     "differ_from_imported_class": mismatched},
            "stubbed_modules": sorted({f["module"] for f in failures}),
            "missing_modules": sorted({m for f in failures if (m := _missing_module(f["error"])) is not None}),
            "skipped_statements": [_short(f"{f['module']}:{f['line']}: {f['error']}") for f in failures],
        },
        "prog": prog,
        "flags": flags,
        "env": live["env"],
    }
    if live["env_note"]:
        doc["env_note"] = live["env_note"]
    doc["quantization_methods"] = _choices_of(flags, "--quantization")
    doc["kv_cache_dtypes"] = _choices_of(flags, "--kv-cache-dtype")
    doc["attention_backends"] = _choices_of(flags, "--attention-backend")
    doc.update(read_architectures(pkg))
    doc.update(defaults)
    return doc


def _short(text: str) -> str:
    """``text`` with this machine's paths (home, interpreter prefix) shortened."""
    for path, short in ((sys.prefix, "<venv>"), (os.path.expanduser("~"), "~")):
        text = text.replace(path, short)
    return text


def _missing_module(error: str) -> str | None:
    marker = "No module named "
    if marker in error:
        return error.split(marker, 1)[1].split()[0].strip("'\"")
    return None


def dump(doc: dict[str, Any]) -> str:
    """The file text: one flag per line (diffable), everything else compact."""
    lines = ["{"]
    items = list(doc.items())
    for i, (key, value) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        if key == "flags":
            lines.append('"flags": [')
            for j, f in enumerate(value):
                lines.append(json.dumps(f, sort_keys=True) + ("," if j < len(value) - 1 else ""))
            lines.append("]" + comma)
        else:
            lines.append(f"{json.dumps(key)}: {json.dumps(value, sort_keys=True)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def available_versions(rel: Path) -> list[str]:
    """Releases with an unpacked source or a wheel in the cache."""
    found = {p.name for p in (rel / "src").glob("*") if (p / "sglang").is_dir()}
    found |= {p.name.split("-")[1] for p in (rel / "wheels").glob("sglang-*.whl")}
    return sorted(found, key=version_key)


def main(argv: list[str] | None = None) -> int:
    """Command line of the generator."""
    ap = argparse.ArgumentParser(prog="python -m sglwrap.sglang.generate", description=__doc__.split("\n")[0])
    ap.add_argument("--versions", nargs="+", help="releases to generate (default: every one in the cache)")
    ap.add_argument("--out", type=Path, default=_REPO_DATA, help="output directory (default: %(default)s)")
    ap.add_argument("--releases", type=Path, default=None, help="wheels/ and src/ (default ~/.cache/sglwrap/releases)")
    ap.add_argument("--python", default=sys.executable, help="interpreter to introspect with")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        spec = json.loads(args.child)
        Path(spec["out"]).write_text(json.dumps(child_main(spec)))
        return 0
    rel = args.releases or releases_dir()
    versions = args.versions or available_versions(rel)
    failed = []
    for version in versions:
        try:
            doc = build_release(version, python=args.python, rel=rel)
        except (RuntimeError, ValueError, subprocess.SubprocessError) as e:
            print(f"generate: {version}: {e}", file=sys.stderr)
            failed.append(version)
            continue
        path = args.out / f"sglang-{version}.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(dump(doc))
        os.replace(tmp, path)
        src = doc["source"]
        print(f"{path}: {len(doc['flags'])} flags, {len(doc['architectures'])} architectures, "
              f"{len(src['skipped_statements'])} skipped statements")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
