"""Model checks: architectures per release, quantization per release, parallel sizes vs the model, the context
length, speculative drafts, Python pins. The releases' own source files (``~/.cache/sglwrap/releases/src``) are
the independent reference for what each release registers."""

from __future__ import annotations

import json
import pwd
import os
import re
from pathlib import Path

import pytest

from sglwrap.host.catalogue import resolve_assume
from sglwrap.host.facts import HostFacts
from sglwrap.preflight import Status, run_preflight
from sglwrap.preflight import checks_model as cm
from sglwrap.preflight.deps import config_verdict, unmet_requirements
from sglwrap.preflight.model import Verdict
from sglwrap.record import replace
from sglwrap.sglang.flags import bundled_table

REAL_HOME = Path(pwd.getpwuid(os.getuid()).pw_dir)
SRC = REAL_HOME / ".cache" / "sglwrap" / "releases" / "src"
MODEL_CHECKS = (cm.check_model_arch, cm.check_model_quant, cm.check_model_parallel, cm.check_context_length,
                cm.check_speculative)


def facts(sglang: str = "0.5.23", spec: str = "8xH200") -> HostFacts:
    return replace(resolve_assume(spec), packages={"sglang": sglang})


def run(argv: list[str], *, sglang: str = "0.5.23", environ: dict[str, str] | None = None) -> dict[str, Verdict]:
    r = run_preflight(facts(sglang), None, argv, flags=bundled_table(sglang), environ=environ, checks=MODEL_CHECKS)
    return {v.id: v for v in r.checks}


def write_config(tmp: Path, name: str, **cfg: object) -> str:
    d = tmp / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d)


def llama_like(tmp: Path, name: str = "m", **over: object) -> str:
    base: dict[str, object] = dict(architectures=["LlamaForCausalLM"], model_type="llama", num_attention_heads=32,
                                   num_key_value_heads=8, hidden_size=4096, num_hidden_layers=32,
                                   intermediate_size=14336, vocab_size=128256, max_position_embeddings=8192)
    base.update(over)
    return write_config(tmp, name, **base)


# --- helpers that read the releases' own files (test-only; the reference the checks are compared to) ------


def source_entry_classes(version: str) -> set[str]:
    """EntryClass names of a release's srt/models/*.py, read here with a regex (not the code under test's ast)."""
    names: set[str] = set()
    for f in (SRC / version / "sglang" / "srt" / "models").glob("*.py"):
        text = f.read_text(encoding="utf-8", errors="replace")
        for m in re.finditer(r"^EntryClass\s*=\s*(\[[^\]]*\]|\w+)", text, re.M | re.S):
            names.update(re.findall(r"\w+", m.group(1)))
    return names


def have_sources(*versions: str) -> bool:
    return all((SRC / v / "sglang" / "srt" / "models").is_dir() for v in versions)


needs_sources = pytest.mark.skipif(not have_sources("0.4.6", "0.4.9", "0.5.1", "0.5.2", "0.5.23"),
                                   reason="release sources not unpacked in ~/.cache/sglwrap/releases/src")


# --- model-arch -------------------------------------------------------------------------------------------


@needs_sources
@pytest.mark.parametrize("version", ["0.4.6", "0.4.9", "0.5.2", "0.5.23"])
def test_entry_classes_match_the_release_files(version: str) -> None:
    got = cm.entry_classes(SRC / version / "sglang" / "srt" / "models")
    ref = source_entry_classes(version)
    assert "LlamaForCausalLM" in got
    assert got <= ref and len(ref - got) <= 3  # the regex may catch a name in a comment; the ast never invents one


@needs_sources
def test_model_file_arrives_in_the_release_the_block_names() -> None:
    versions = ["0.4.6", "0.4.9", "0.5.1", "0.5.2", "0.5.23"]  # a few releases: parsing all 31 takes minutes
    catalogue = {v: cm.entry_classes(SRC / v / "sglang" / "srt" / "models") for v in versions}
    first_file = next(v for v in versions if (SRC / v / "sglang" / "srt" / "models" / "qwen3_next.py").is_file())
    assert cm.first_release_with("Qwen3NextForCausalLM", catalogue) == first_file
    assert cm.first_release_with("NoSuchModelForCausalLM", catalogue) is None
    v = cm.arch_verdict(["Qwen3NextForCausalLM"], catalogue["0.4.6"], "0.4.6", "sources", catalogue)
    assert v.status is Status.BLOCK and f"first in {first_file}" in v.reason and f">= {first_file}" in v.fix
    assert "are not supported for now" in v.reason


@needs_sources
def test_transformers_fallback_is_a_warning_only_when_transformers_has_the_class() -> None:
    reg = cm.entry_classes(SRC / "0.4.9" / "sglang" / "srt" / "models")
    assert cm.TRANSFORMERS_FALLBACK in reg  # srt/models/transformers.py ships from 0.4.9
    assert cm.TRANSFORMERS_FALLBACK not in cm.entry_classes(SRC / "0.4.6" / "sglang" / "srt" / "models")
    args = (["Glm4ForCausalLM"], reg - {"Glm4ForCausalLM"}, "0.4.9", "sources", {})
    assert cm.arch_verdict(*args, transformers_has=True).status is Status.WARN
    assert cm.arch_verdict(*args, transformers_has=False).status is Status.BLOCK
    assert cm.arch_verdict(*args, transformers_has=None).status is Status.BLOCK
    assert cm.arch_verdict(*args, transformers_has=None, model_impl="transformers").status is Status.WARN


def test_installed_release_registers_the_catalogue_models() -> None:
    for model in ("Llama-3.1-8B", "Qwen3-Next-80B-A3B", "gpt-oss-120b", "DeepSeek-V3", "Kimi-K2.5"):
        v = run(["--model-path", model, "--tp-size", "8"])["model-arch"]
        assert v.status is Status.PASS, (model, v.reason)


def test_unknown_architecture_is_blocked_on_the_installed_release(tmp_path: Path) -> None:
    mp = llama_like(tmp_path, architectures=["MadeUpForCausalLM"], model_type="madeup")
    v = run(["--model-path", mp])["model-arch"]
    assert v.status is Status.BLOCK and "MadeUpForCausalLM" in v.reason and "no release" in v.reason


# --- model-quant ------------------------------------------------------------------------------------------


@needs_sources
def test_quantization_registry_is_a_superset_of_the_cli_choices() -> None:
    # compressed-tensors loads on 0.5.2 (config-detected) though --quantization does not offer it
    q = cm.quantization_registry(SRC / "0.5.2" / "sglang")
    assert "compressed-tensors" in q and "compressed-tensors" not in (bundled_table("0.5.2").by_dest(
        "quantization").choices or ())
    assert "mxfp4" in cm.quantization_registry(SRC / "0.5.23" / "sglang")  # added by a platform .update({...})
    assert "mxfp4" not in cm.quantization_registry(SRC / "0.4.6" / "sglang")


def test_unknown_checkpoint_quantization_is_blocked(tmp_path: Path) -> None:
    mp = llama_like(tmp_path, quantization_config={"quant_method": "made_up_q"})
    v = run(["--model-path", mp])["model-quant"]
    assert v.status is Status.BLOCK and "Unknown quantization method: made_up_q" in v.reason
    ok = llama_like(tmp_path, "fp8", quantization_config={"quant_method": "fp8"})
    assert run(["--model-path", ok])["model-quant"].status is Status.PASS


# --- model-parallel ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("argv", "blocked", "words"), [
    (["--tp-size", "6"], True, "32 attention heads"),
    (["--tp-size", "8"], False, ""),
    (["--tp-size", "16"], False, ""),  # 8 KV heads replicated: 16 % 8 == 0
    (["--tp-size", "8", "--dp-size", "3", "--enable-dp-attention"], True, "attention-DP size 3"),
    (["--tp-size", "8", "--pp-size", "40"], True, "exceeds the model's 32 layers"),
])
def test_parallel_sizes_against_llama_8b(argv: list[str], blocked: bool, words: str) -> None:
    v = run(["--model-path", "Llama-3.1-8B", *argv])["model-parallel"]
    assert (v.status is Status.BLOCK) is blocked, v.reason
    assert words in v.reason


def test_kv_heads_that_neither_divide_nor_are_divided(tmp_path: Path) -> None:
    mp = llama_like(tmp_path, num_attention_heads=48, num_key_value_heads=6, hidden_size=6144)
    v = run(["--model-path", mp, "--tp-size", "4"])["model-parallel"]
    assert v.status is Status.BLOCK and "6 KV heads" in v.reason and "total_num_kv_heads % tp_size" in v.reason
    v = run(["--model-path", mp, "--tp-size", "16"])["model-parallel"]  # 48 heads split, 6 KV heads cannot be
    assert v.status is Status.BLOCK and "tp_size % total_num_kv_heads" in v.reason
    assert run(["--model-path", mp, "--tp-size", "3"])["model-parallel"].status is Status.PASS
    assert run(["--model-path", mp, "--tp-size", "12"])["model-parallel"].status is Status.PASS


def test_attention_tp_under_dp_attention(tmp_path: Path) -> None:
    # 16 heads: tp 32 alone cannot split them, but with 4 attention-DP groups attention TP is 8
    mp = llama_like(tmp_path, num_attention_heads=16, num_key_value_heads=4, hidden_size=2048)
    assert run(["--model-path", mp, "--tp-size", "32"])["model-parallel"].status is Status.BLOCK
    v = run(["--model-path", mp, "--tp-size", "32", "--dp-size", "4", "--enable-dp-attention"])["model-parallel"]
    assert v.status is Status.PASS, v.reason


def test_experts_against_ep() -> None:
    v = run(["--model-path", "Qwen3-235B-A22B", "--tp-size", "8", "--ep-size", "6"])["model-parallel"]
    assert v.status is Status.BLOCK and "128 routed experts" in v.reason
    assert run(["--model-path", "Qwen3-235B-A22B", "--tp-size", "8", "--ep-size", "8"])[
        "model-parallel"].status is Status.PASS


def test_pp_partition_env_must_sum_to_the_layers() -> None:
    argv = ["--model-path", "Llama-3.1-8B", "--pp-size", "2"]
    bad = run(argv, environ={"SGLANG_PP_LAYER_PARTITION": "10,10"})["model-parallel"]
    assert bad.status is Status.BLOCK and "SGLANG_PP_LAYER_PARTITION" in bad.reason
    assert run(argv, environ={"SGLANG_PP_LAYER_PARTITION": "12,20"})["model-parallel"].status is Status.PASS


# --- context-length ---------------------------------------------------------------------------------------


def test_context_length_above_the_derived_one_blocks_unless_allowed() -> None:
    argv = ["--model-path", "Llama-3.1-8B", "--context-length", "1000000"]
    v = run(argv)["context-length"]
    assert v.status is Status.BLOCK
    # SGLang's words (srt/configs/model_config.py): the config's 131072 with llama3 rope scaling
    assert "User-specified context_length (1000000) is greater than the derived context_length (131072)" in v.reason
    assert "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1" in v.fix
    allowed = run(argv, environ={"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "1"})["context-length"]
    assert allowed.status is Status.WARN
    assert run(["--model-path", "Llama-3.1-8B", "--context-length", "131072"])["context-length"].status \
        is Status.PASS


def test_rope_factor_extends_the_derived_context(tmp_path: Path) -> None:
    mp = llama_like(tmp_path, max_position_embeddings=32768, rope_scaling={"type": "yarn", "factor": 4.0})
    assert run(["--model-path", mp, "--context-length", "131072"])["context-length"].status is Status.PASS
    assert run(["--model-path", mp, "--context-length", "131073"])["context-length"].status is Status.BLOCK


# --- speculative ------------------------------------------------------------------------------------------


def test_speculative_needs_a_draft_or_nextn_layers(tmp_path: Path) -> None:
    assert run(["--model-path", "Qwen3-8B", "--speculative-algorithm", "EAGLE3"])["speculative"].status \
        is Status.BLOCK
    assert run(["--model-path", "Qwen3-8B", "--speculative-algorithm", "EAGLE3",
                "--speculative-draft-model-path", "/d"])["speculative"].status is Status.PASS
    assert run(["--model-path", "DeepSeek-V3", "--tp-size", "8", "--speculative-algorithm", "EAGLE"])[
        "speculative"].status is Status.PASS
    ds = json.loads((Path(cm.__file__).parents[1] / "data" / "models" / "DeepSeek-V3" / "config.json").read_text())
    ds["num_nextn_predict_layers"] = 0
    mp = write_config(tmp_path, "ds-no-mtp", **ds)
    v = run(["--model-path", mp, "--tp-size", "8", "--speculative-algorithm", "NEXTN"])["speculative"]
    assert v.status is Status.BLOCK and "0 NEXTN layers" in v.reason


def test_nextn_on_a_checkpoint_the_release_drafts_from_itself() -> None:
    """Qwen3-Next's config has no NEXTN key; SGLang 0.5.23's ModelConfig turns its draft into Qwen3NextForCausalLMMTP."""
    v = run(["--model-path", "Qwen3-Next-80B-A3B", "--tp-size", "4", "--speculative-algorithm", "NEXTN"])["speculative"]
    assert v.status is Status.PASS and "model_config.py" in v.reason
    v = run(["--model-path", "Qwen3-Next-80B-A3B", "--tp-size", "4", "--speculative-algorithm", "EAGLE3"])["speculative"]
    assert v.status is Status.WARN


@needs_sources
def test_draft_archs_follow_the_releases_model_config() -> None:
    for version in ("0.4.6", "0.5.2", "0.5.23"):
        text = (SRC / version / "sglang" / "srt" / "configs" / "model_config.py").read_text()
        expected = bool(re.search(r'is_draft_model and self\.hf_config\.architectures\[0\] == "Qwen3NextForCausalLM"',
                                  text))
        got = "Qwen3NextForCausalLM" in cm.draft_archs_of(SRC / version / "sglang" / "srt" / "configs" /
                                                          "model_config.py")
        assert got is expected, version


def test_no_model_path_skips_model_checks() -> None:
    checks = run(["--tp-size", "8"])
    assert checks["model-parallel"].status is Status.SKIP and checks["model-arch"].status is Status.SKIP


# --- python deps ------------------------------------------------------------------------------------------


def test_unmet_requirements_resolver_style() -> None:
    installed = {"torch": "2.9.1", "transformers": "4.57.1", "numpy": "2.1.0"}
    reqs = ["torch==2.9.1", "transformers>=4.58,<5", "numpy", "missing-pkg>=1", "cuda-only>=1; sys_platform == 'x'",
            "optional>=1; extra == 'test'"]
    got = {p.name: p.installed for p in unmet_requirements(reqs, installed)}
    assert got == {"transformers": "4.57.1", "missing-pkg": None}


def test_config_needing_remote_code_or_newer_transformers() -> None:
    known = frozenset({"llama", "qwen3"})
    st, why, fix = config_verdict({"model_type": "deci", "auto_map": {"AutoConfig": "x.Y"}}, "4.57.1", known, False)
    assert st is Status.BLOCK and "--trust-remote-code" in fix
    assert config_verdict({"model_type": "deci", "auto_map": {"AutoConfig": "x.Y"}}, "4.57.1", known, True)[0] \
        is Status.PASS
    st, why, _ = config_verdict({"model_type": "glm4", "transformers_version": "4.51.3"}, "4.48.0", known, False)
    assert st is Status.BLOCK and "does not recognize this architecture" in why
    st, why, _ = config_verdict({"model_type": "qwen3", "transformers_version": "4.60.0"}, "4.57.1", known, False)
    assert st is Status.WARN and "4.60.0" in why


# --- block-FP8 shards -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("argv", "blocked"), [
    (["--tp-size", "8"], True),  # 1536 / 8 = 192: not a multiple of the 128 block
    (["--tp-size", "4"], False),  # 384
    (["--tp-size", "8", "--ep-size", "8"], False),  # experts whole on each rank
])
def test_block_fp8_experts_against_tp(argv: list[str], blocked: bool) -> None:
    cfg = json.loads((Path(cm.__file__).parents[1] / "data" / "models" / "Qwen3-235B-A22B-FP8" / "config.json")
                     .read_text())
    assert cfg["quantization_config"]["weight_block_size"] == [128, 128] and cfg["moe_intermediate_size"] == 1536
    v = run(["--model-path", "Qwen3-235B-A22B-FP8", *argv])["model-parallel"]
    assert (v.status is Status.BLOCK) is blocked, v.reason
    if blocked:
        assert "192" in v.reason and "block_n = 128" in v.reason and "--tp-size 4" in v.fix


def test_block_fp8_dense_and_unquantized(tmp_path: Path) -> None:
    fp8 = llama_like(tmp_path, "fp8", intermediate_size=14336 + 64,
                     quantization_config={"quant_method": "fp8", "weight_block_size": [128, 128]})
    assert run(["--model-path", fp8, "--tp-size", "2"])["model-parallel"].status is Status.BLOCK  # 7200 per GPU
    plain = llama_like(tmp_path, "bf16", intermediate_size=14336 + 64)
    assert run(["--model-path", plain, "--tp-size", "2"])["model-parallel"].status is Status.PASS
    assert run(["--model-path", "DeepSeek-V3", "--tp-size", "8"])["model-parallel"].status is Status.PASS


@needs_sources
@pytest.mark.parametrize("version", ["0.2.15", "0.3.6", "0.4.3", "0.4.6", "0.4.10", "0.5.2", "0.5.9"])
def test_context_override_default_follows_each_releases_source(version: str) -> None:
    """Read the release's own ModelConfig / environ: does a longer --context-length pass with the env var unset?"""
    pkg = SRC / version / "sglang" / "srt"
    cfg = pkg / "configs" / "model_config.py"
    text = (cfg if cfg.is_file() else pkg / "model_config.py").read_text()
    env = pkg / "environ.py"
    env_text = env.read_text() if env.is_file() else ""
    if "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN" not in text:
        expected = None
    elif re.search(r'"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN",\s*default="True"', text):
        expected = True
    else:
        assert "EnvBool(True)" not in env_text.split("SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN", 1)[-1][:40]
        expected = False
    assert cm.context_override_default(version) is expected


def test_context_length_on_a_release_that_allows_it_by_default() -> None:
    v = run(["--model-path", "Llama-3.1-8B", "--context-length", "1000000"], sglang="0.4.9")["context-length"]
    assert v.status is Status.WARN and "allows it by default" in v.reason
    v = run(["--model-path", "Llama-3.1-8B", "--context-length", "1000000"], sglang="0.4.9",
            environ={"SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN": "false"})["context-length"]
    assert v.status is Status.BLOCK


# --- python-deps on this environment (the installed SGLang 0.5.23 and its transformers) -------------------


def deps(argv: list[str]) -> Verdict:
    from sglwrap.preflight.deps import check_python_deps

    r = run_preflight(facts(), None, argv, flags=bundled_table("0.5.23"), checks=(check_python_deps,))
    return r.checks[0]


@pytest.mark.real_sglang
def test_python_deps_on_the_installed_environment(tmp_path: Path) -> None:
    from importlib import metadata

    v = deps(["--model-path", "Qwen3-Next-80B-A3B"])
    n = len(metadata.requires("sglang") or [])
    assert v.status is Status.PASS and f"{n} pins of SGLang 0.5.23 met" in v.reason
    unknown = llama_like(tmp_path, "u", model_type="made_up_type", architectures=["MadeUpForCausalLM"])
    v = deps(["--model-path", unknown])
    assert v.status is Status.BLOCK and "does not recognize this architecture" in v.reason
    remote = llama_like(tmp_path, "r", model_type="made_up_type", auto_map={"AutoConfig": "cfg.MadeUpConfig"})
    assert deps(["--model-path", remote]).status is Status.BLOCK
    assert deps(["--model-path", remote, "--trust-remote-code"]).status is Status.PASS
    newer = llama_like(tmp_path, "n", transformers_version="99.0.0")
    assert deps(["--model-path", newer]).status is Status.WARN


def test_python_deps_skip_an_assumed_release() -> None:
    from sglwrap.preflight.deps import check_python_deps

    r = run_preflight(facts("0.4.9"), None, ["--model-path", "Llama-3.1-8B"], flags=bundled_table("0.4.9"),
                      checks=(check_python_deps,))
    assert r.checks[0].status is Status.SKIP and "not the installed release" in r.checks[0].reason


def test_only_a_kernel_older_than_sglangs_pin_blocks() -> None:
    from sglwrap.preflight.deps import PinProblem, below_minimum

    assert below_minimum(PinProblem("sglang-kernel==0.4.9", "0.4.8"))
    assert not below_minimum(PinProblem("sglang-kernel==0.4.9", "0.4.10"))  # SGLang checks a minimum only
    assert below_minimum(PinProblem("flashinfer-python>=0.7.2", None))
    assert not below_minimum(PinProblem("flashinfer-python<0.7", "0.7.2"))


def test_a_draft_model_the_release_does_not_register(tmp_path: Path) -> None:
    draft = llama_like(tmp_path, "draft", architectures=["MadeUpForCausalLMEagle9"], num_hidden_layers=1)
    v = run(["--model-path", "Qwen3-8B", "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path",
             draft])["speculative"]
    assert v.status is Status.BLOCK and "draft model" in v.reason and "MadeUpForCausalLMEagle9" in v.reason
    ok = llama_like(tmp_path, "ok", architectures=["LlamaForCausalLMEagle3"], num_hidden_layers=1)
    assert "LlamaForCausalLMEagle3" in json.loads(
        (Path(cm.__file__).parents[1] / "data" / "sglang" / "sglang-0.5.23.json").read_text())["architectures"]
    v = run(["--model-path", "Qwen3-8B", "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path",
             ok])["speculative"]
    assert v.status is Status.PASS


def test_a_config_without_a_context_length_is_not_read_as_2048(tmp_path: Path) -> None:
    """gemma-3-4b-it's config.json has no max_position_embeddings in text_config (transformers fills 131072):
    --context-length 32768 must not be blocked against a guessed 2048 (a working L40S setup was)."""
    path = write_config(tmp_path, "gemma", architectures=["Gemma3ForConditionalGeneration"], model_type="gemma3",
                        text_config={"model_type": "gemma3_text", "hidden_size": 2560, "num_hidden_layers": 34,
                                     "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
                                     "intermediate_size": 10240, "vocab_size": 262208})
    v = run(["--model-path", path, "--context-length", "32768"])["context-length"]
    assert v.status is Status.WARN and "names no context length" in v.reason


def test_a_release_older_than_every_architecture_list_is_unknown_not_absent() -> None:
    """SGLang 0.2.7 predates the oldest bundled list (0.2.15, which registers LlamaForCausalLM): the check says it
    cannot know, and does not suggest an upgrade to 0.2.15 as if the class were missing."""
    v = run(["--model-path", "Llama-3.1-8B"], sglang="0.2.7")["model-arch"]
    assert v.status is Status.WARN and "is not known here" in v.reason and "upgrade" not in v.fix
