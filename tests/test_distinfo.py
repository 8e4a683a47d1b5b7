"""sglwrap.distinfo against importlib.metadata, which it stands in for on the fast path."""

from __future__ import annotations

import sys
from importlib import metadata
from pathlib import Path

from sglwrap.distinfo import canonical_name, installed_version, installed_versions


def test_every_installed_distribution_gets_importlib_metadatas_version() -> None:
    names = {d.metadata["Name"] for d in metadata.distributions() if d.metadata["Name"]}
    assert len(names) > 50  # the test venv: SGLang and its dependencies
    assert installed_versions(sorted(names), sys.path) == {n: metadata.version(n) for n in names}
    assert installed_version("sglang", sys.path) == metadata.version("sglang")


def test_spellings_first_on_path_egg_info_and_missing(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    (a / "flashinfer_python-0.6.1.dist-info").mkdir(parents=True)
    (a / "flashinfer_python-0.6.1.dist-info" / "METADATA").write_text("Name: flashinfer-python\nVersion: 0.6.1\n\nx")
    (b / "flashinfer_python-0.5.0.dist-info").mkdir(parents=True)
    (b / "old_pkg.egg-info").write_text("Metadata-Version: 1.1\nName: old-pkg\nVersion: 1.2.3\n")
    paths = [str(tmp_path / "missing"), str(a), str(b)]
    assert installed_version("FlashInfer.Python", paths) == "0.6.1"
    assert installed_version("flashinfer-python", paths[2:]) == "0.5.0"  # no METADATA: the directory name says
    assert installed_version("old_pkg", paths) == "1.2.3"
    assert installed_version("sglang", paths) is None
    assert canonical_name("Foo__Bar.baz") == "foo-bar-baz"
