"""Facts once, checks pure: ``run_preflight`` gathers the launch's facts (model config, installed release, knowledge
base, memory plan, sglwrap's environment) before the checks run; a check itself opens no file, stats no path, reads
no environment variable, starts no process and asks no module-global reader. Checks that still read something
themselves are listed in IMPURE with the reason; the list may only shrink."""

from __future__ import annotations

import builtins
import io
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from sglwrap.host.catalogue import resolve_assume
from sglwrap.preflight import runner
from sglwrap.preflight.model import Context, Verdict
from sglwrap.profiles import load_profile
from sglwrap.record import replace
from sglwrap.sglang.flags import bundled_table

from .conftest import REPO

MODEL = REPO / "sglwrap" / "data" / "models" / "Llama-3.1-8B"

# check function -> why it still reads something itself (docs/preflight.md, "Facts once, checks pure")
IMPURE: dict[str, str] = {
    "check_sglang_selfcheck": "keeps its verdict under $XDG_CACHE_HOME/sglwrap/selfcheck (release file stamps, "
                              "read and write) and starts a child of the target interpreter",
}


class Touched(BaseException):
    """Raised where a pure check read something itself (a BaseException, so no check's ``except`` hides it)."""


# module-global readers a check must not call: the facts they give are on the Context
READERS = [("sglwrap.memory.facts", "read_model_facts"), ("sglwrap.memory.model", "config_text"),
           ("sglwrap.memory.model", "load_shape"), ("sglwrap.memory", "plan"),
           ("sglwrap.preflight.checks_compat", "entries"), ("sglwrap.preflight.checks_compat", "left_out"),
           ("sglwrap.compat.kb", "load"), ("sglwrap.sglang.release", "installed_version_text"),
           ("sglwrap.preflight.checks_model", "missing_local_model"),
           ("sglwrap.preflight.checks_model", "bundled_release"),
           ("sglwrap.preflight.checks_model", "bundled_release_data"),
           ("sglwrap.preflight.checks_model", "installed_package_dir"),
           ("sglwrap.preflight.checks_model", "entry_classes"),
           ("sglwrap.preflight.checks_model", "quantization_registry"),
           ("sglwrap.preflight.checks_model", "release_draft_archs"),
           ("sglwrap.preflight.checks_model", "release_architectures"),
           ("sglwrap.preflight.checks_model", "architectures_catalogue"),
           ("sglwrap.preflight.checks_model", "draft_archs_of"),
           ("sglwrap.preflight.installed", "environment"), ("sglwrap.preflight.installed", "installed_dirs"),
           ("sglwrap.preflight.installed", "transformers_classes"),
           ("sglwrap.preflight.installed", "transformers_model_types"),
           ("sglwrap.preflight.installed", "sglang_model_types"),
           ("sglwrap.preflight.checks_hostenv", "port_in_use"), ("sglwrap.preflight.checks_hostenv", "mem_available"),
           ("sglwrap.preflight.deps", "_unmet"), ("sglwrap.preflight.deps", "environment"),
           ("sglwrap.preflight.deps", "transformers_model_types"), ("sglwrap.preflight.deps", "sglang_model_types"),
           ("sglwrap.fsutil", "cache_dir"), ("sglwrap.diskcache", "load"), ("sglwrap.diskcache", "store"),
           ("sglwrap.diskcache", "from_files")]


@contextmanager
def no_io(monkeypatch: pytest.MonkeyPatch, seen: list[str]) -> Iterator[None]:
    """Every file, environment, process and module-global read raises Touched (and is recorded in ``seen``)."""
    import importlib

    def refuse(what: str) -> Callable[..., Any]:
        def raise_(*args: Any, **kwargs: Any) -> Any:
            seen.append(f"{what}{args[:1]!r}")
            raise Touched(what)
        return raise_

    with monkeypatch.context() as m:
        for name in ("stat", "lstat", "statvfs", "listdir", "scandir", "access"):
            m.setattr(os, name, refuse(f"os.{name}"))
        m.setattr(builtins, "open", refuse("open"))
        m.setattr(io, "open", refuse("io.open"))
        m.setattr(subprocess, "run", refuse("subprocess.run"))
        m.setattr(subprocess, "Popen", refuse("subprocess.Popen"))
        m.setattr(type(os.environ), "__getitem__", refuse("os.environ"))
        for mod, attr in READERS:
            m.setattr(importlib.import_module(mod), attr, refuse(f"{mod}.{attr}"))
        yield


def _run(monkeypatch: pytest.MonkeyPatch, argv: list[str], hw: str = "8xH200",
         live: bool = False, release: str | None = None) -> dict[str, list[str]]:
    """run_preflight with every check not in IMPURE run under no_io; what each check touched, by check."""
    touched: dict[str, list[str]] = {}

    def guarded(check: Callable[[Context], Verdict]) -> Callable[[Context], Verdict]:
        if check.__name__ in IMPURE:
            return check

        def run(ctx: Context) -> Verdict:
            seen: list[str] = []
            try:
                with no_io(monkeypatch, seen):
                    return check(ctx)
            except Touched:
                touched[check.__name__] = seen
                return check(ctx)
            finally:
                if seen:
                    touched[check.__name__] = seen
        return run

    # the checks run for real once (their verdicts are the same as with the guards off), then guarded
    facts = resolve_assume(hw)
    if release is not None:  # plan for another release than the installed one: the bundled data answers
        import sys

        from sglwrap.host.probe import gather_facts

        facts = gather_facts(hw, f"sglang={release}", python=sys.executable, environ={})
    if live:  # the facts say "this machine": the host checks read it (through the facts stage)
        facts = replace(facts, source="nvml")
    plain = runner.run_preflight(facts, load_profile("baseline", {}), argv,
                                 flags=bundled_table(release or "0.5.23"), environ={"NCCL_DEBUG": "WARN"})
    guarded_run = runner.run_preflight(facts, load_profile("baseline", {}), argv,
                                       flags=bundled_table(release or "0.5.23"), environ={"NCCL_DEBUG": "WARN"},
                                       checks=[guarded(c) for c in runner.CHECKS])
    assert [v.to_dict() for v in guarded_run.checks] == [v.to_dict() for v in plain.checks]
    return touched


def _fresh_model(tmp_path: Path, name: str = "Llama-3.1-8B", **config: Any) -> str:
    """A model directory no cache has seen (a warm per-process cache would hide a check's own read), its
    config.json changed by ``config``."""
    import json

    model = tmp_path / "m"
    shutil.copytree(MODEL.parent / name, model)
    if config:
        cfg = json.loads((model / "config.json").read_text())
        (model / "config.json").write_text(json.dumps({**cfg, **config}))
    return str(model)


@pytest.mark.parametrize("extra", [
    pytest.param(["--tp-size", "2"], id="tp2"),
    pytest.param(["--tp-size", "8", "--enable-dp-attention", "--dp-size", "8", "--kv-cache-dtype", "fp8_e4m3"],
                 id="dp-attention-fp8"),
    pytest.param(["--tp-size", "2", "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path",
                  "DRAFT"], id="eagle3-draft"),
    pytest.param(["--tp-size", "2", "--context-length", "1000000", "--mem-fraction-static", "0.99"],
                 id="too-long"),
])
def test_checks_read_only_the_context(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, extra: list[str]) -> None:
    model = _fresh_model(tmp_path)
    argv = ["--model-path", model, *[_fresh_model(tmp_path / "d") if a == "DRAFT" else a for a in extra]]
    assert _run(monkeypatch, argv) == {}


@pytest.mark.parametrize(("name", "config", "extra"), [
    pytest.param("Llama-3.1-8B", {"architectures": ["NoSuchForCausalLM"]}, ["--tp-size", "2"], id="unknown-arch"),
    pytest.param("Llama-3.1-8B", {"model_type": "no_such_type"}, ["--tp-size", "2"], id="unknown-model-type"),
    pytest.param("Qwen3-30B-A3B-FP8", {}, ["--tp-size", "4", "--ep-size", "4"], id="fp8-moe"),
    pytest.param("DeepSeek-V3", {}, ["--tp-size", "8", "--speculative-algorithm", "NEXTN"], id="mtp-from-checkpoint"),
    pytest.param("Llama-3.1-8B", {}, ["--tp-size", "2", "--speculative-algorithm", "EAGLE"], id="eagle-no-draft"),
    pytest.param("Llama-3.1-8B", {}, ["--tp-size", "2", "--quantization", "awq"], id="quant-flag"),
])
@pytest.mark.parametrize("release", [None, "0.5.20", "0.4.10"], ids=["installed", "0.5.20", "0.4.10"])
def test_model_checks_read_only_the_context(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str,
                                            config: dict[str, Any], extra: list[str], release: str | None) -> None:
    argv = ["--model-path", _fresh_model(tmp_path, name, **config), *extra]
    assert _run(monkeypatch, argv, release=release) == {}


@pytest.mark.parametrize("extra", [
    pytest.param([], id="defaults"),
    pytest.param(["--enable-hierarchical-cache", "--hicache-size", "8", "--nnodes", "2", "--node-rank", "0",
                  "--dist-init-addr", "10.0.0.1:5000", "--nccl-port", "29513"], id="hicache-multinode"),
])
def test_host_checks_on_this_machine_read_only_the_context(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                           extra: list[str]) -> None:
    touched = _run(monkeypatch, ["--model-path", _fresh_model(tmp_path), "--tp-size", "2", *extra], hw="2xH200",
                   live=True)
    assert touched == {}


@pytest.mark.parametrize("argv", [
    pytest.param([], id="no-model"),
    pytest.param(["--model-path", "/nonexistent/model"], id="missing-local-model"),
    pytest.param(["--model-path", "no-such-org/no-such-model"], id="hub-id-not-cached"),
])
def test_checks_without_a_model_config_read_only_the_context(monkeypatch: pytest.MonkeyPatch,
                                                             argv: list[str]) -> None:
    assert _run(monkeypatch, argv) == {}


def test_a_check_that_reads_a_file_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The guard itself: a check that opens a file, reads the environment or calls a global reader is reported."""
    def reads_file(ctx: Context) -> Verdict:
        Path(str(MODEL / "config.json")).read_text()
        raise AssertionError("not reached")

    def reads_env(ctx: Context) -> Verdict:
        return Verdict("x", runner.Status.PASS, os.environ.get("HOME", ""))

    def reads_model(ctx: Context) -> Verdict:
        from sglwrap.memory.facts import read_model_facts

        read_model_facts(str(MODEL))
        raise AssertionError("not reached")

    for check in (reads_file, reads_env, reads_model):
        seen: list[str] = []
        with pytest.raises(Touched), no_io(monkeypatch, seen):
            check(None)  # type: ignore[arg-type]
        assert seen, check.__name__


def test_the_impure_list_names_real_checks() -> None:
    names = {c.__name__ for c in runner.CHECKS}
    assert set(IMPURE) <= names, set(IMPURE) - names
