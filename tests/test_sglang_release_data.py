"""The per-release SGLang data in sglwrap/data/sglang (schema 2) and its generator, sglwrap/sglang/generate.py.

Facts below were checked by hand against the unpacked releases in ~/.cache/sglwrap/releases/src (grep/ls), not
copied from the generated files.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from sglwrap.sglang import generate

DATA = Path(__file__).resolve().parents[1] / "sglwrap" / "data" / "sglang"
# PyPI's sglang releases from 0.3.0 to 0.5.23 without release candidates (`pip download sglang==` lists them), and
# 0.2.15
RELEASES = ["0.2.15", *"""
0.3.0 0.3.1 0.3.1.post1 0.3.1.post2 0.3.1.post3 0.3.2 0.3.3 0.3.3.post1 0.3.4 0.3.4.post1 0.3.4.post2 0.3.5
0.3.5.post1 0.3.5.post2 0.3.6 0.3.6.post1 0.3.6.post2 0.3.6.post3 0.4.0 0.4.0.post1 0.4.0.post2 0.4.1 0.4.1.post1
0.4.1.post2 0.4.1.post3 0.4.1.post4 0.4.1.post5 0.4.1.post6 0.4.1.post7 0.4.2 0.4.2.post1 0.4.2.post2 0.4.2.post3
0.4.2.post4 0.4.3 0.4.3.post1 0.4.3.post2 0.4.3.post3 0.4.3.post4 0.4.4 0.4.4.post1 0.4.4.post2 0.4.4.post3
0.4.4.post4 0.4.5 0.4.5.post1 0.4.5.post2 0.4.5.post3 0.4.6 0.4.6.post1 0.4.6.post2 0.4.6.post3 0.4.6.post4
0.4.6.post5 0.4.7 0.4.7.post1 0.4.8 0.4.8.post1 0.4.9 0.4.9.post1 0.4.9.post2 0.4.9.post3 0.4.9.post4 0.4.9.post5
0.4.9.post6 0.4.10 0.4.10.post1 0.4.10.post2 0.5.1 0.5.1.post1 0.5.1.post2 0.5.1.post3 0.5.2 0.5.3 0.5.3.post1
0.5.3.post2 0.5.3.post3 0.5.4 0.5.4.post1 0.5.4.post2 0.5.4.post3 0.5.5 0.5.5.post1 0.5.5.post2 0.5.5.post3 0.5.6
0.5.6.post1 0.5.6.post2 0.5.7 0.5.8 0.5.8.post1 0.5.9 0.5.10 0.5.10.post1 0.5.11 0.5.12 0.5.12.post1 0.5.13
0.5.13.post1 0.5.14 0.5.15 0.5.15.post1 0.5.16 0.5.17 0.5.18 0.5.19 0.5.20 0.5.21 0.5.22 0.5.23""".split()]
FLAG_KEYS = {"options", "dest", "nargs", "action", "type", "choices", "default", "required", "const", "new_flag"}
TYPES = {"int", "float", "str", "json", "bool"}


def load(version: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((DATA / f"sglang-{version}.json").read_text())
    return doc


def flag(doc: dict[str, Any], option: str) -> dict[str, Any]:
    for f in doc["flags"]:
        if option in f["options"]:
            return f
    raise AssertionError(f"SGLang {doc['version']} has no {option}")


def readers() -> list[Any]:
    """The table readers sglwrap ships (the module moved from sglang_args to sglang.flags)."""
    found = []
    for name in ("sglwrap.sglang_args", "sglwrap.sglang.flags"):
        try:
            found.append(importlib.import_module(name).table_from_json)
        except ModuleNotFoundError:
            continue
    assert found, "no table_from_json reader in sglwrap"
    return found


# --- (1) every bundled file ------------------------------------------------------------------------------------


def test_one_file_per_release_and_nothing_else() -> None:
    names = sorted(p.name for p in DATA.glob("sglang-*"))
    assert names == sorted(f"sglang-{v}.json" for v in RELEASES)


@pytest.mark.parametrize("version", RELEASES)
def test_bundled_file_is_schema_2_and_loads(version: str) -> None:
    doc = load(version)
    assert doc["version"] == version and doc["schema"] == 2
    src = doc["source"]
    assert src["wheel"].startswith(f"sglang-{version}-") and src["wheel"].endswith(".whl")
    assert len(src["sha256"]) == 64 and int(src["sha256"], 16) >= 0
    assert src["method"] and src["generated"]
    assert isinstance(src["stubbed_modules"], list) and isinstance(src["skipped_statements"], list)
    for key in ("env", "architectures", "model_files", "server_args_defaults", "quantization_methods",
                "kv_cache_dtypes", "attention_backends"):
        assert key in doc, key
    assert isinstance(doc["env"], dict)
    if not doc["env"]:
        assert doc["env_note"]
    assert doc["architectures"] == sorted(set(doc["architectures"])) and len(doc["architectures"]) > 20
    dests = set()
    for f in doc["flags"]:
        assert set(f) == FLAG_KEYS, f
        assert f["options"] and all(o.startswith("-") for o in f["options"])
        assert f["nargs"] in (0, 1, "?", "*", "+") or isinstance(f["nargs"], int), f
        if f["nargs"] == 0:
            assert f["type"] is None, f
        else:
            assert f["type"] in TYPES or f["type"].startswith("other:"), f
        assert f["choices"] is None or (isinstance(f["choices"], list) and f["choices"]), f
        assert isinstance(f["required"], bool)
        dests.add(f["dest"])
    assert {"port", "model_path", "mem_fraction_static"} <= dests
    for read in readers():
        table = read(doc, f"bundled:sglang-{version}.json")
        assert table.version == version
        assert table.flags["--tp-size"] is table.flags["--tensor-parallel-size"]
        assert table.flags["--model-path"].nargs == 1


def test_bundled_data_is_reproducible_text() -> None:
    """No memory addresses or this machine's paths in the files (a regeneration must diff clean)."""
    for p in DATA.glob("sglang-*.json"):
        text = p.read_text()
        assert " at 0x" not in text and "/root/" not in text and "/home/" not in text, p.name


def test_bundled_data_small_enough() -> None:
    # every release from 0.3.0 to 0.5.23 (111 files, about 7 MB; a wheel deflates JSON to about a tenth)
    total = sum(p.stat().st_size for p in DATA.glob("sglang-*.json"))
    assert total < 9 * 1024 * 1024, total


def test_cross_checks_recorded_clean() -> None:
    """The single-file releases agree with the static read of add_cli_args; no stub reached any flag."""
    for version in RELEASES:
        check = load(version)["source"]["static_cross_check"]
        if "agree" in check:
            assert check["only_introspected"] == [] and check["only_static"] == [], version
            assert check["agree"] > 40, version


# --- (2) the committed 0.5.23 file against the installed SGLang -------------------------------------------------


@pytest.mark.real_sglang
def test_0_5_23_matches_live_introspection_of_installed_sglang() -> None:
    try:
        installed = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        pytest.fail("SGLang is not installed in the test venv (requirements/test.txt pins sglang==0.5.23)")
    assert installed == "0.5.23", installed
    committed = load("0.5.23")
    live = generate.introspect(sys.executable, None, committed["prog"], permissive=False)
    assert live["failures"] == [] and live["stub_leaks"] == []
    assert "site-packages" in live["sglang_file"]
    keys = ("options", "dest", "nargs", "type", "choices", "default")
    want = [{k: f[k] for k in keys} for f in committed["flags"]]
    got = [{k: f[k] for k in keys} for f in live["flags"]]
    assert len(got) == len(want) > 400
    assert got == want
    assert live["flags"] == committed["flags"]  # action, required, const, new_flag too
    assert live["env"] == committed["env"]


# --- (3) facts that come from reading each release's sources --------------------------------------------------


@pytest.mark.parametrize(("version", "present"), [("0.4.9", False), ("0.4.10", False), ("0.5.6", True),
                                                  ("0.5.23", True)])
def test_gpt_oss_and_qwen3_next_appear_between_0_4_and_0_5_6(version: str, present: bool) -> None:
    archs = set(load(version)["architectures"])
    assert ("GptOssForCausalLM" in archs) is present
    assert ("Qwen3NextForCausalLM" in archs) is present
    assert "LlamaForCausalLM" in archs


def test_gpt_oss_first_registered_in_0_5_1_qwen3_next_in_0_5_2() -> None:
    assert "GptOssForCausalLM" in load("0.5.1")["architectures"]
    assert "Qwen3NextForCausalLM" not in load("0.5.1")["architectures"]
    assert "Qwen3NextForCausalLM" in load("0.5.2")["architectures"]


@pytest.mark.parametrize(("version", "top_level", "all_py"), [("0.4.6", 62, 62), ("0.4.9", 79, 79),
                                                              ("0.5.6", 130, 130), ("0.5.10", 169, 179)])
def test_model_file_counts(version: str, top_level: int, all_py: int) -> None:
    """``model_files``: modules directly under srt/models (what the registry imports); 0.5.10 also has
    subpackages (deepseek_common), 179 .py files in all."""
    doc = load(version)
    assert doc["model_files"] == top_level
    assert doc["model_py_files_total"] == all_py


@pytest.mark.parametrize("version", RELEASES)
def test_flag_types_every_release(version: str) -> None:
    doc = load(version)
    assert flag(doc, "--tp-size")["type"] == "int"
    assert flag(doc, "--port")["type"] == "int"
    assert flag(doc, "--mem-fraction-static")["type"] == "float"
    assert flag(doc, "--model-path")["type"] == "str"
    assert flag(doc, "--trust-remote-code")["nargs"] == 0


@pytest.mark.parametrize(("version", "options", "dest"), [
    ("0.2.15", ["--tensor-parallel-size", "--tp-size"], "tensor_parallel_size"),
    ("0.5.13", ["--tensor-parallel-size", "--tp-size"], "tensor_parallel_size"),
    ("0.5.14", ["--tp-size", "--tensor-parallel-size"], "tp_size"),  # the A[...] field with an alias
    ("0.5.23", ["--tp-size", "--tensor-parallel-size"], "tp_size"),
])
def test_tp_size_dest_changed_when_flags_came_from_fields(version: str, options: list[str], dest: str) -> None:
    f = flag(load(version), "--tp-size")
    assert f["options"] == options and f["dest"] == dest


def test_facts_of_particular_releases() -> None:
    old = load("0.2.15")
    assert old["prog"] is None and flag(old, "--port")["default"] == 30000
    assert flag(old, "--model-path")["required"] is True
    assert old["env"] == {} and "fp8" in old["quantization_methods"]
    assert old["server_args_defaults"]["chunked_prefill_size"] == 8192
    assert load("0.5.9")["prog"] is None and load("0.5.10")["prog"] == "sglang serve"
    new = load("0.5.23")
    assert "SGLANG_KV_CANARY_ENABLE_TOKEN_ORACLE" in new["env"]
    assert flag(new, "--kv-cache-dtype")["choices"] == new["kv_cache_dtypes"] and "fp8_e4m3" in new["kv_cache_dtypes"]
    assert flag(new, "--disable-cuda-graph")["new_flag"] == "--cuda-graph-backend-{decode,prefill}=disabled"
    assert "tp_size" in new["server_args_defaults"]


# --- the generator on a made-up release -------------------------------------------------------------------------


FAKE_SERVER_ARGS = "sglang/srt/server_args.py"
FAKE = {
    "sglang/__init__.py": "",
    "sglang/srt/__init__.py": "",
    "sglang/srt/broken.py": "LIST = ['a']\nraise RuntimeError('needs an older triton')\n",
    "sglang/srt/server_args.py": """
        from __future__ import annotations
        import argparse
        import dataclasses
        import not_a_module_sglwrap_test
        from sglang.srt.broken import LIST, MISSING_NAME

        @dataclasses.dataclass
        class ServerArgs:
            model_path: str
            port: int = 30000
            mode: str = "a"
            ratio: float = 0.5
            lst: list = dataclasses.field(default_factory=list)

            @staticmethod
            def add_cli_args(parser: argparse.ArgumentParser):
                parser.add_argument("--model-path", type=str, required=True)
                parser.add_argument("--port", type=int, default=ServerArgs.port)
                parser.add_argument("--mode", choices=["a", "b"], default=ServerArgs.mode)
                parser.add_argument("--ratio", type=float, default=ServerArgs.ratio)
                parser.add_argument("--on", action="store_true", dest="switch")
                parser.add_argument("--opt", nargs="?", const="c", type=str)
                parser.add_argument("--q", choices=LIST)
                parser.add_argument("--r", choices=MISSING_NAME)

        def prepare_server_args(argv):
            parser = argparse.ArgumentParser(prog="fake serve")
            ServerArgs.add_cli_args(parser)
            return parser.parse_args(argv)
        """,
    "sglang/srt/models/a.py": "class A:\n    pass\nclass B:\n    pass\nEntryClass = [A, B]\n",
    "sglang/srt/models/c.py": "from sglang.srt.models.a import A as Alias\nEntryClass = Alias\n",
    "sglang/srt/models/helper.py": "X = 1\n",
    "sglang/srt/models/sub/__init__.py": "EntryClass = None\n",
}


@pytest.fixture
def fake_release(tmp_path: Path) -> Path:
    for name, text in FAKE.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return tmp_path


def test_generator_reads_a_release_that_cannot_be_imported(fake_release: Path) -> None:
    pkg = fake_release / "sglang"
    assert generate.read_prog(pkg) == "fake serve"
    live = generate.introspect(sys.executable, fake_release, "fake serve", permissive=True, timeout=120)
    assert live["sglang_file"].startswith(str(fake_release.resolve()))
    by = {tuple(f["options"]): f for f in live["flags"]}
    assert by[("--port",)]["type"] == "int" and by[("--port",)]["default"] == 30000
    assert by[("--mode",)]["choices"] == ["a", "b"] and by[("--mode",)]["type"] == "str"
    assert by[("--on",)]["nargs"] == 0 and by[("--on",)]["type"] is None and by[("--on",)]["dest"] == "switch"
    assert by[("--opt",)]["nargs"] == "?" and by[("--opt",)]["const"] == "c"
    assert by[("--model-path",)]["required"] is True
    failed = {(f["module"], f["error"].split(":")[0]) for f in live["failures"]}
    assert ("sglang.srt.server_args", "ModuleNotFoundError") in failed
    assert ("sglang.srt.broken", "RuntimeError") in failed
    # LIST was bound before broken.py raised; MISSING_NAME never was, and its stub must not pass as data
    assert by[("--q",)]["choices"] == ["a"]
    assert [leak.split(".")[0] for leak in live["stub_leaks"]] == ["--r"]
    check = generate.cross_check(live["flags"], generate.static_cli_flags(pkg))
    assert check["agree"] == 8 and check["only_static"] == [] and check["only_introspected"] == []


def test_generator_static_reads(fake_release: Path) -> None:
    pkg = fake_release / "sglang"
    arch = generate.read_architectures(pkg)
    assert arch["architectures"] == ["A", "B"]
    assert arch["model_files"] == 3 and arch["model_files_with_entry"] == 2 and arch["model_py_files_total"] == 4
    d = generate.read_server_args_defaults(pkg)
    assert d["server_args_defaults"] == {"mode": "a", "port": 30000, "ratio": 0.5}
    assert d["server_args_default_exprs"] == {"lst": "dataclasses.field(default_factory=list)"}
    assert d["server_args_required"] == ["model_path"]


def test_generator_unpacks_a_wheel_it_finds(fake_release: Path, tmp_path: Path) -> None:
    import zipfile

    rel = tmp_path / "releases"
    (rel / "wheels").mkdir(parents=True)
    wheel = rel / "wheels" / "sglang-9.9.9-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for name in FAKE:
            zf.write(fake_release / name, name)
        zf.writestr("sglang-9.9.9.dist-info/METADATA", "Name: sglang\n")
    assert generate.available_versions(rel) == ["9.9.9"]
    assert generate.ensure_wheel("9.9.9", rel / "wheels") == wheel  # found: no download
    root = generate.ensure_source("9.9.9", wheel, rel / "src")
    assert root == rel / "src" / "9.9.9"
    assert (root / "sglang" / "srt" / "server_args.py").read_text() == (fake_release / FAKE_SERVER_ARGS).read_text()
    assert not (root / "sglang-9.9.9.dist-info").exists()
