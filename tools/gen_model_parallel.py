"""Generate ``sglwrap/data/compat/model-parallel.yaml``: the model classes each SGLang release cannot pipeline.

Maintainer tool: never imported by sglwrap at run time. Run from the checkout::

    python tools/gen_model_parallel.py [--releases DIR] [--out FILE]   # regenerate (needs every release's wheel)
    python tools/gen_model_parallel.py --check              # the file is what the release wheels give (exit 1: not)
    python tools/gen_model_parallel.py --check --offline    # the file re-renders byte for byte from its own classes
                                                            # and the bundled flag tables (no wheels: CI runs this)
    python tools/gen_model_parallel.py --check --installed  # the file agrees with the installed SGLang's
                                                            # srt/models (CI runs this with SGLang 0.5.23)

SGLang's ModelRunner sets ``support_pp = "pp_proxy_tensors" in inspect.signature(model.forward).parameters`` and,
with ``--pp-size`` > 1, asserts it. This reads ``srt/models/*.py`` of every release in the cache (wheels from
``pip download --no-deps``, unpacked by :mod:`sglwrap.sglang.generate`) with ``ast``: each ``EntryClass``, its
``forward`` (inherited through base classes named in any model module of that release) and whether
``pp_proxy_tensors`` is one of its parameters. Releases before the first one with ``--pp-size`` are not read.
A class without the parameter gets an entry whose range ends at the first release read whose class takes it (no
upper bound: still without it in the newest release read); classes are grouped by that bound. Speculative draft /
MTP classes (``NextN``, ``MTP``, ``Eagle``, ``Draft`` in the name) never run as a pipelined target and are left out.
``--check`` exits 1 when the file on disk differs from what the releases give (nothing is written then); it needs
the wheels of the 60-odd releases (``pip download``: network), which CI does not have. ``--offline`` checks what can
be checked without them: the header and the entries follow from the bundled flag tables (a release bundled since the
file was written changes them) and from the classes the file holds. ``--installed`` reads the one release installed
beside sglwrap: each class the file lists for that release must lack ``pp_proxy_tensors`` there, each class whose
range ended at or before it must take it, and no other class of that release may lack it.
"""

from __future__ import annotations

import argparse
import ast
import os
import sys
from pathlib import Path
from typing import Any

if not __package__:  # run as a script: the checkout's sglwrap, the one whose data this writes
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sglwrap.sglang.generate import (_entry_names, _parse, ensure_source, find_wheel,  # noqa: E402
                                     releases_dir)

_REPO = Path(__file__).resolve().parents[1]
_OUT = _REPO / "sglwrap" / "data" / "compat" / "model-parallel.yaml"
_DATA = _REPO / "sglwrap" / "data" / "sglang"
_DRAFT_MARKS = ("NextN", "MTP", "Eagle", "Draft")
CHECKED = "2026-12-01"
SOURCES = (
    "https://github.com/sgl-project/sglang/blob/v0.5.23/python/sglang/srt/model_executor/model_runner.py",
    "https://github.com/sgl-project/sglang/pull/18925",
    "https://github.com/sgl-project/sglang/issues/19503",
    "https://github.com/sgl-project/sglang/issues/18433",
)
CONSEQUENCE = "AssertionError: Pipeline Parallel is not compatible with this model."
# the release's own code decides it (kb.STRONGEST: source may block)
EVIDENCE = "source"
EVIDENCE_REF = ("sglang 0.5.23 python/sglang/srt/model_executor/model_runner.py:515 asserts support_pp with pp_size > 1 "
                "('Pipeline Parallel is not compatible with this model.', since 0.5.6: 0.5.9 model_runner.py:427); "
                "before 0.5.6 a non-last stage of such a class returns the model's output where PPProxyTensors are "
                "expected (0.4.8 python/sglang/srt/managers/tp_worker.py:231 pp_proxy_tensors.tensors)")


def _pkey(version: str) -> Any:
    from sglwrap.versions import Version
    return Version(version)


def pp_releases(data_dir: Path = _DATA) -> list[str]:
    """Releases with a flag table whose options include ``--pp-size``, oldest first."""
    import json
    out = []
    for path in data_dir.glob("sglang-*.json"):
        doc = json.loads(path.read_text(encoding="utf-8"))
        if any("--pp-size" in f.get("options", ()) for f in doc.get("flags", ())):
            out.append(doc["version"])
    return sorted(out, key=_pkey)


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    a = fn.args
    names = {x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)}
    if a.kwarg is not None:
        names.add("**")
    return names


def _base_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _assigns_forward(cls: ast.ClassDef) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == "forward" and isinstance(n.ctx, ast.Store)
               and isinstance(n.value, ast.Name) and n.value.id == "self" for n in ast.walk(cls))


_NO_FORWARD = frozenset({"Module", "PreTrainedModel", "object", "ABC", "Generic", "Protocol"})


def pp_support(models_dir: Path) -> dict[str, bool | None]:
    """``{EntryClass name: forward takes pp_proxy_tensors}`` for one release's ``srt/models``.

    None where the ``forward`` is not known from the source: a base class read nowhere under ``srt/models``, or a
    class that hands its forward to an inner model (``__getattr__``, ``self.forward = ...``), whose forward depends
    on the checkpoint or the submodule.
    """
    classes: dict[str, tuple[list[str], set[str] | None, bool]] = {}
    entries: set[str] = set()
    for f in sorted(models_dir.rglob("*.py")):
        tree = _parse(f)
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                methods = {b.name: b for b in node.body if isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef))}
                fwd = methods.get("forward")
                bases = [n for n in (_base_name(b) for b in node.bases) if n]
                classes.setdefault(node.name, (bases, _params(fwd) if fwd is not None else None,
                                               "__getattr__" in methods or _assigns_forward(node)))
        if f.parent == models_dir and f.name != "__init__.py":
            entries.update(_entry_names(tree) or ())

    def takes(name: str, seen: frozenset[str]) -> bool | None:
        if name in _NO_FORWARD:
            return False
        if name in seen or name not in classes:
            return None
        bases, params, delegates = classes[name]
        if params is not None:
            return "pp_proxy_tensors" in params
        if delegates:
            return None
        found = [takes(b, seen | {name}) for b in bases] or [False]
        known = [t for t in found if t is not None]
        return None if len(known) < len(found) and not any(known) else any(known)

    return {name: takes(name, frozenset()) for name in sorted(entries)}


def ranges(support: dict[str, dict[str, bool | None]]) -> dict[str | None, list[str]]:
    """``{first release whose class takes pp_proxy_tensors (None: none read does): [classes]}``.

    A class whose forward is unknown in any release read is left out: no entry fires on a guess."""
    order = sorted(support, key=_pkey)
    out: dict[str | None, list[str]] = {}
    names = sorted({n for per in support.values() for n in per})
    for name in names:
        if any(m in name for m in _DRAFT_MARKS):
            continue
        seen = [v for v in order if name in support[v]]
        if any(support[v][name] is None for v in seen) or support[seen[0]][name]:
            continue  # took it from the first release that had it
        fixed = next((v for v in seen if support[v][name]), None)
        out.setdefault(fixed, []).append(name)
    return out


def render(groups: dict[str | None, list[str]], first: str, releases: list[str]) -> str:
    """The YAML text of the knowledge-base file."""
    lines = [
        "# Pipeline parallelism (--pp-size > 1) on a model class that does not take pp_proxy_tensors in forward.",
        "# SGLang's ModelRunner sets support_pp = \"pp_proxy_tensors\" in inspect.signature(model.forward).parameters"
        " and, with",
        "# pp_size > 1, asserts it (\"Pipeline Parallel is not compatible with this model.\"; before the assertion "
        "existed the",
        "# non-first stages crash while loading or running). GENERATED by python "
        "tools/gen_model_parallel.py",
        f"# from srt/models/*.py of {len(releases)} releases ({releases[0]} - {releases[-1]}, every release read "
        "that has --pp-size):",
        "# each EntryClass, its forward (inherited through base classes) and whether pp_proxy_tensors is a parameter.",
        "# A range ends at the first release read whose class takes pp_proxy_tensors; no upper bound: still without "
        "it in",
        f"# {releases[-1]}. Draft/MTP classes are left out. The model's architecture comes from its config.json (no "
        "config",
        "# found: no entry fires). Do not edit by hand.",
        "entries:",
    ]
    import yaml
    entries: list[dict[str, Any]] = []
    bounded = sorted((k for k in groups if k is not None), key=_pkey)
    for bound in [*bounded, None]:
        if bound not in groups:
            continue
        if bound is None:
            eid = "pp-unsupported-model"
            title = (f"pipeline parallelism on a model class that still has no pp_proxy_tensors (SGLang >= {first}, "
                     f"through {releases[-1]})")
            spec = f">={first}"
            fix = "use tensor parallelism only (--pp-size 1); no release read takes pp_proxy_tensors for this class"
        else:
            eid = f"pp-unsupported-model-until-{bound}"
            title = f"pipeline parallelism on a model class without pp_proxy_tensors (SGLang {first} - before {bound})"
            spec = f">={first},<{bound}"
            fix = f"use tensor parallelism only (--pp-size 1), or SGLang {bound}+, whose model class takes " \
                  "pp_proxy_tensors"
        entries.append({"id": eid, "title": title,
                        "applies": {"args": {"pp_size": {"gt": 1}}, "packages": {"sglang": spec},
                                    "arch": groups[bound]},
                        "consequence": CONSEQUENCE, "severity": "block", "evidence": EVIDENCE,
                        "evidence_ref": EVIDENCE_REF, "fix": fix, "sources": list(SOURCES),
                        "checked": CHECKED})
    body = yaml.safe_dump({"entries": entries}, sort_keys=False, width=120, default_flow_style=False)
    return "\n".join(lines[:-1]) + "\n" + body


def groups_of(text: str) -> tuple[dict[str | None, list[str]], str]:
    """The ``groups`` and first release that :func:`render` made ``text`` from (read back from its entries)."""
    import yaml
    groups: dict[str | None, list[str]] = {}
    first = ""
    for e in (yaml.safe_load(text) or {}).get("entries") or []:
        spec = str(e["applies"]["packages"]["sglang"])
        low, _, high = spec.partition(",")
        first = low.removeprefix(">=")
        groups[high.removeprefix("<") or None] = list(e["applies"]["arch"])
    return groups, first


def offline_text(text: str, data_dir: Path = _DATA) -> str:
    """What the generator writes for the classes held in ``text`` and the releases of the bundled flag tables."""
    groups, _ = groups_of(text)
    releases = pp_releases(data_dir)
    return render(groups, releases[0], releases)


def installed_differences(text: str, version: str, models_dir: Path) -> list[str]:
    """Where the file and one release's ``srt/models`` disagree (empty: they agree)."""
    from sglwrap.versions import Version
    groups, _ = groups_of(text)
    here = pp_support(models_dir)
    lacking = {n for bound, names in groups.items() if bound is None or Version(version) < Version(bound)
               for n in names}
    taking = {n for bound, names in groups.items() if bound is not None and Version(bound) <= Version(version)
              for n in names}
    out = [f"{n}: the file says it lacks pp_proxy_tensors in {version}, the source says it takes it"
           for n in sorted(lacking) if here.get(n) is True]
    out += [f"{n}: the file says it takes pp_proxy_tensors from {version} or before, the source says it does not"
            for n in sorted(taking) if here.get(n) is False]
    out += [f"{n}: lacks pp_proxy_tensors in {version} but is in no entry" for n, takes in sorted(here.items())
            if takes is False and n not in lacking | taking and not any(m in n for m in _DRAFT_MARKS)]
    return out


def _installed() -> tuple[str, Path] | None:
    """The installed SGLang's version and ``srt/models`` directory, or None."""
    from sglwrap.preflight.checks_model import installed_package_dir
    from sglwrap.sglang.release import installed_version_text

    version, pkg = installed_version_text(sys.executable), installed_package_dir(sys.executable)
    return (version, pkg / "srt" / "models") if version and pkg else None


def _check_installed(out: Path) -> int:
    found = _installed()
    if found is None:
        print("gen_model_parallel: --installed: SGLang is not installed here", file=sys.stderr)
        return 2
    version, models = found
    if version not in pp_releases():
        print(f"gen_model_parallel: --installed: sglang {version} has no bundled flag table with --pp-size",
              file=sys.stderr)
        return 2
    diffs = installed_differences(out.read_text(encoding="utf-8"), version, models)
    for d in diffs:
        print(f"{out}: {d}")
    print(f"{out}: {'agrees with' if not diffs else 'differs from'} the installed sglang {version}")
    return 0 if not diffs else 1


def main(argv: list[str] | None = None) -> int:
    """Command line of the generator."""
    ap = argparse.ArgumentParser(prog="python tools/gen_model_parallel.py",
                                 description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--releases", type=Path, default=None, help="wheels/ and src/ (default ~/.cache/sglwrap/releases)")
    ap.add_argument("--out", type=Path, default=_OUT, help="output file (default: %(default)s)")
    ap.add_argument("--check", action="store_true", help="compare with the file on disk; write nothing")
    how = ap.add_mutually_exclusive_group()
    how.add_argument("--offline", action="store_true",
                     help="with --check: re-render from the file's classes and the bundled flag tables (no wheels)")
    how.add_argument("--installed", action="store_true",
                     help="with --check: compare with the installed SGLang's srt/models")
    args = ap.parse_args(argv)
    if (args.offline or args.installed) and not args.check:
        ap.error("--offline and --installed go with --check")
    if args.check and not args.out.is_file():
        print(f"{args.out}: missing", file=sys.stderr)
        return 1
    if args.offline:
        same = args.out.read_text(encoding="utf-8") == offline_text(args.out.read_text(encoding="utf-8"))
        print(f"{args.out}: {'up to date with' if same else 'differs from'} the bundled flag tables and its own classes")
        return 0 if same else 1
    if args.installed:
        return _check_installed(args.out)
    rel = args.releases or releases_dir()
    releases = pp_releases()
    support: dict[str, dict[str, bool | None]] = {}
    for version in releases:
        wheel = find_wheel(version, rel / "wheels")
        if wheel is None:
            print(f"gen_model_parallel: no wheel for sglang=={version} in {rel / 'wheels'} "
                  f"(pip download --no-deps sglang=={version} -d {rel / 'wheels'}; or --check --offline)",
                  file=sys.stderr)
            return 2
        src = ensure_source(version, wheel, rel / "src")
        support[version] = pp_support(src / "sglang" / "srt" / "models")
    text = render(ranges(support), releases[0], sorted(support, key=_pkey))
    if args.check:
        same = args.out.read_text(encoding="utf-8") == text
        print(f"{args.out}: {'up to date' if same else 'differs from what the releases give'}")
        return 0 if same else 1
    tmp = args.out.with_suffix(".yaml.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, args.out)
    print(f"{args.out}: {sum(len(v) for v in ranges(support).values())} classes in {len(ranges(support))} entries "
          f"from {len(releases)} releases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
