"""The built-in model catalogue: the spellings people type find the right file, and nothing else does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglwrap.errors import UsageError
from sglwrap.memory.catalogue import ALIASES_PATH, CATALOGUE_DIR, catalogue_match, catalogue_names, key, repo_name
from sglwrap.memory.model import find_config, load_shape


@pytest.mark.parametrize(("typed", "folder"), [
    ("Qwen/Qwen2.5-72B-Instruct", "Qwen2.5-72B-Instruct"),
    ("qwen2.5-72b-instruct", "Qwen2.5-72B-Instruct"),
    ("QWEN2.5-72B", "Qwen2.5-72B-Instruct"),
    ("deepseek-ai/DeepSeek-R1", "DeepSeek-V3"),
    ("deepseek-ai/DeepSeek-V3", "DeepSeek-V3"),
    ("deepseek-ai/DeepSeek-R1-0528", "DeepSeek-V3"),
    ("meta-llama/Meta-Llama-3.1-8B-Instruct", "Llama-3.1-8B"),
    ("meta-llama/Llama-3.3-70B-Instruct", "Llama-3.1-70B"),
    ("meta-llama/Meta-Llama-3-8B-Instruct", "Meta-Llama-3-8B-Instruct"),
    ("meta-llama/Llama-2-7b-chat-hf", "Llama-2-7b-hf"),
    ("mistralai/Mistral-7B-Instruct-v0.3", "Mistral-7B-v0.3"),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", "Mixtral-8x7B-v0.1"),
    ("google/gemma-2-9b-it", "gemma-2-9b"),
    ("Qwen/Qwen3-30B-A3B-Instruct-2507", "Qwen3-30B-A3B"),
    ("Qwen/Qwen2.5-7B-Instruct", "Qwen2.5-7B-Instruct"),
    ("Qwen/Qwen2.5-7B", "Qwen2.5-7B"),
    ("Qwen/Qwen2-7B-Instruct", "Qwen2-7B-Instruct"),
    ("Qwen/Qwen3-235B-A22B-Instruct-2507", "Qwen3-235B-A22B-Instruct-2507"),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "Qwen2.5-7B"),
    ("moonshotai/Kimi-K2-Instruct-0905", "Kimi-K2-Instruct"),
    ("deepseek-ai/DeepSeek-V2-Lite-Chat", "DeepSeek-V2-Lite"),
    ("openai/gpt-oss-20b", "gpt-oss-20b"),
    ("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "Qwen3-235B-A22B-FP8"),  # the FP8 file, never the bf16 one
    ("Qwen/Qwen2.5-VL-7B-Instruct", "Qwen2.5-VL-7B-Instruct"),  # the VLM, never the text-only Qwen2.5-7B
    ("Qwen/Qwen3-30B-A3B-FP8", "Qwen3-30B-A3B-FP8"),
    ("zai-org/GLM-4.7-Flash", "GLM-4.7-Flash"),
    ("deepseek-ai/DeepSeek-V3.1", "DeepSeek-V3"),
    ("google/gemma-3-27b-it", "gemma-3-27b-it"),
    ("Qwen/Qwen3-VL-8B-Instruct", "Qwen3-VL-8B-Instruct"),
    ("Qwen/Qwen3.6-27B", "Qwen3.6-27B"),
    ("MiniMaxAI/MiniMax-M2.7", "MiniMax-M2.7"),
])
def test_model_catalogue_matches_the_spellings_people_type(typed: str, folder: str) -> None:
    assert catalogue_match(typed) == folder


@pytest.mark.parametrize("path", [
    "/models/Qwen2.5-72B-Instruct",
    "/models/Qwen2.5-72B-Instruct/",
    "/root/.cache/huggingface/hub/models--Qwen--Qwen2.5-72B-Instruct/snapshots/0123abcd",
    "/data/hf/models--Qwen--Qwen2.5-72B-Instruct",
])
def test_model_catalogue_reads_the_repository_out_of_a_local_path(path: str) -> None:
    """A path that holds no config.json (weights not downloaded here) still names its repository."""
    assert repo_name(path) == "Qwen2.5-72B-Instruct"
    cfg, source = find_config(path)
    assert cfg == CATALOGUE_DIR / "Qwen2.5-72B-Instruct" / "config.json"
    assert source == "catalogue Qwen2.5-72B-Instruct"


def test_model_catalogue_prefers_a_local_directory_over_the_catalogue(tmp_path: Path) -> None:
    local = tmp_path / "Qwen2.5-72B-Instruct"
    local.mkdir()
    cfg = json.loads((CATALOGUE_DIR / "Qwen2.5-0.5B" / "config.json").read_text(encoding="utf-8"))
    (local / "config.json").write_text(json.dumps(cfg), encoding="utf-8")
    path, source = find_config(str(local))
    assert path == local / "config.json" and source.startswith("local ")
    assert load_shape(str(local)).hidden_size == 896  # the local file, not the bundled 72B


@pytest.mark.parametrize("typed", [
    "Qwen/Qwen3-14B-FP8",  # a quantised release not bundled: its weights are not the bf16 file's
    "nvidia/DeepSeek-R1-FP4",
    "Qwen/Qwen2.5-VL-72B-Instruct",  # not bundled: no geometry may be borrowed from Qwen2.5-72B
    "some-org/Totally-Unknown-Model",
    "Qwen/Qwen2.5-7B-Instruct-AWQ",
    "moonshotai/Kimi-K2-Thinking",  # INT4: listed as different, although the words would reach Kimi-K2-Instruct
])
def test_model_catalogue_does_not_guess_a_model_it_does_not_hold(typed: str) -> None:
    assert catalogue_match(typed) is None
    with pytest.raises(UsageError, match="no config.json found"):
        find_config(typed)


def test_model_catalogue_keys_drop_only_words_that_leave_the_geometry_alone() -> None:
    assert key("Meta-Llama-3.1-8B-Instruct") == "llama-3.1-8b"
    assert key("gemma-2-27b-it") == "gemma-2-27b"
    assert key("Qwen3-235B-A22B-FP8") == "qwen3-235b-a22b-fp8"
    assert key("Qwen2.5-VL-72B-Instruct") == "qwen2.5-vl-72b"


def test_model_catalogue_aliases_point_at_bundled_folders_and_say_why() -> None:
    data = json.loads(ALIASES_PATH.read_text(encoding="utf-8"))
    names = set(catalogue_names())
    assert data["aliases"]
    for alias, entry in data["aliases"].items():
        assert entry["to"] in names, alias
        assert len(entry["why"]) > 20, alias
        assert key(alias) not in {key(n) for n in names}, f"{alias} shadows a bundled folder"
    for name, why in data["different"].items():
        assert name not in names and len(why) > 20, name


def test_model_catalogue_keys_are_unique() -> None:
    """Two folders with one key would make the lookup depend on sort order."""
    keys = [key(n) for n in catalogue_names()]
    dupes = {k for k in keys if keys.count(k) > 1}
    assert dupes <= {"qwen2.5-7b"}, dupes  # base and -Instruct: an exact name picks each


def test_model_catalogue_every_folder_has_a_provenance_row() -> None:
    readme = (CATALOGUE_DIR / "README.md").read_text(encoding="utf-8")
    for name in catalogue_names():
        assert f"`{name}`" in readme, name


# Parameter totals printed in the weight tables of public model reports (the same reports the configs come from,
# code-index ids in sglwrap/data/models/README.md): the sum over the checkpoint's safetensors.
PUBLISHED_PARAMS = {
    "Qwen2.5-72B-Instruct": 72_706_203_648,  # id 62544871882
    "QwQ-32B": 32_763_876_352,  # id 63012281180
    "Qwen2.5-3B-Instruct": 3_085_938_688,  # id 62693603738
    "Qwen2.5-1.5B-Instruct": 1_543_714_304,  # id 62511519683
    "Qwen2.5-0.5B": 494_032_768,  # id 62648363898
    "Meta-Llama-3-8B-Instruct": 8_030_261_248,  # id 62558919277
    "Qwen3-VL-8B-Instruct": 8_767_123_696,  # id 62543607479
    "Qwen2-7B-Instruct": 7_615_616_512,  # id 62532383149
}


@pytest.mark.parametrize(("name", "params"), PUBLISHED_PARAMS.items())
def test_model_catalogue_weights_from_config_match_the_published_parameter_count(name: str, params: int) -> None:
    """bf16 checkpoints: the estimate from the bundled config is the checkpoint's parameter count within 0.1%
    (biases, norms of the vision tower and position tables are the only parts left out)."""
    from sglwrap.memory.weights import estimate_params

    total_bytes, _ = estimate_params(load_shape(name))
    assert abs(total_bytes / 2 - params) / params < 0.001


# Tensor totals (GiB, printed as "GB") of quantised checkpoints in the same public model reports.
PUBLISHED_GIB = {
    "MiniMax-M2.7": 214.32,  # fp8 128x128 blocks, id 62693775865
    "gpt-oss-20b": 12.82,  # MXFP4 experts, bf16 attention/router/embeddings, id 62806644834
    "Kimi-K2-Instruct": 958.49,  # fp8 128x128 blocks, MLA, 384 experts, id 62698259723
}


@pytest.mark.parametrize(("name", "gib"), PUBLISHED_GIB.items())
def test_model_catalogue_quantised_weights_match_the_published_checkpoint_size(name: str, gib: float) -> None:
    from sglwrap.memory.weights import estimate_params

    total_bytes, _ = estimate_params(load_shape(name))
    assert abs(total_bytes / (1 << 30) - gib) / gib < 0.005


def test_model_catalogue_qwen35_9b_written_from_published_values_matches_the_published_checkpoint() -> None:
    """Qwen3.5-9B (written from published values, README): the estimate from the file plus the checkpoint's one MTP
    layer (a full-attention decoder layer with the gated q_proj, the dense MLP, and the 2h -> h ``fc``; SGLang loads it
    only for speculative decoding, so the estimate leaves it out) is the published index ``total_size``
    19,306,216,416 B (code-index id 71387934500) within 0.5%; and the classification/reward fields stay off."""
    from sglwrap.memory.weights import estimate_params

    shape = load_shape("Qwen3.5-9B")
    total_bytes, _ = estimate_params(shape)
    h, heads, kv, hd, inter = 4096, 16, 4, 256, 12288
    mtp = h * heads * hd * 2 + 2 * h * kv * hd + heads * hd * h + 3 * h * inter + 2 * h * h
    assert abs(total_bytes + 2 * mtp - 19_306_216_416) / 19_306_216_416 < 0.005
    assert shape.lm_head and shape.score_params == 0 and shape.vision_tp_sharded
