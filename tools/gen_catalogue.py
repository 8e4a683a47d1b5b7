"""Build ``sglwrap/data/diagnose/messages.json`` from every downloaded SGLang release's source.

For each release under ``~/.cache/sglwrap/releases/src/<version>/sglang`` it parses every ``.py`` file with ``ast``,
takes each string literal and f-string (implicit concatenations are one node), and keeps those holding one of the
``MARKERS`` below: the memory, startup, progress and error messages ``sglwrap diagnose`` reads. Each distinct
template is stored once with the releases that print it.
Templates: literal text, ``{}`` for a value, ``{a|b}`` for a conditional expression between two literals.

Maintainer tool: never imported by sglwrap at run time. Run from the checkout::

    python tools/gen_catalogue.py [SRC]                   # regenerate (SRC: default ~/.cache/sglwrap/releases/src)
    python tools/gen_catalogue.py --check [SRC]           # the file is what the sources give (exit 1: not)
    python tools/gen_catalogue.py --check --offline       # the file is well formed: as written by this tool, versions
                                                          # in release order, first/last from them (CI runs this)
    python tools/gen_catalogue.py --check --installed     # the templates the file gives the installed SGLang are
                                                          # the ones its source holds (CI runs this with 0.5.23)

``--check`` without ``--offline``/``--installed`` needs the unpacked source of every release listed in the file
(``pip download``: network), which CI does not have.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

if not __package__:  # run as a script: the checkout's sglwrap, the one whose data this writes
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

if TYPE_CHECKING:
    from sglwrap.versions import Version

SRC: Final = Path.home() / ".cache" / "sglwrap" / "releases" / "src"
OUT: Final = Path(__file__).resolve().parents[1] / "sglwrap" / "data" / "diagnose" / "messages.json"
GENERATED_BY: Final = "python tools/gen_catalogue.py"

# message id -> literal text that identifies it in a template (searched in the literal parts only)
MARKERS: Final[dict[str, str]] = {
    "init_begin": r"Init torch distributed begin|Init nccl begin|Init parallel begin",
    "init_end": r"Init torch distributed ends|Memory baseline taken",
    "load_begin": r"Load weight begin",
    "load_end": r"Load weight end",
    "kv_alloc": r"KV Cache is allocated|KV Cache VA upper bound|\{VA upper bound\|is allocated\}\. dtype",
    "kv_post_capture": r"Post-capture KV sizing",
    "pool_end": r"Memory pool end",
    "swa": r"Use sliding window memory pool",
    "pool_total": r"(?:SWAKVPool|HybridLinearKVPool|HybridReqToTokenPool) \{?'?(?:mem usage|VA upper bound)",
    "mamba_alloc": r"Mamba Cache is allocated",
    "capture_failed": r"^Capture .*(?:graph|\}) failed",
    "capture_end": r"^Capture .*(?:graph|\}) end\.",
    "capture_begin": r"^Capture .*(?:graph|\}) begin",
    "capture_bs": r"Capture cuda graph bs",
    "max_total": r"^max_total_num_tokens=\{",
    "profiled": r"is larger than the profiled value",
    "up": r"The server is fired up and ready to roll",
    "not_enough": r"Not enough memory\. Please try",
    "no_kv": r"Loaded weights leave no GPU memory",
    "unbalanced": r"The memory capacity is unbalanced",
    "budget_other": r"Not enough GPU memory for hybrid|SWA pool \(\{\} tokens\) cannot|SWA pool cap \(",
    "bench_done": r"Prefill\. latency: |Total\. latency: |Decode\.  median latency|Benchmark Result",
    "crash": r"hit an exception|Received sigquit from a child",
    # SGLang's own KV/request-pool allocators giving up while serving (not a device allocation): "Decode out of
    # memory. Try to lower your batch size.", "alloc_req_slots runs out of memory. …" (SG-0.5.23
    # mem_cache/allocation.py:239,345,613; older releases in managers/schedule_batch.py and mem_cache/common.py)
    "kv_exhausted": r"^(?:Prefill|Decode) out of memory\. Try|^alloc_\w+ runs out of memory|^Out of request slots",
}
# Ids whose message is the first line of a multi-line f-string (the rest names numbers and fixes).
FIRST_LINE_IDS: Final = frozenset({"kv_exhausted"})
_MARK_RES: Final = {k: re.compile(v) for k, v in MARKERS.items()}


def version_key(v: str) -> Version:
    """Sort key of a release directory name such as ``0.5.10`` or ``0.4.3.post4`` (``sglwrap.versions``)."""
    from sglwrap.versions import strict

    return strict(v)


def _piece(node: ast.expr) -> str:
    if isinstance(node, ast.IfExp) and isinstance(node.body, ast.Constant) and isinstance(node.orelse, ast.Constant):
        return "{" + f"{node.body.value!s}|{node.orelse.value!s}" + "}"  # type: ignore[str-bytes-safe]
    return "{}"


_PRINTF_RE: Final = re.compile(r"%[-+ #0]*\d*(?:\.\d+)?[sdfgrx]")
# A file is parsed only if it holds one of these (most of a release's files hold none).
QUICK: Final = ("Load weight", "KV Cache", "Memory pool", "graph", "max_total", "profiled value", "fired up",
                "Not enough", "Loaded weights", "memory capacity", "SWA", "Mamba Cache", "latency:",
                "Benchmark Result", "hit an exception", "sigquit", "Init ", "Memory baseline", "Post-capture",
                "sliding window", "out of memory", "Out of request")


def template(node: ast.AST) -> str | None:
    """The template of a string literal or f-string node; None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return _PRINTF_RE.sub("{}", node.value)
    if isinstance(node, ast.JoinedStr):
        out = []
        for part in node.values:
            if isinstance(part, ast.Constant):
                out.append(str(part.value))
            elif isinstance(part, ast.FormattedValue):
                out.append(_piece(part.value))
        return "".join(out)
    return None


def messages_of(path: Path) -> list[tuple[str, str]]:
    """(id, template) for every matching string in one source file."""
    source = path.read_text(encoding="utf-8", errors="replace")
    if not any(q in source for q in QUICK):
        return []
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    inner = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    found: list[tuple[str, str]] = []
    for node in ast.walk(tree):
        if id(node) in inner:
            continue
        if not isinstance(node, ast.JoinedStr) and not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
            continue
        text = template(node)
        if not text:
            continue
        first = text.strip().split("\n", 1)[0]
        for mid, rx in _MARK_RES.items():
            if mid in FIRST_LINE_IDS and first != text.strip() and rx.search(first) and len(first) <= 400:
                found.append((mid, " ".join(first.split())))
                break
            if len(text) > 400 or "\n" in text.strip():
                continue
            if rx.search(text):
                found.append((mid, " ".join(text.split())))
                break
    return found


def release_messages(root: Path) -> list[tuple[str, str, str]]:
    """(id, template, file relative to ``root``'s parent) for every matching string of one release's ``sglang``
    package directory ``root`` (tests and docs left out)."""
    out: list[tuple[str, str, str]] = []
    for path in sorted(root.rglob("*.py")):
        if "/test" in str(path.relative_to(root)) or "docs" in path.parts:
            continue
        out.extend((mid, text, str(path.relative_to(root.parent))) for mid, text in messages_of(path))
    return out


def build(src: Path) -> dict[str, object]:
    """The catalogue document for every release directory under ``src``."""
    versions = sorted((p.name for p in src.iterdir() if (p / "sglang").is_dir()), key=version_key)
    seen: dict[tuple[str, str], dict[str, object]] = {}
    for ver in versions:
        for mid, text, file in release_messages(src / ver / "sglang"):
            entry = seen.setdefault((mid, text), {"id": mid, "template": text, "versions": [], "file": file})
            vs = entry["versions"]
            assert isinstance(vs, list)
            if ver not in vs:
                vs.append(ver)
    msgs = sorted(seen.values(), key=lambda e: (str(e["id"]), version_key(str(e["versions"][0])),  # type: ignore[index]
                                                str(e["template"])))
    for e in msgs:
        vs = e["versions"]
        assert isinstance(vs, list)
        e["first"], e["last"] = vs[0], vs[-1]
    return {"generated_by": GENERATED_BY, "releases": versions, "messages": msgs}


def dump(doc: dict[str, Any]) -> str:
    """The file's text for a catalogue document."""
    return json.dumps(doc, indent=1, sort_keys=False) + "\n"


def offline_problems(text: str) -> list[str]:
    """What is wrong with the file's text that can be told without any release's source (empty: nothing)."""
    doc = json.loads(text)
    out = [] if dump(doc) == text else ["not the text this tool writes for its own content"]
    if doc.get("generated_by") != GENERATED_BY:
        out.append(f"generated_by is {doc.get('generated_by')!r}, not {GENERATED_BY!r}")
    releases = list(doc.get("releases") or [])
    if releases != sorted(releases, key=version_key) or len(set(releases)) != len(releases):
        out.append("releases are not distinct and in release order")
    seen = set()
    for i, e in enumerate(doc.get("messages") or []):
        vs = list(e.get("versions") or [])
        where = f"messages[{i}] ({e.get('id')})"
        if e.get("id") not in MARKERS:
            out.append(f"{where}: id is not one of the markers")
        if not vs or vs != sorted(vs, key=version_key) or set(vs) - set(releases):
            out.append(f"{where}: versions are not releases of the file in release order")
        elif (e.get("first"), e.get("last")) != (vs[0], vs[-1]):
            out.append(f"{where}: first/last are not the first and last of its versions")
        if (e.get("id"), e.get("template")) in seen:
            out.append(f"{where}: the template is stored twice")
        seen.add((e.get("id"), e.get("template")))
    return out


def installed_differences(doc: dict[str, Any], version: str, root: Path) -> list[str]:
    """Templates the file gives ``version`` but ``root`` (its ``sglang`` package) lacks, and the reverse."""
    filed = {(e["id"], e["template"]) for e in doc["messages"] if version in e["versions"]}
    found = {(mid, text) for mid, text, _ in release_messages(root)}
    return ([f"{mid}: {text!r} is in the file for {version}, not in its source" for mid, text in sorted(filed - found)]
            + [f"{mid}: {text!r} is in the source of {version}, not in the file" for mid, text in sorted(found - filed)])


def _installed() -> tuple[str, Path] | None:
    """The installed SGLang's version and package directory, or None."""
    from sglwrap.preflight.checks_model import installed_package_dir
    from sglwrap.sglang.release import installed_version_text

    version, pkg = installed_version_text(sys.executable), installed_package_dir(sys.executable)
    return (version, pkg) if version and pkg else None


def _report(problems: list[str], ok: str, bad: str) -> int:
    for line in problems:
        print(f"{OUT}: {line}")
    print(f"{OUT}: {bad if problems else ok}")
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    """Write the catalogue, or check it (``--check``)."""
    ap = argparse.ArgumentParser(prog="python tools/gen_catalogue.py", description=(__doc__ or "").split("\n")[0])
    ap.add_argument("src", nargs="?", type=Path, default=SRC, help="release sources (default: %(default)s)")
    ap.add_argument("--check", action="store_true", help="compare with the file on disk; write nothing")
    how = ap.add_mutually_exclusive_group()
    how.add_argument("--offline", action="store_true", help="with --check: what can be told without the sources")
    how.add_argument("--installed", action="store_true", help="with --check: against the installed SGLang's source")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    if (args.offline or args.installed) and not args.check:
        ap.error("--offline and --installed go with --check")
    if args.offline:
        return _report(offline_problems(OUT.read_text(encoding="utf-8")), "well formed", "not well formed")
    if args.installed:
        found = _installed()
        doc = json.loads(OUT.read_text(encoding="utf-8"))
        if found is None or found[0] not in doc["releases"]:
            print(f"gen_catalogue: --installed: {'no SGLang installed' if found is None else found[0]} "
                  "is not a release of the catalogue", file=sys.stderr)
            return 2
        return _report(installed_differences(doc, *found), f"agrees with the installed sglang {found[0]}",
                       f"differs from the installed sglang {found[0]}")
    if not args.src.is_dir():
        print(f"gen_catalogue: no release sources in {args.src} (or --check --offline)", file=sys.stderr)
        return 2
    text = dump(build(args.src))
    if args.check:
        same = OUT.read_text(encoding="utf-8") == text
        print(f"{OUT}: {'up to date' if same else 'differs from what the sources give'}")
        return 0 if same else 1
    OUT.parent.mkdir(parents=True, exist_ok=True)
    tmp = OUT.with_suffix(".json.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, OUT)
    doc = json.loads(text)
    print(f"{OUT}: {len(doc['messages'])} templates from {len(doc['releases'])} releases")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
