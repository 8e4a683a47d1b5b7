"""The rehearsal's fingerprint and verdict cache: what changes the outcome invalidates, what does not keeps it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sglwrap.host.facts import facts_from_dict
from sglwrap.record import replace
from sglwrap.rehearse import cache
from sglwrap.rehearse.fingerprint import Fingerprint, fingerprint

from .conftest import REPO

FACTS = facts_from_dict(json.loads((REPO / "tests" / "fixtures" / "hostfacts" / "h200x2-capture.json").read_text()))
ARGV = ["/venv/bin/python", "-m", "sglang.launch_server", "--model-path", "M", "--tp-size", "2"]


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A site-packages with the distributions a rehearsal depends on."""
    d = tmp_path / "site-packages"
    for dist, top in (("sglang-0.5.23", "sglang"), ("torch-2.14.1", "torch"),
                      ("flashinfer_python-0.7.2", "flashinfer"), ("nvidia_nccl_cu13-2.28.9", None)):
        meta = d / f"{dist}.dist-info"
        meta.mkdir(parents=True)
        (meta / "RECORD").write_text(f"{dist} files\n")
        if top:
            (d / top).mkdir()
    return d


@pytest.fixture
def model(tmp_path: Path) -> Path:
    m = tmp_path / "model"
    m.mkdir()
    (m / "config.json").write_text((REPO / "tests" / "fixtures" / "models" / "qwen3-0.6b.json").read_text())
    (m / "model.safetensors").write_bytes(b"weights")
    return m


def _fp(site: Path, model: Path, *, argv: list[str] = ARGV, profile: str = "p1", env: dict[str, str] | None = None,
        facts: Any = FACTS, layers: int | None = None) -> Fingerprint:
    return fingerprint(argv, profile_hash=profile, environ=env if env is not None else {"NCCL_BUFFSIZE": "131072"},
                       facts=facts, model_path=str(model), site_dirs=[str(site)], layers=layers)


def test_unchanged_inputs_give_the_same_fingerprint(site: Path, model: Path) -> None:
    assert _fp(site, model).digest == _fp(site, model).digest


@pytest.mark.parametrize(("change", "named"), [
    ({"env": {"NCCL_BUFFSIZE": "262144"}}, "env NCCL_BUFFSIZE"),
    ({"env": {"NCCL_BUFFSIZE": "131072", "SGLANG_ENABLE_JIT_DEEPGEMM": "0"}}, "env SGLANG_ENABLE_JIT_DEEPGEMM"),
    ({"env": {"NCCL_BUFFSIZE": "131072", "LD_LIBRARY_PATH": "/opt/cuda/lib"}}, "env LD_LIBRARY_PATH"),
    ({"profile": "p2"}, "profile"),
    ({"argv": [*ARGV, "--mem-fraction-static", "0.8"]}, "argv"),
    ({"layers": 2}, "argv"),
])
def test_a_change_that_can_change_the_outcome_invalidates_and_is_named(site: Path, model: Path,
                                                                      change: dict[str, Any], named: str) -> None:
    before = _fp(site, model)
    after = _fp(site, model, **change)
    assert after.digest != before.digest
    assert named in after.changed_since(before.parts)


def test_sglwraps_own_variables_and_unrelated_ones_do_not_invalidate(site: Path, model: Path) -> None:
    base = _fp(site, model)
    other = _fp(site, model, env={"NCCL_BUFFSIZE": "131072", "SGLWRAP_QUIET": "1", "TERM": "xterm", "COLUMNS": "80"})
    assert other.digest == base.digest


def test_no_value_is_stored_only_digests(site: Path, model: Path) -> None:
    fp = _fp(site, model, env={"HF_TOKEN": "hf_secret_value_123"}, argv=[*ARGV, "--api-key", "sk-secret-456"])
    text = json.dumps(fp.parts)
    assert "hf_secret_value_123" not in text and "sk-secret-456" not in text
    assert "HF_TOKEN" in fp.parts["env"]


def test_an_upgraded_package_invalidates(site: Path, model: Path) -> None:
    before = _fp(site, model)
    (site / "sglang-0.5.23.dist-info").rename(site / "sglang-0.5.24.dist-info")
    after = _fp(site, model)
    assert after.digest != before.digest and after.changed_since(before.parts) == ["packages sglang"]


def test_a_reinstall_of_the_same_version_invalidates(site: Path, model: Path) -> None:
    before = _fp(site, model)
    record = site / "torch-2.14.1.dist-info" / "RECORD"
    record.unlink()
    record.write_text("torch-2.14.1 files, rebuilt\n")  # pip rewrites RECORD: new inode, size, time
    assert _fp(site, model).changed_since(before.parts) == ["packages torch"]


def test_an_installed_kernel_package_appearing_invalidates(site: Path, model: Path) -> None:
    before = _fp(site, model)
    (site / "sglang_kernel-0.4.1.dist-info").mkdir()
    (site / "sglang_kernel-0.4.1.dist-info" / "RECORD").write_text("x\n")
    assert _fp(site, model).changed_since(before.parts) == ["packages sglang-kernel"]


def test_the_models_config_json_invalidates_but_its_weights_do_not(site: Path, model: Path) -> None:
    before = _fp(site, model)
    (model / "model.safetensors").write_bytes(b"other weights, never read by a rehearsal")
    assert _fp(site, model).digest == before.digest
    cfg = json.loads((model / "config.json").read_text())
    cfg["num_hidden_layers"] = 27
    (model / "config.json").write_text(json.dumps(cfg))
    assert _fp(site, model).changed_since(before.parts) == ["model"]


def test_driver_and_gpus_invalidate(site: Path, model: Path) -> None:
    before = _fp(site, model)
    assert _fp(site, model, facts=replace(FACTS, driver_version="590.1.1")).changed_since(
        before.parts) == ["host"]
    assert _fp(site, model, facts=replace(FACTS, gpus=FACTS.gpus[:1])).changed_since(
        before.parts) == ["host"]


def test_the_cache_hits_only_its_own_fingerprint(site: Path, model: Path, tmp_path: Path) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    fp = _fp(site, model)
    assert cache.lookup(fp, env) is None
    path = cache.store(fp, {"verdict": "passed", "exit_code": 0}, env)
    assert path is not None and oct(path.stat().st_mode & 0o777) == "0o600"
    hit = cache.lookup(fp, env)
    assert hit is not None and hit["verdict"] == "passed"
    other = _fp(site, model, profile="p2")
    assert cache.lookup(other, env) is None
    last = cache.last_for(other, env)  # same argv: the last verdict, to say what changed
    assert last is not None and other.changed_since(last["parts"]) == ["profile"]


def test_a_corrupt_cache_file_is_a_miss(site: Path, model: Path, tmp_path: Path) -> None:
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    fp = _fp(site, model)
    cache.store(fp, {"verdict": "passed"}, env)
    (cache.cache_dir(env) / f"{fp.digest}.json").write_text("{not json")
    assert cache.lookup(fp, env) is None
