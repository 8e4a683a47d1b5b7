"""Terms the plain budget lacks: the speculative draft model, DeepEP/NVSHMEM buffers, LoRA buffers, and the
decode-graph batch sizes SGLang captures. Each returns a ``fits.Term`` (value ± what is not known).

Sources (SGLang release sources unpacked under ``~/.cache/sglwrap/releases/src``):

- capture sizes: ``[1, 2, 4] + range(8, max+1, 8)`` before 0.5.3; from 0.5.3 ``[1, 2, 4, 8, 12] +
  range(16, 257, 8) + range(272, 512, 16) + range(512, max+1)`` (``cuda_graph_runner.py`` / 0.5.23
  ``arg_groups/cuda_graph_hook.py:512``). Checked against the logged lists of corpus cases 01, 02, 07, 08, 09, 19.
- draft model: EAGLE/EAGLE3 drafts share the target's embedding (and EAGLE's lm_head) and add their own decoder
  layer(s) and ``fc``; EAGLE3 keeps its own lm_head over a draft vocabulary (``draft_vocab_size``, 32000 when not
  given). NEXTN/MTP loads the target's ``num_nextn_predict_layers`` MTP layer(s): one decoder layer of the target
  plus ``eh_proj`` (2h x h). A draft config found on disk (``--speculative-draft-model-path``) is sized from its
  own config.
- DeepEP (``layers/moe/token_dispatcher/deepep.py:203-304``): the buffer is created at the first MoE dispatch,
  i.e. after the KV pool is sized, so it comes out of the runtime slack. Low-latency RDMA buffer per DeepEP's
  ``LowLatencyLayout``: 2 (double buffer) x [send + recv] with send = recv = experts x T x (2h + 16) bytes,
  T = ``SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK`` (128); normal-mode NVLink buffer assumed 1 GiB
  (``Config.get_nvl_buffer_size_hint`` depends on the SM count: not reproduced) and NVSHMEM's own start-up
  0.5 GiB (assumed). ± half of the total.
- LoRA (``lora/mem_pool.py``): A and B buffers for ``--max-loras-per-batch`` adapters of ``--max-lora-rank`` over
  the attention and MLP projections of every layer, in the model dtype, sharded by TP; a MoE model's experts get
  per-expert buffers from 0.5.10 (see ``lora_buffers`` for the release ranges).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sglwrap.memory.fits import GIB, Term, exact
from sglwrap.memory.model import ModelShape
from sglwrap.record import Record

if TYPE_CHECKING:
    from sglwrap.sglang.cmdline import SglangCmdline

SPEC_ALGOS = ("EAGLE", "EAGLE3", "NEXTN", "MTP", "STANDALONE")


def _before(version: str | None, floor: str) -> bool:
    from sglwrap.versions import before

    return before(version, floor)


def capture_sizes(max_bs: int, version: str | None) -> list[int]:
    """The decode-graph batch sizes this SGLang release captures for ``max_bs``."""
    if max_bs <= 0:
        return []
    if _before(version, "0.5.3"):
        sizes = [1, 2, 4] + list(range(8, max_bs + 1, 8))
    else:
        sizes = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16)) + list(range(512, max_bs + 1))
    return [s for s in sizes if s <= max_bs]


class Extra(Record):
    """Flags the budget reads beyond ``ServerArgs`` (SGLang's defaults when absent)."""

    moe_a2a_backend: str | None = None
    deepep_mode: str = "auto"
    max_loras_per_batch: int = 0
    max_lora_rank: int = 0
    lora: bool = False
    lora_rank_given: bool = False  # --max-lora-rank given (else SGLang takes the adapters' largest r)
    lora_target_modules: tuple[str, ...] = ()  # --lora-target-modules as given (empty: from the adapters)
    # read from the adapters' adapter_config.json when every --lora-paths entry has one on this machine (local
    # directory or the local HF cache): SGLang's max_lora_rank (the largest r) and the union of their target_modules
    lora_adapter_rank: int | None = None
    lora_adapter_targets: tuple[str, ...] | None = None
    eagle_topk: int | None = None
    num_steps: int | None = None
    enable_dp_lm_head: bool = False
    moe_dense_tp_size: int | None = None
    redundant_experts: int = 0


def read_extra(cmd: SglangCmdline) -> Extra:
    """Read the extra flags from the user's command line."""
    given: Mapping[str, Any] = cmd.canonical_given()

    def _int(key: str, default: int | None) -> int | None:
        v = given.get(key)
        try:
            return default if v is None else int(v)
        except (TypeError, ValueError):
            return default

    lora = bool(given.get("lora_paths") or given.get("enable_lora"))
    targets = given.get("lora_target_modules") or ()
    targets = (targets,) if isinstance(targets, str) else tuple(str(x) for x in targets)
    paths = given.get("lora_paths") or ()
    adapters = read_adapter_configs((paths,) if isinstance(paths, str) else tuple(str(x) for x in paths)) \
        if lora else None
    return Extra(moe_a2a_backend=str(given["moe_a2a_backend"]) if given.get("moe_a2a_backend") else None,
                 deepep_mode=str(given.get("deepep_mode") or "auto"),
                 max_loras_per_batch=(_int("max_loras_per_batch", 8) or 0) if lora else 0,
                 max_lora_rank=(_int("max_lora_rank", 64) or 0) if lora else 0, lora=lora,
                 lora_rank_given=given.get("max_lora_rank") is not None, lora_target_modules=targets,
                 lora_adapter_rank=adapters[0] if adapters else None,
                 lora_adapter_targets=adapters[1] if adapters else None,
                 eagle_topk=_int("speculative_eagle_topk", None), num_steps=_int("speculative_num_steps", None),
                 enable_dp_lm_head=bool(given.get("enable_dp_lm_head")),
                 moe_dense_tp_size=_int("moe_dense_tp_size", None),
                 redundant_experts=_int("ep_num_redundant_experts", 0) or 0)


A2A_REPLICATING_SHARED = ("deepep", "pplx", "mooncake", "nixl", "mori", "flashinfer", "megamoe", "deepep_v2")


def sharding_for(shape: ModelShape, extra: Extra, tp: int, attn_tp: int) -> Any:
    """SGLang 0.5.23's DeepSeek-V2-family layout under DP attention / EP (``weights.Sharding``); None when the
    plain TP layout applies."""
    from sglwrap.memory.weights import Sharding

    dp_attn = attn_tp < tp
    a2a = (extra.moe_a2a_backend or "").lower()
    sh = Sharding(embed_tp=attn_tp if (dp_attn and shape.is_mla) else None,
                  head_tp=attn_tp if (dp_attn and extra.enable_dp_lm_head) else None,
                  shared_replicated=shape.is_moe and a2a in A2A_REPLICATING_SHARED,
                  dense_replicated=extra.moe_dense_tp_size == 1,
                  redundant_experts=extra.redundant_experts if shape.is_moe else 0)
    return None if sh == Sharding() else sh


def spec_algorithm(name: str | None) -> str | None:
    """The speculative algorithm that loads a draft model (None for ngram / none)."""
    up = (name or "").upper()
    return up if up in SPEC_ALGOS else None


def _layer_params(shape: ModelShape) -> float:
    """Parameters of one decoder layer of ``shape`` (attention + dense or MoE MLP, no embeddings)."""
    h = shape.hidden_size
    if shape.is_mla:
        nope, rope, v = shape.qk_nope_head_dim or 0, shape.qk_rope_head_dim or 0, shape.v_head_dim
        q_rank, kv_rank = shape.q_lora_rank, shape.kv_lora_rank or 0
        attn = h * ((q_rank or 0) + kv_rank + rope) + shape.num_attention_heads * (
            (q_rank or h) * (nope + rope) + kv_rank * (nope + v) + v * h)
    else:
        attn = h * shape.num_attention_heads * shape.head_dim * 2 + h * shape.num_kv_heads * shape.head_dim * 2
    if shape.is_moe:
        mlp = 3 * h * shape.moe_intermediate_size * (shape.n_routed_experts + shape.n_shared_experts)
    else:
        mlp = 3 * h * shape.intermediate_size
    return float(attn + mlp)


def _linear_bytes(shape: ModelShape) -> float:
    from sglwrap.memory.weights import _linear_bytes as lb

    return lb(shape, None)


class Draft(Record):
    """The speculative draft model: its weights per rank, layers in the KV pool, and graph memory."""

    algorithm: str
    weights: Term
    kv_layers: int
    description: str


def draft_model(shape: ModelShape, algorithm: str, draft_path: str | None, tp: int) -> Draft:
    """Size the draft model ``algorithm`` loads next to ``shape`` (weights sharded by TP like the target)."""
    from sglwrap.errors import SglwrapError

    if draft_path:
        try:
            from sglwrap.memory.model import load_shape
            from sglwrap.memory.weights import weights_for

            dshape = load_shape(draft_path)
        except SglwrapError:
            dshape = None
        if dshape is not None:
            w = weights_for(dshape, tp=tp, attn_tp=tp, pp=1, online_quant=None)
            shared = dshape.vocab_size * dshape.hidden_size * 2 / tp  # embedding shared with the target
            own = max(0.0, w.per_rank_bytes - (shared if algorithm in ("EAGLE", "EAGLE3") else 0.0))
            return Draft(algorithm, Term(int(own), int(0.05 * own), f"draft config {dshape.source} "
                                         f"({dshape.num_layers} layer(s); embedding shared with the target)"),
                         dshape.num_layers if algorithm != "STANDALONE" else dshape.num_layers,
                         f"{algorithm} draft {dshape.name}")
    h = shape.hidden_size
    if algorithm in ("NEXTN", "MTP"):
        params = _layer_params(shape) + 2 * h * h
        size = params * _linear_bytes(shape) / tp
        return Draft(algorithm, Term(int(size), int(0.15 * size),
                                     "estimate: the target's MTP layer (one decoder layer + eh_proj)"),
                     1, f"{algorithm}: one MTP layer of {shape.name}")
    dense = _layer_params(shape)
    if shape.is_moe:  # EAGLE drafts of MoE targets are dense Llama layers
        dense = h * shape.num_attention_heads * shape.head_dim * 2 + h * shape.num_kv_heads * shape.head_dim * 2 \
            + 3 * h * max(shape.intermediate_size, 2 * h)
    fc = (3 if algorithm == "EAGLE3" else 2) * h * h
    head = 32000 * h if algorithm == "EAGLE3" else 0
    size = (dense + fc + head) * 2.0 / tp
    return Draft(algorithm, Term(int(size), int(0.5 * size),
                                 f"estimate (no draft config found): one dense layer of hidden {h} + fc"
                                 + (" + a 32000-token lm_head" if head else "")),
                 1, f"{algorithm} draft (estimated)")


def default_draft_tokens(version: str | None, architecture: str) -> int:
    """``--speculative-num-draft-tokens`` when not given: 64 in the dataclass up to 0.4.5 (0.4.3 server_args.py:127);
    from 0.4.6 ``auto_choose_speculative_params`` (0.5.9 server_args.py:5741-5775): 8 for Llama/Grok, else 4."""
    if _before(version, "0.4.6"):
        return 64
    return 8 if architecture in ("LlamaForCausalLM", "Grok1ForCausalLM", "Grok1VForCausalLM") else 4


LEGACY_VERIFY_BEFORE = "0.4.4"  # 0.4.3 captures in ascending order; 0.4.4 captures reversed(capture_bs)


def verify_graph_bytes(shape: ModelShape, capture: tuple[int, ...], draft_tokens: int, context_len: int,
                       tp: int = 1) -> tuple[int, str]:
    """What the target's verify graphs of SGLang < 0.4.4 hold, from the 0.4.3 source (bytes, how).

    ``model_executor/cuda_graph_runner.py`` (0.4.3): the EAGLE target captures TARGET_VERIFY graphs with
    ``num_tokens_per_bs = speculative_num_draft_tokens`` rows per request, for every size of ``capture_bs`` in
    ascending order (``:286-300``), keeping ``output_buffers[bs]`` per size: the logits, converted to fp32 over the
    whole vocabulary (``layers/logits_processor.py:248``), and the hidden states the draft reads (capture mode FULL).
    Because the sizes grow, a graph cannot take the larger blocks it needs from the blocks its smaller predecessors
    freed in the shared graph pool, so each size also keeps its own transients: the lm_head output in the model
    dtype (before ``.float()``) and the MLP's gate/up output (``2 x intermediate / tp``). Before capturing, the
    runner sizes the attention backend for ``max_bs x draft_tokens`` rows (``init_cuda_graph_state``, ``:190``):
    FlashInfer's ``cuda_graph_kv_indices`` (int32) and ``cuda_graph_custom_mask`` (uint8) of that many rows times
    the model's context length (``layers/attention/flashinfer_backend.py:261-282``).
    """
    dt = 2
    inter = (shape.dense_intermediate_size or shape.intermediate_size) if not shape.is_moe else shape.moe_intermediate_size
    rows = [bs * draft_tokens for bs in capture]
    kept = sum(rows) * (4 * shape.vocab_size + dt * shape.hidden_size)
    transient = sum(rows) * dt * (shape.vocab_size + 2 * inter // max(1, tp))
    attn = max(rows) * context_len * (4 + 1)
    how = (f"source model (SGLang < 0.4.4): {len(capture)} verify graphs, {sum(rows)} rows of {draft_tokens} draft "
           f"tokens: fp32 logits + hidden states kept {kept / GIB:.2f} GiB, per-size transients (lm_head output, "
           f"MLP gate/up) {transient / GIB:.2f} GiB, FlashInfer graph state {max(rows)} x {context_len} x 5 B "
           f"{attn / GIB:.2f} GiB")
    return kept + transient + attn, how


def draft_graphs(target_graphs: Term, algorithm: str, *, capture: tuple[int, ...] = (), draft_tokens: int = 1,
                 vocab: int = 0, shape: ModelShape | None = None, version: str | None = None,
                 context_len: int | None = None, tp: int = 1) -> Term:
    """What speculative decoding adds to the graphs.

    SGLang < 0.4.4 (with the model's shape and context length known): the target's verify graphs from the source
    (``verify_graph_bytes``), ± the largest relative residual of the logged target captures of such launches
    (``verify_graph_legacy`` in fits.json: the docs-CI EAGLE launches of 0.4.1 and 0.4.2, corpus 71 and 33). The
    draft worker's own captures stay in the decode-graph term.

    From 0.4.4 (``cuda_graph_runner.py:308``: ``reversed(self.capture_bs)``) the largest size is captured first and
    its transients are reused by the smaller ones:
    - a constant fitted on the logged target captures of speculative launches (``spec_graph`` in fits.json: the
      verify graphs beyond plain decode graphs at bs <= 4, where the logits term below is small);
    - the verify graphs' logits: each captured batch size keeps its own output buffers (0.4.3
      ``cuda_graph_runner.py:306``, 0.5.6 ``:490``: ``self.output_buffers[bs]``), fp32 over the whole vocabulary
      (0.4.3 ``logits_processor.py:248``: ``.float()``), with ``draft_tokens`` rows per request where a decode graph
      has one: ``sum(capture sizes) x (draft_tokens - 1) x vocab x 4 B`` beyond the decode graphs. The same per-size
      sum for plain decode graphs (rows = 1) gives 0.82 GiB for corpus 02 (grok-2, vocab 131072, 0.5.2, 23 sizes to
      160, sum 1687), which logged 0.89 GiB in all. ± 10% of it (what the graph pool may share).
    The draft worker's own captures are not logged; the fitted constant goes into the ± once more for them.
    """
    from sglwrap.memory.fits import load

    if (shape is not None and context_len and capture and draft_tokens > 1 and version is not None
            and _before(version, LEGACY_VERIFY_BEFORE)):
        value, how = verify_graph_bytes(shape, capture, draft_tokens, context_len, tp)
        rel = float((load().get("verify_graph_legacy") or {}).get("rel_pm", 0.25))
        return Term(value, int(rel * value), f"{how}; ± {rel:.0%} (logged 0.4.1/0.4.2 EAGLE launches)")
    g = load().get("spec_graph") or {}
    n = len(g.get("cases") or [])
    if not n:
        return Term(target_graphs.bytes, target_graphs.bytes + target_graphs.pm,
                    f"estimate: {algorithm} draft graphs ~ the target's decode graphs, unmeasured")
    extra = int(float(g["extra_gib"]) * GIB)
    rows = sum(capture) * (draft_tokens - 1) if capture and draft_tokens > 1 and vocab else 0
    logits = rows * vocab * 4
    return Term(extra + logits, int(float(g["pm_gib"]) * GIB) + extra + logits // 10,
                f"fit: {algorithm} verify graphs +{g['extra_gib']:.2f} GiB over decode graphs ({n} cases) + verify "
                f"logits sum(bs) {sum(capture)} x {max(0, draft_tokens - 1)} x {vocab} x 4 B ({logits / GIB:.2f} GiB); "
                f"draft captures unmeasured (in the ±)")


def deepep_buffers(shape: ModelShape, extra: Extra, ep: int, env: Mapping[str, str]) -> Term:
    """DeepEP + NVSHMEM device buffers for ``--moe-a2a-backend deepep`` (0 otherwise)."""
    if extra.moe_a2a_backend != "deepep" or not shape.is_moe:
        return exact(0, "no DeepEP")
    tokens = int(env.get("SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK", "128") or 128)
    mode = extra.deepep_mode
    total = 0.0
    parts = []
    if mode in ("auto", "low_latency"):
        msg = 2 * shape.hidden_size + 16
        ll = 2 * 2 * shape.n_routed_experts * tokens * msg
        total += ll
        parts.append(f"low-latency RDMA 2 x 2 x {shape.n_routed_experts} experts x {tokens} tokens x {msg} B")
    if mode in ("auto", "normal") and ep > 1:
        total += 1 * GIB
        parts.append("normal-mode NVLink buffer 1 GiB (assumed)")
    total += 0.5 * GIB
    parts.append("NVSHMEM start-up 0.5 GiB (assumed)")
    return Term(int(total), int(0.5 * total), "; ".join(parts))


# PEFT module names -> SGLang's LoRA buffer names (0.5.23 ``lora/utils.py:277-330`` get_normalized_target_modules;
# 0.5.7 ``lora/utils.py:96-125``: the base name after the last dot, q/k/v and gate/up stacked, the rest kept)
_LORA_NORMALIZED = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj", "qkv_proj": "qkv_proj",
                    "o_proj": "o_proj", "gate_proj": "gate_up_proj", "up_proj": "gate_up_proj",
                    "gate_up_proj": "gate_up_proj", "down_proj": "down_proj", "embed_tokens": "embed_tokens",
                    "vocab_emb": "embed_tokens", "embeddings": "embed_tokens", "word_embeddings": "embed_tokens",
                    "lm_head": "lm_head", "output": "lm_head"}
_LORA_LINEAR = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")
# release gates of lora/mem_pool.py (read in the wheels of each release):
_LORA_MOE_EXPERTS = "0.5.10"  # init_buffers: 4-D per-expert gate_up/down buffers on a MoE model (none in 0.5.9)
_LORA_LM_HEAD_SHARDED = "0.5.10"  # get_embedding_lora_B_shape: lm_head B split over TP (0.5.9: full vocabulary)
_LORA_SHARED_OWN_WIDTH = "0.5.21"  # _dense_local_dim: a shared expert's 3-D buffers take its own width (0.5.20:
#                                    get_hidden_dim's config.intermediate_size)
_LORA_EMBEDDINGS = "0.5.6.post2"  # embed_tokens / lm_head buffers (0.5.6.post1 allocates none)
_LORA_QKV_KV_REPLICATED = "0.5.12"  # _column_parallel_lora_b_per_rank_dim: qkv B of TP > KV heads holds q / tp +
#                                     one K and one V head (0.5.11: (q + 2 kv) / tp)


def lora_modules(given: tuple[str, ...], how: str | None = None) -> tuple[frozenset[str], str]:
    """SGLang's normalised LoRA target modules for ``--lora-target-modules`` or the adapters' ``target_modules``
    (``lora_manager.py:800-877``), and how they were chosen. ``all`` is every linear module plus the embeddings;
    none known (no flag, no adapter_config.json on this machine): every linear module is assumed. Modules this
    accountant cannot size (a linear-attention ``in_proj_qkvz`` / ``out_proj``, ...) are named in ``how``."""
    if not given:
        return frozenset(_LORA_LINEAR), "assumed q/k/v/o/gate/up/down (the adapters' target_modules are not read)"
    how = how or "--lora-target-modules " + " ".join(given)
    names = {g.rsplit(".", 1)[-1] for g in given}
    if names & {"all", "all-linear"}:
        return frozenset((*_LORA_LINEAR, "embed_tokens", "lm_head")), how
    mods = frozenset(_LORA_NORMALIZED[n] for n in names if n in _LORA_NORMALIZED)
    unsized = sorted(n for n in names if n not in _LORA_NORMALIZED)
    if unsized:
        how += f"; not sized: {'/'.join(unsized)}"
    return mods, how


def _lora_path(entry: str) -> str:
    """The adapter path of one ``--lora-paths`` entry: ``name=path``, ``path``, or a JSON object with
    ``lora_path`` (``server_args.py`` LoRARef parsing)."""
    text = entry.strip()
    if text.startswith("{"):
        import json

        try:
            obj = json.loads(text)
        except ValueError:
            return text
        return str(obj.get("lora_path") or "") if isinstance(obj, dict) else text
    return text.split("=", 1)[1] if "=" in text else text


def _adapter_config(path: str) -> dict[str, Any] | None:
    """``adapter_config.json`` of an adapter directory, or of a Hub id in the local HF cache (offline); None when
    it is not on this machine or unreadable."""
    import json
    from pathlib import Path

    from sglwrap.memory.model import hf_cached_file

    if not path:
        return None
    where: Path | None = Path(path).expanduser() / "adapter_config.json"
    if where is not None and not where.is_file() and not path.startswith(("/", ".", "~")):
        where = hf_cached_file(path, "adapter_config.json")
    if where is None or not where.is_file():
        return None
    try:
        doc = json.loads(where.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def read_adapter_configs(entries: tuple[str, ...]) -> tuple[int, tuple[str, ...] | None] | None:
    """What SGLang infers from the adapters when the flags leave it open (``lora_manager.init_lora_shapes``):
    the largest ``r`` and the union of the ``target_modules`` lists (None when one is not a list: SGLang then
    needs --lora-target-modules). None unless every entry's adapter_config.json is on this machine."""
    if not entries:
        return None
    ranks: list[int] = []
    targets: set[str] | None = set()
    for entry in entries:
        cfg = _adapter_config(_lora_path(entry))
        if cfg is None or not isinstance(cfg.get("r"), int):
            return None
        ranks.append(int(cfg["r"]))
        mods = cfg.get("target_modules")
        if targets is not None and isinstance(mods, list):
            targets.update(str(m) for m in mods)
        else:
            targets = None
    return max(ranks), (tuple(sorted(targets)) if targets is not None else None)


def lora_buffers(shape: ModelShape, extra: Extra, tp: int, attn_tp: int | None = None,
                 version: str | None = None) -> Term:
    """LoRA A/B buffers of SGLang's LoRA memory pool (0 without LoRA), for release ``version`` (None: 0.5.23).

    ``lora/mem_pool.py`` (0.5.23 ``init_buffers`` :597-729, 0.5.7 :200-290): for every target module and every
    layer (``num_hidden_layers``: a hybrid's linear-attention layers get the qkv/o buffers too) one A buffer
    ``(max_loras_per_batch, max_lora_rank x stacked, input)`` and one B buffer ``(max_loras_per_batch, output,
    max_lora_rank)`` in the model dtype (``get_lora_A_shape`` / ``get_lora_B_shape`` :418-573; stacked: 3 for
    qkv_proj, 2 for gate_up_proj, ``utils.py:330-348``; dims from ``get_default_hidden_dim`` :172-220: qkv
    ``hidden -> head_dim x (heads + 2 kv_heads)``, o ``heads x head_dim -> hidden``, gate_up ``hidden -> 2 x
    intermediate``, down ``intermediate -> hidden``). Row-parallel modules (o, down) shard A's input by TP,
    column-parallel ones (qkv, gate_up) shard B's output (qkv over the attention-TP group, from 0.5.12 with one
    whole K and V head per rank when TP exceeds the KV heads; the gated q of Qwen3-Next's full-attention layers,
    read off the layer from 0.5.21, is not modelled: under 1% of the pool); the embedding and
    lm_head buffers (targets ``embed_tokens`` / ``lm_head`` / ``all``, from 0.5.6.post2) are ``(n, r, vocab)`` +
    ``(n, hidden, r)`` and ``(n, r, hidden)`` + ``(n, vocab / tp, r)`` (lm_head B over the full vocabulary before
    0.5.10).

    MoE: from 0.5.10 a MoE model's gate_up/down targets get 4-D per-expert buffers ``(n, experts, 2r, hidden)`` /
    ``(n, experts, 2 x moe_intermediate / tp, r)`` and ``(n, experts, r, moe_intermediate / tp)`` / ``(n, experts,
    hidden, r)`` on every layer (global expert ids: EP is not modelled), plus the 3-D buffers of the shared experts
    when it has them (their own width from 0.5.21, ``config.intermediate_size`` before). Up to 0.5.9 there are no
    per-expert buffers: gate_up/down get the plain 3-D buffers of ``config.intermediate_size`` whatever the model.

    The rank is --max-lora-rank, else the adapters' largest ``r`` read from their adapter_config.json, else 64
    assumed with ± all of it (SGLang sizes the pool by the largest r; PEFT's default is 8): an unknown adapter
    widens the verdict's uncertainty instead of deciding it. Targets: --lora-target-modules, else the adapters'
    own, else every linear module (± half)."""
    from sglwrap.versions import at_least, newest_known, parse

    if not extra.lora or not extra.max_loras_per_batch:
        return exact(0, "no LoRA")
    if extra.lora_rank_given:
        r, rank_how, rank_known = extra.max_lora_rank, f"rank {extra.max_lora_rank}", True
    elif extra.lora_adapter_rank:
        r, rank_how, rank_known = extra.lora_adapter_rank, f"rank {extra.lora_adapter_rank} (the adapters' " \
                                                             f"largest r)", True
    else:
        r, rank_known = extra.max_lora_rank, False
        rank_how = f"rank {r} (assumed: SGLang takes the adapters' largest r, not read here)"
    if not r:
        return exact(0, "no LoRA")
    h, n = shape.hidden_size, extra.max_loras_per_batch
    v = version or newest_known()
    atp = attn_tp or tp
    q = shape.num_attention_heads * shape.head_dim
    qkv_out = q + 2 * shape.num_kv_heads * shape.head_dim
    inter = shape.intermediate_size
    if extra.lora_target_modules:
        mods, how = lora_modules(extra.lora_target_modules)
    elif extra.lora_adapter_targets is not None:
        mods, how = lora_modules(extra.lora_adapter_targets, "the adapters' target_modules")
    else:
        mods, how = lora_modules(())
    targets_known = bool(extra.lora_target_modules) or extra.lora_adapter_targets is not None
    qkv_b = qkv_out / atp
    if at_least(v, _LORA_QKV_KV_REPLICATED) and shape.num_kv_heads < atp:  # each rank holds one whole KV head
        qkv_b = q / atp + 2 * shape.head_dim
    per_layer = {  # (A elements, B elements) per adapter slot and layer, on one rank
        "qkv_proj": (3 * r * h, qkv_b * r), "o_proj": (r * q / atp, h * r),
        "gate_up_proj": (2 * r * h, 2 * inter / tp * r), "down_proj": (r * inter / tp, h * r)}
    experts = shape.is_moe and at_least(v, _LORA_MOE_EXPERTS)
    if experts:  # init_buffers :611-668: a 4-D per-expert buffer for every layer, plus the shared experts'
        e, mi = shape.n_routed_experts, shape.moe_intermediate_size  # 3-D one when the model has them
        shared = shape.shared_expert_intermediate or shape.n_shared_experts * mi
        if shared and not at_least(v, _LORA_SHARED_OWN_WIDTH):
            shared = inter  # get_hidden_dim("gate_up_proj"): config.intermediate_size
        per_layer["gate_up_proj"] = (e * 2 * r * h + (2 * r * h if shared else 0),
                                     e * 2 * mi / tp * r + (2 * shared / tp * r if shared else 0))
        per_layer["down_proj"] = (e * r * mi / tp + (r * shared / tp if shared else 0),
                                  e * h * r + (h * r if shared else 0))
    elems = shape.num_layers * sum(a + b for m, (a, b) in per_layer.items() if m in mods)
    pv, floor = parse(v), parse(_LORA_EMBEDDINGS)
    embeddings = pv is None or floor is None or pv >= floor  # a post release: full PEP 440 order here
    if "embed_tokens" in mods and embeddings:
        elems += r * shape.vocab_size + h * r
    if "lm_head" in mods and embeddings:
        elems += r * h + shape.vocab_size / (tp if at_least(v, _LORA_LM_HEAD_SHARDED) else 1) * r
    dtype = 2  # the model dtype: bf16/fp16 (an fp32 checkpoint loads as bf16)
    size = elems * n * dtype
    if not rank_known:
        pm = 1.0
    else:
        pm = 0.05 if targets_known else 0.5
    moe_how = ""
    if shape.is_moe:
        moe_how = (f", per-expert gate_up/down buffers over {shape.n_routed_experts} experts (SGLang >= 0.5.10)"
                   if experts else ", no per-expert buffers (SGLang < 0.5.10: gate_up/down are 3-D of "
                                   "config.intermediate_size)")
    return Term(int(size), int(pm * size),
                f"LoRA pool: {n} adapter slots x {rank_how} x {shape.num_layers} layers x "
                f"{'/'.join(sorted(mods)) or 'no sized module'} ({how}){moe_how}, {dtype}-byte model dtype"
                + (", ± all of it (the rank is not known)" if not rank_known else ""))
