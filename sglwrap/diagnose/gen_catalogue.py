"""Maintainer script: build ``sglwrap/data/diagnose/messages.json`` from every downloaded SGLang release's source.

For each release under ``~/.cache/sglwrap/releases/src/<version>/sglang`` it parses every ``.py`` file with ``ast``,
takes each string literal and f-string (implicit concatenations are one node), and keeps those holding one of the
``MARKERS`` below: the memory, startup, progress and error messages ``sglwrap diagnose`` reads. Each distinct
template is stored once with the releases that print it. Run: ``python -m sglwrap.diagnose.gen_catalogue [SRC]``.
Templates: literal text, ``{}`` for a value, ``{a|b}`` for a conditional expression between two literals.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from sglwrap.versions import Version

SRC: Final = Path.home() / ".cache" / "sglwrap" / "releases" / "src"
OUT: Final = Path(__file__).resolve().parents[1] / "data" / "diagnose" / "messages.json"

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


def build(src: Path) -> dict[str, object]:
    """The catalogue document for every release directory under ``src``."""
    versions = sorted((p.name for p in src.iterdir() if (p / "sglang").is_dir()), key=version_key)
    seen: dict[tuple[str, str], dict[str, object]] = {}
    for ver in versions:
        root = src / ver / "sglang"
        for path in sorted(root.rglob("*.py")):
            if "/test" in str(path.relative_to(root)) or "docs" in path.parts:
                continue
            for mid, text in messages_of(path):
                entry = seen.setdefault((mid, text), {"id": mid, "template": text, "versions": [],
                                                      "file": str(path.relative_to(src / ver))})
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
    return {"generated_by": "python -m sglwrap.diagnose.gen_catalogue", "releases": versions, "messages": msgs}


def main(argv: list[str]) -> int:
    """Write the catalogue; ``argv[0]`` may name another source root."""
    src = Path(argv[0]) if argv else SRC
    doc = build(src)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    print(f"{OUT}: {len(doc['messages'])} templates from {len(doc['releases'])} releases")  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
