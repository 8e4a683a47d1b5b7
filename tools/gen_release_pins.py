"""Generate ``sglwrap/data/sglang/pins.json``: what each bundled SGLang release installs, from its own metadata.

For every release with a ``sglang-<version>.json`` beside it, ``pip install --dry-run --no-deps --report`` reads the
release's ``Requires-Dist`` from the package index (the metadata only, no wheel), and this script keeps what
``pip install "sglang[all]"`` (the install command of the 0.2 - 0.4 docs; from 0.5 plain ``sglang`` brings the same
runtime) would pull for Linux x86_64: the base requirements, and apart what the ``all`` extra adds (self-references such as
``sglang[srt]`` followed): a package only the extra brings is there or not depending on how SGLang was installed. Markers are evaluated for CPython 3.12 on Linux x86_64.

    python tools/gen_release_pins.py [--versions 0.5.9 ...]     # regenerate (network: the package index)
    python tools/gen_release_pins.py --check                    # the bundled file covers every bundled release

Maintainer tool: never imported by sglwrap at run time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

DATA = Path(__file__).resolve().parent.parent / "sglwrap" / "data" / "sglang"
OUT = DATA / "pins.json"
ENV = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
       "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
       "implementation_name": "cpython", "platform_python_implementation": "CPython"}


def bundled_versions() -> list[str]:
    """Every release with bundled flag data, oldest first."""
    names = [p.name.removeprefix("sglang-").removesuffix(".json") for p in DATA.glob("sglang-*.json")]
    return sorted(names, key=Version)


def requires_dist(version: str) -> list[str]:
    """The release's Requires-Dist lines, read from the index's metadata."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "r.json"
        subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--ignore-installed", "-q",
                        "--disable-pip-version-check", "--report", str(report), f"sglang=={version}"],
                       check=True, capture_output=True, env={**os.environ, "PIP_NO_INPUT": "1"})
        doc = json.loads(report.read_text())
    return list(doc["install"][0]["metadata"].get("requires_dist") or [])


def _holds(req: Requirement, extra: str) -> bool:
    if req.marker is None:
        return extra == ""
    return Marker(str(req.marker)).evaluate({**ENV, "extra": extra})


def installed_by(lines: list[str]) -> dict[str, dict[str, str]]:
    """``{"base": {distribution: specifier}, "all": {...}}``: what ``pip install sglang`` installs, and what
    ``sglang[all]`` adds to it ("" when any version will do)."""
    base = _requirements(lines, [""])
    extra = {k: v for k, v in _requirements(lines, ["", "all"]).items() if k not in base}
    return {"base": base, "all": extra}


def _requirements(lines: list[str], extras: list[str]) -> dict[str, str]:
    """``{distribution: specifier}`` the requirements of ``extras`` reach (self-references followed)."""
    reqs = [Requirement(line) for line in lines]
    out: dict[str, str] = {}
    todo, seen = list(extras), set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for req in reqs:
            if not _holds(req, extra):
                continue
            name = canonicalize_name(req.name)
            if name == "sglang":
                todo += sorted(req.extras)
                continue
            spec = str(req.specifier)
            out[name] = spec if name not in out or not out[name] else out[name]
    return dict(sorted(out.items()))


def main(argv: list[str] | None = None) -> int:
    """Regenerate, or with --check compare the bundled file's releases with the bundled flag data."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--versions", nargs="*")
    ap.add_argument("--check", action="store_true")
    ns = ap.parse_args(argv)
    doc: dict[str, Any] = json.loads(OUT.read_text()) if OUT.exists() else {"schema": 2, "releases": {}}
    if doc.get("schema") != 2:
        doc = {"schema": 2, "releases": {}}
    if ns.check:
        missing = [v for v in bundled_versions() if v not in doc["releases"]]
        if missing:
            print(f"{OUT}: no pins for {', '.join(missing)}; run tools/gen_release_pins.py", file=sys.stderr)
            return 1
        print(f"{OUT}: pins for all {len(doc['releases'])} bundled releases")
        return 0
    for version in ns.versions or bundled_versions():
        try:
            doc["releases"][version] = installed_by(requires_dist(version))
        except subprocess.CalledProcessError as e:
            print(f"sglang=={version}: {e.stderr.decode()[-300:]}", file=sys.stderr)
            return 1
        print(version, len(doc["releases"][version]["base"]), file=sys.stderr)
    doc["releases"] = dict(sorted(doc["releases"].items(), key=lambda kv: Version(kv[0])))
    doc["schema"] = 2
    doc["source"] = ("Requires-Dist of each release on the package index for CPython 3.12 on Linux x86_64: 'base' "
                     "is what `pip install sglang` installs, 'all' what `sglang[all]` adds (tools/gen_release_pins.py)")
    tmp = OUT.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    tmp.replace(OUT)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
