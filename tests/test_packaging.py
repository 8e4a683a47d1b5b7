"""The wheel carries the profiles, templates and bundled data, and the installed layout finds them."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from .conftest import REPO


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src")
    for name in ("sglwrap", "profiles", "sitecustomize_templates", "pyproject.toml", "setup.py", "README.md"):
        p = REPO / name
        if p.is_dir():
            shutil.copytree(p, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif p.exists():
            shutil.copy(p, src / name)
    out = tmp_path_factory.mktemp("wheelhouse")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(out), str(src)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (whl,) = out.glob("sglwrap-*.whl")
    return whl


def test_wheel_contains_profiles_templates_and_data(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for prof in ("baseline", "fewchan", "lowgraph", "pcie-ipc", "pcie-ring"):
        assert f"sglwrap/_profiles/{prof}.yaml" in names
    assert "sglwrap/_templates/sitecustomize.py.tmpl" in names
    assert "sglwrap/data/sglang/sglang-0.5.23.json" in names
    assert any(n.startswith("sglwrap/data/models/") and n.endswith("config.json") for n in names)
    entry = [n for n in names if n.endswith("entry_points.txt")]
    assert entry and "sglwrap = sglwrap.entry:main" in zipfile.ZipFile(wheel).read(entry[0]).decode()


def test_wheel_leaves_the_maintainer_tools_out(wheel: Path) -> None:
    """The generators in tools/ are for maintainers: neither the folder nor any generator module is shipped."""
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "sglwrap/data/memory/fits.json" in names and "sglwrap/data/diagnose/messages.json" in names
    tools = {p.name for p in (Path(__file__).resolve().parents[1] / "tools").glob("*.py")}
    assert "gen_catalogue.py" in tools
    shipped = [n for n in names if n.startswith("tools/") or n.rsplit("/", 1)[-1] in tools]
    assert not shipped, shipped


def test_installed_layout_finds_builtin_profiles_and_renders(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    code = ("import sglwrap.profiles as p, sglwrap.inject as i\n"
            "d = p.builtin_dir(); print(d)\n"
            "print(sorted(n for n, _ in p.list_profiles()))\n"
            "print('NCCL_BUFFSIZE' in i.render_sitecustomize(p.load_profile('fewchan')))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path, env={"PYTHONPATH": str(site), "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    where, names, rendered = proc.stdout.splitlines()
    assert where == str(site / "sglwrap" / "_profiles")
    assert names == "['baseline', 'fewchan', 'lowgraph', 'pcie-ipc', 'pcie-ring']"
    assert rendered == "True"


def test_bin_sglwrap_runs_from_a_checkout(tmp_path: Path) -> None:
    proc = subprocess.run([str(REPO / "bin" / "sglwrap"), "profiles", "list"], capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                                           "SGLWRAP_PYTHON": sys.executable})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split()[0] == "baseline"


def test_python_dash_m_sglwrap_prints_help() -> None:
    proc = subprocess.run([sys.executable, "-m", "sglwrap", "--help"], capture_output=True, text=True, timeout=60,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0 and "launch" in proc.stdout and "diagnose" in proc.stdout
