"""What is installed for the target interpreter, read from package metadata and ``ast`` (nothing is imported): the
distributions and their versions, SGLang's ``Requires-Dist``, the package directories of ``sglang`` and
``transformers``, and the model types and classes those two register. Each reading is kept on disk under stamps of
the files it came from (``sglwrap.diskcache``)."""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from sglwrap.distinfo import canonical_name as canonicalize_name

if TYPE_CHECKING:
    import ast

    from sglwrap.preflight.model import Context


@functools.lru_cache(maxsize=4)
def environment(python: str) -> tuple[dict[str, str], tuple[str, ...], dict[str, str]]:
    """(canonical name -> version of every installed distribution, sglang's Requires-Dist, package dirs), cached on
    disk by the site directories' ``*.dist-info`` entries (their names and stamps: an install or removal changes
    them; the directories' own mtimes are no key, as any file written beside them, in a working directory on the
    path, would change them)."""
    from sglwrap.diskcache import from_files

    raw = from_files("environment", dist_info_paths(python), lambda: list(_read_environment(python)))
    return dict(raw[0]), tuple(raw[1]), dict(raw[2])


@functools.lru_cache(maxsize=4)
def dist_info_paths(python: str) -> tuple[Path, ...]:
    """The stamps' paths for what is installed for ``python``: each directory on its path that holds
    ``*.dist-info`` entries (an install or removal there changes its mtime), and those entries (a reinstall in place
    rewrites them). A directory without any (a working directory on the path) is no key: files written there
    would change its mtime for nothing."""
    from sglwrap.host.stack import site_paths

    out: list[Path] = []
    for site in site_paths(python):
        try:
            with os.scandir(site) as it:
                infos = sorted(e.path for e in it if e.name.endswith(".dist-info"))
        except OSError:
            continue
        if infos:
            out.append(Path(site))
            out.extend(Path(p) for p in infos)
    return tuple(out)


def _read_environment(python: str) -> tuple[dict[str, str], tuple[str, ...], dict[str, str]]:
    from importlib import metadata

    from sglwrap.host.stack import site_paths

    versions: dict[str, str] = {}
    requires: tuple[str, ...] = ()
    dirs: dict[str, str] = {}
    for dist in metadata.distributions(path=site_paths(python)):
        name = dist.metadata["Name"]
        if not name:
            continue
        cname = canonicalize_name(name)
        if cname in versions:
            continue
        versions[cname] = dist.version
        if cname in ("sglang", "transformers"):
            dirs[cname] = str(dist.locate_file(cname))
            if cname == "sglang":
                requires = tuple(dist.requires or ())
    return versions, requires, dirs


@functools.lru_cache(maxsize=8)
def transformers_model_types(pkg: Path) -> frozenset[str]:
    """The ``model_type`` keys of transformers' ``CONFIG_MAPPING_NAMES`` (``models/auto/configuration_auto.py``,
    ``auto_mappings.py`` in newer releases): its assignments and ``.update(...)`` calls, read with ``ast``."""
    from sglwrap.diskcache import from_files

    files = [pkg / "models" / "auto" / n for n in ("configuration_auto.py", "auto_mappings.py")]
    return frozenset(from_files("transformers-model-types", files, lambda: sorted(_model_types(pkg))))


def parse_source(path: Path) -> ast.Module | None:
    """An installed package's source file parsed with ``ast`` (nothing imported; ``ast`` itself only imported here,
    off the warm path, where a reading is not kept), or None when it cannot be read or parsed."""
    import ast

    try:
        return ast.parse(path.read_bytes())
    except (OSError, SyntaxError):
        return None


def _model_types(pkg: Path) -> set[str]:
    import ast  # on a cache miss only: the parsed result is kept with the files' stamps

    out: set[str] = set()

    def collect(value: ast.AST) -> None:
        for n in ast.walk(value):
            if isinstance(n, ast.Tuple) and len(n.elts) == 2 and all(
                    isinstance(e, ast.Constant) and isinstance(e.value, str) for e in n.elts):
                out.add(str(n.elts[0].value))  # type: ignore[attr-defined]
            elif isinstance(n, ast.Dict):
                out.update(k.value for k, v in zip(n.keys, n.values) if isinstance(k, ast.Constant)
                           and isinstance(k.value, str) and isinstance(v, ast.Constant))

    for name in ("configuration_auto.py", "auto_mappings.py"):
        tree = parse_source(pkg / "models" / "auto" / name)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if any(isinstance(t, ast.Name) and t.id == "CONFIG_MAPPING_NAMES" for t in targets):
                    collect(node.value)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update" \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "CONFIG_MAPPING_NAMES":
                for arg in node.args:
                    collect(arg)
    return out


@functools.lru_cache(maxsize=8)
def transformers_classes(pkg: Path) -> frozenset[str]:
    """Model class names transformers' auto mappings name (``models/auto/modeling_auto.py``): what SGLang's
    Transformers backend can resolve with ``getattr(transformers, arch)``."""
    from sglwrap.diskcache import from_files

    path = pkg / "models" / "auto" / "modeling_auto.py"

    def read() -> list[str]:
        import ast

        tree = parse_source(path)
        if tree is None:
            return []
        out: set[str] = set()
        for n in ast.walk(tree):
            if isinstance(n, ast.Tuple) and len(n.elts) == 2 and all(
                    isinstance(e, ast.Constant) and isinstance(e.value, str) for e in n.elts):
                out.add(str(n.elts[1].value))  # type: ignore[attr-defined]
        return sorted(out)

    return frozenset(from_files("transformers-classes", [path], read))


def installed_dirs(python: str) -> dict[str, str]:
    """Package directories of the installed ``sglang`` and ``transformers`` for ``python``."""
    return dict(environment(python)[2])


def installed_sglang(ctx: Context) -> str | None:
    """The SGLang version really installed for the target interpreter (``--assume-stack`` does not change it), as
    ``run_preflight`` read it before the checks ran."""
    return ctx.installed_sglang


@functools.lru_cache(maxsize=8)
def sglang_model_types(pkg: Path) -> frozenset[str]:
    """Model types SGLang registers with ``AutoConfig`` itself: ``model_type = "..."`` class attributes of its config
    classes (``srt/configs/**``, ``srt/models/*``) and ``_CONFIG_REGISTRY["..."]`` entries
    (``srt/utils/hf_transformers/common.py:117-290`` in 0.5.23)."""
    from sglwrap.diskcache import from_files

    srt = pkg / "srt"
    files = sorted([*(srt / "configs").rglob("*.py"), *(srt / "models").glob("*.py"),
                    *(srt / "utils" / "hf_transformers").glob("*.py"), srt / "hf_transformers_utils.py"])
    files = [f for f in files if f.is_file()]
    return frozenset(from_files("sglang-model-types", files, lambda: sorted(_sglang_types(files))))


def _sglang_types(files: list[Path]) -> set[str]:
    out: set[str] = set()
    for f in files:
        try:
            text = f.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        out.update(re.findall(r"^\s+model_type\s*(?::\s*str\s*)?=\s*[\"']([\w.-]+)[\"']", text, re.M))
        out.update(re.findall(r"_CONFIG_REGISTRY\[\s*[\"']([\w.-]+)[\"']\s*\]", text))
    return out
