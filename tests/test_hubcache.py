"""The local Hugging Face cache is read as files, the way huggingface_hub resolves it, without importing it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sglwrap.hubcache import cached_file, hub_cache_dir
from sglwrap.memory.model import find_config

REPO = Path(__file__).resolve().parents[1]
COMMIT = "a09a35458c702b33eeacc393d103063234e8bc28"


def _cache(root: Path, repo_id: str, files: dict[str, str], *, ref: str | None = COMMIT) -> Path:
    """A Hub cache under ``root`` holding ``files`` of ``repo_id`` at COMMIT (``refs/main`` -> ``ref``)."""
    repo = root / ("models--" + repo_id.replace("/", "--"))
    snap = repo / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    for name, text in files.items():
        (snap / name).write_text(text, encoding="utf-8")
    if ref is not None:
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(ref, encoding="utf-8")
    return snap


@pytest.mark.parametrize(("env", "expect"), [
    ({"HF_HUB_CACHE": "/x/hub"}, "/x/hub"),
    ({"HUGGINGFACE_HUB_CACHE": "/legacy"}, "/legacy"),
    ({"HF_HUB_CACHE": "/new", "HUGGINGFACE_HUB_CACHE": "/legacy"}, "/new"),
    ({"HF_HOME": "/hfhome"}, "/hfhome/hub"),
    ({"XDG_CACHE_HOME": "/xdg"}, "/xdg/huggingface/hub"),
    ({}, "~/.cache/huggingface/hub"),
])
def test_hub_cache_dir_follows_the_variables_in_huggingface_hubs_order(env: dict[str, str], expect: str) -> None:
    assert hub_cache_dir(env) == Path(expect).expanduser()


def test_cached_file_agrees_with_huggingface_hub(tmp_path: Path) -> None:
    """The differential: the installed huggingface_hub's own lookup, on the same cache, finds the same files."""
    hub = tmp_path / "hub"
    _cache(hub, "org/present", {"config.json": "{}"})
    _cache(hub, "org/noref", {"config.json": "{}"}, ref=None)
    _cache(hub, "org/stale", {"config.json": "{}"}, ref="0" * 40)
    asks = [("org/present", "config.json"), ("org/present", "adapter_config.json"), ("org/noref", "config.json"),
            ("org/stale", "config.json"), ("org/absent", "config.json")]
    code = ("import json, sys\nfrom huggingface_hub import try_to_load_from_cache\n"
            "out = [try_to_load_from_cache(r, f) for r, f in json.loads(sys.argv[1])]\n"
            "print(json.dumps([o if isinstance(o, str) else None for o in out]))")
    env = {**os.environ, "HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", code, json.dumps(asks)], capture_output=True, text=True, env=env,
                          check=False)
    if proc.returncode != 0 and "No module named 'huggingface_hub'" in proc.stderr:
        pytest.fail("huggingface_hub (brought by SGLang) is missing from the test environment")
    theirs = json.loads(proc.stdout)
    ours = [cached_file(r, f, {"HF_HUB_CACHE": str(hub)}) for r, f in asks]
    assert [str(p) if p else None for p in ours] == theirs
    assert theirs[0] is not None and theirs[1] is None  # the comparison covers both outcomes


@pytest.mark.parametrize("name", ["noslash", "a/b/c", "/abs", "org/", "../etc/passwd", "org/.."])
def test_cached_file_refuses_names_that_are_not_a_repo_id(tmp_path: Path, name: str) -> None:
    assert cached_file(name, "config.json", {"HF_HUB_CACHE": str(tmp_path)}) is None


def test_find_config_reads_a_model_from_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    snap = _cache(tmp_path, "someorg/Tiny-Model", {"config.json": json.dumps({"model_type": "llama"})})
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    path, source = find_config("someorg/Tiny-Model")
    assert path == snap / "config.json" and source == f"hf-cache {snap}"


def test_preflight_neither_imports_huggingface_hub_nor_sets_offline_mode(tmp_path: Path) -> None:
    """Importing huggingface_hub costs ~150 ms (httpx, rich) per run; setting HF_HUB_OFFLINE in sglwrap's own
    process would leak into what it execs."""
    code = ("import os, sys\nfrom sglwrap.cli import main\n"
            "rc = main(['preflight', '--json', '--assume', '8xH200', '--', '--model-path', 'Qwen/Qwen2.5-7B-Instruct'])\n"
            "sys.stderr.write('HUB=%s OFFLINE=%s\\n' % ('huggingface_hub' in sys.modules, "
            "os.environ.get('HF_HUB_OFFLINE')))")
    env = {k: v for k, v in os.environ.items() if k != "HF_HUB_OFFLINE"}
    env.update(PYTHONPATH=str(REPO), HF_HUB_CACHE=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=False)
    assert "HUB=False OFFLINE=None" in proc.stderr, proc.stderr[-2000:]
