"""Differential check of the release rules against each SGLang release's own ``ServerArgs`` default resolution.

Maintainer tool (needs the unpacked release sources, never run by sglwrap itself)::

    python -m sglwrap.sglang.check_defaults [--versions 0.4.7 0.5.2 ...] [--src ~/.cache/sglwrap/releases/src]

For each release a child interpreter puts that release's sources first on ``sys.path`` (as
``sglwrap.sglang.generate.introspect`` does, importing permissively so that a module the current environment cannot
import is stubbed and recorded), replaces the GPU facts at the boundary (``get_nvgpu_memory_capacity``,
``get_device_memory_capacity``, ``is_sm100_supported`` and friends, ``torch.cuda.get_device_capability`` /
``get_device_properties``) and the model config (``ServerArgs.get_hf_config``, ``ModelConfig.from_server_args``), and
builds ``ServerArgs(model_path=..., **given)`` for every case of :data:`GRID`, so the release's own ``__post_init__``
runs.  What it resolved (mem_fraction_static, chunked_prefill_size, cuda_graph_max_bs, the length of cuda_graph_bs
when ServerArgs sets it, attention_backend) is written to ``tests/fixtures/sglang_defaults/<version>.json``;
``tests/test_sglang_defaults_diff.py`` compares ``resolve_server_args`` with those tables, so CI needs no old wheels.
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

from sglwrap.record import Record

_HERE = Path(__file__).resolve()
FIXTURES = _HERE.parents[2] / "tests" / "fixtures" / "sglang_defaults"

# name, nvidia-smi MiB, compute capability
GPUS: tuple[tuple[str, float, tuple[int, int]], ...] = (
    ("RTX 3090", 24576, (8, 6)), ("RTX 4090", 24564, (8, 9)), ("RTX A6000", 49140, (8, 6)),
    ("L40S", 46068, (8, 9)), ("H100 80GB", 81559, (9, 0)), ("H20", 97871, (9, 0)),
    ("RTX PRO 6000", 97887, (12, 0)), ("H200", 143771, (9, 0)), ("B200", 183359, (10, 0)),
)

# What ServerArgs and the rules read of a model: kind -> (architectures, model_type, vision_config or None)
MODELS: dict[str, tuple[tuple[str, ...], str, dict[str, int] | None]] = {
    "dense": (("LlamaForCausalLM",), "llama", None),
    "moe": (("Qwen3MoeForCausalLM",), "qwen3_moe", None),
    # Qwen2.5-VL's vision_config names its depth "depth": SGLang reads num_hidden_layers (default 24)
    "multimodal": (("Qwen2_5_VLForConditionalGeneration",), "qwen2_5_vl", {"depth": 32, "hidden_size": 1280}),
}

SPEC = {"speculative_algorithm": "EAGLE", "speculative_draft_model_path": "draft-model",
        "speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}

FIELDS = ("mem_fraction_static", "chunked_prefill_size", "cuda_graph_max_bs", "cuda_graph_bs_len",
          "attention_backend")


class Case(Record):
    """One grid point: a GPU, a TP size, a model kind and the optional features."""

    gpu: str
    total_mib: float
    capability: tuple[int, int]
    tp: int
    model: str
    spec: bool
    dp_attention: bool

    @property
    def key(self) -> str:
        return (f"{self.gpu}|tp{self.tp}|{self.model}|{'spec' if self.spec else 'nospec'}|"
                f"{'dpattn' if self.dp_attention else 'nodp'}")

    def given(self) -> dict[str, Any]:
        """The user's options for this case, by SGLang destination name."""
        g: dict[str, Any] = {"tp_size": self.tp}
        if self.spec:
            g.update(SPEC)
        if self.dp_attention:
            g.update(enable_dp_attention=True, dp_size=self.tp)
        return g


def grid() -> list[Case]:
    """Every case: GPUs x TP 1/2/4/8 x dense/MoE/multimodal x speculative on/off x DP attention on/off (tp > 1)."""
    out = []
    for name, mib, cap in GPUS:
        for tp in (1, 2, 4, 8):
            for model in MODELS:
                for spec in (False, True):
                    for dp in ((False, True) if tp > 1 else (False,)):
                        out.append(Case(name, mib, cap, tp, model, spec, dp))
    return out


# ---- the child ---------------------------------------------------------------------------------------------------

_STATE: dict[str, Any] = {"mib": 81559.0, "cap": (9, 0), "kind": "dense"}


def _cap() -> tuple[int, int]:
    return _STATE["cap"]  # type: ignore[no-any-return]


def _major() -> int:
    return _cap()[0]


def _gpu_patches() -> dict[str, Any]:
    """Replacements for the GPU probes; each reads the current case from ``_STATE``."""
    def const(value: Any) -> Any:
        return lambda *a, **k: value

    return {
        "get_nvgpu_memory_capacity": lambda *a, **k: _STATE["mib"],
        "get_device_memory_capacity": lambda *a, **k: _STATE["mib"],
        "get_gpu_memory_capacity": lambda *a, **k: _STATE["mib"],
        "get_device_sm": lambda *a, **k: _major() * 10 + _cap()[1],
        "get_device_capability": lambda *a, **k: _cap(),
        "get_device_name": const("NVIDIA GPU"), "get_device": const("cuda"),
        "is_cuda": const(True), "is_cuda_alike": const(True),
        "is_hip": const(False), "is_npu": const(False), "is_xpu": const(False), "is_cpu": const(False),
        "is_hpu": const(False), "is_mps": const(False), "is_musa": const(False), "is_out_of_tree": const(False),
        "is_host_cpu_arm64": const(False), "is_gfx95_supported": const(False),
        "is_flashinfer_available": const(True), "is_in_ci": const(False), "cpu_has_amx_support": const(False),
        "is_sm80_supported": lambda *a, **k: _major() == 8,
        "is_sm90_supported": lambda *a, **k: _major() == 9,
        "is_hopper_with_cuda_12_3": lambda *a, **k: _major() == 9,
        "is_ampere_with_cuda_12_3": lambda *a, **k: _major() == 8,
        "is_sm100_supported": lambda *a, **k: _major() == 10,
        "is_sm100_or_sm110_supported": lambda *a, **k: _major() in (10, 11),
        "is_sm110_supported": lambda *a, **k: _major() == 11,
        "is_sm120_supported": lambda *a, **k: _major() == 12,
        "is_sm120": lambda *a, **k: _cap() == (12, 0),
        "is_blackwell_supported": lambda *a, **k: _major() in (10, 11, 12),
        "is_blackwell": lambda *a, **k: _major() in (10, 11, 12),
        "is_mnnvl_fabric_device": const(False),
    }


class _Obj:
    """A config object: attributes from a dict, ``to_dict`` and ``get`` as transformers' configs have."""

    def __init__(self, d: dict[str, Any]) -> None:
        self.__dict__.update(d)

    def to_dict(self) -> dict[str, Any]:
        return {k: (v.to_dict() if isinstance(v, _Obj) else v) for k, v in self.__dict__.items()}

    def get(self, key: str, default: Any = None) -> Any:
        return self.__dict__.get(key, default)



class _Lenient(_Obj):
    """A model config: an attribute it does not set reads None; an ``is_``/``has_``/``supports`` method says False."""

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        if attr.startswith(("is_", "has_", "supports")):
            return _NO
        return None


class _No:
    """False whether read as a property or called as a method."""

    def __bool__(self) -> bool:
        return False

    def __call__(self, *a: Any, **k: Any) -> bool:
        return False


_NO = _No()


def _hf_config(kind: str) -> _Obj:
    archs, model_type, vision = MODELS[kind]
    d: dict[str, Any] = {"architectures": list(archs), "model_type": model_type, "hidden_size": 4096,
                         "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                         "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 32768,
                         "torch_dtype": "bfloat16", "head_dim": 128}
    if kind == "moe":
        d.update(num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768)
    if vision is not None:
        d["vision_config"] = _Obj(dict(vision))
        d["text_config"] = _Obj(dict(d))
    return _Obj(d)


def _model_config(kind: str) -> _Obj:
    hf = _hf_config(kind)
    return _Lenient({"hf_config": hf, "hf_text_config": hf, "is_multimodal": MODELS[kind][2] is not None,
                 "is_generation": True, "is_multimodal_gen": False, "is_image_gen": False,
                 "is_audio_model": False, "is_encoder_decoder": False, "is_hybrid_swa": False,
                 "is_hybrid": False, "hybrid_layer_ids": None, "context_len": 32768,
                 "is_multimodal_chunked_prefill_supported": True,
                 "attention_arch": "MHA", "num_attention_heads": 32, "is_hybrid_swa_compress": False,
                 "model_type": hf.get("model_type"), "architectures": hf.get("architectures")})


def _install() -> None:
    """Point every GPU/model boundary the release's ServerArgs can reach at ``_STATE`` (the current case)."""
    import torch

    patches = _gpu_patches()
    for name, module in list(sys.modules.items()):
        if not name.startswith("sglang") or module is None:
            continue
        for fn, repl in patches.items():
            if fn in getattr(module, "__dict__", {}):
                module.__dict__[fn] = repl

    def props(*a: Any, **k: Any) -> _Obj:
        return _Obj({"total_memory": int(_STATE["mib"] * 2**20), "major": _major(), "minor": _cap()[1],
                     "name": "NVIDIA GPU", "multi_processor_count": 132})

    torch.cuda.get_device_capability = lambda *a, **k: _cap()  # type: ignore[assignment]
    torch.cuda.get_device_properties = props  # type: ignore[assignment]
    torch.cuda.is_available = lambda: True  # type: ignore[assignment]
    torch.cuda.device_count = lambda: 8  # type: ignore[assignment]
    torch.cuda.get_device_name = lambda *a, **k: "NVIDIA GPU"  # type: ignore[assignment]
    torch.cuda.mem_get_info = lambda *a, **k: (int(_STATE["mib"] * 2**20),) * 2  # type: ignore[assignment]
    sa = sys.modules["sglang.srt.server_args"]
    cls = sa.__dict__["ServerArgs"]
    cls.get_hf_config = lambda self: _hf_config(_STATE["kind"])
    mc = sys.modules.get("sglang.srt.configs.model_config")
    model_config = getattr(mc, "ModelConfig", None) if mc is not None else None
    if isinstance(model_config, type):
        model_config.from_server_args = staticmethod(  # type: ignore[attr-defined]
            lambda *a, **k: _model_config(_STATE["kind"]))
    for name, module in list(sys.modules.items()):
        if name.startswith("sglang") and module is not None and "get_config" in getattr(module, "__dict__", {}):
            if name.endswith("hf_transformers_utils") or name.endswith("server_args"):
                module.__dict__["get_config"] = lambda *a, **k: _hf_config(_STATE["kind"])


def _value(x: Any) -> Any:
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    return repr(x)[:80]


def _one(cls: Any, case: dict[str, Any], runner: Any) -> dict[str, Any]:
    import logging

    logging.disable(logging.CRITICAL)
    _STATE.update(mib=case["total_mib"], cap=tuple(case["capability"]), kind=case["model"])
    try:
        args = cls(model_path="org/model", **case["given"])
        if hasattr(args, "resolve_once"):  # 0.5.19+: construction leaves resolution to resolve_once
            args.resolve_once()
    except (Exception, SystemExit) as e:  # noqa: BLE001 - the release refused or broke: recorded
        return {"error": f"{type(e).__name__}: {e}"[:300]}
    fields: dict[str, Any] = dict(args.resolved_dict()) if hasattr(args, "resolved_dict") else dict(vars(args))
    graph = fields.get("cuda_graph_config")  # 0.5.23: {"decode": {"max_bs", "bs", ...}, "prefill": ...}
    if isinstance(graph, dict) and isinstance(graph.get("decode"), dict):
        fields.setdefault("cuda_graph_max_bs", graph["decode"].get("max_bs"))
        fields.setdefault("cuda_graph_bs", graph["decode"].get("bs"))
    bs = fields.get("cuda_graph_bs")
    mfs = fields.get("mem_fraction_static")
    out = {"mem_fraction_static": None if mfs is None else round(float(mfs), 4),
           "chunked_prefill_size": _value(fields.get("chunked_prefill_size")),
           "cuda_graph_max_bs": _value(fields.get("cuda_graph_max_bs")),
           "cuda_graph_bs_len": len(bs) if isinstance(bs, list) else None,
           "attention_backend": _value(fields.get("attention_backend")),
           "speculative_algorithm": _value(fields.get("speculative_algorithm")),
           "enable_dp_attention": _value(fields.get("enable_dp_attention"))}
    out.update(_runner_capture(args, runner))
    return out


def _runner_capture(args: Any, runner: Any) -> dict[str, Any]:
    """The decode batch sizes the release's ``get_batch_sizes_to_capture`` picks (0.4.3-0.5.2 build the list in
    the runner), with a request pool of 4096 so the pool never trims it."""
    if runner is None or isinstance(args, type):
        return {}
    fake = _Obj({"server_args": args, "req_to_token_pool": _Obj({"size": 4096}), "tp_size": args.tp_size,
                 "is_draft_worker": False, "spec_algorithm": None})
    try:
        got = runner(fake)
    except (Exception, SystemExit) as e:  # noqa: BLE001 - recorded
        return {"runner_error": f"{type(e).__name__}: {e}"[:200]}
    capture = list(got[0] if isinstance(got, tuple) else got)
    return {"runner_bs_len": len(capture), "runner_bs_max": max(capture) if capture else None}


def child_main(spec: dict[str, Any]) -> dict[str, Any]:
    """In the child interpreter: import the release's ServerArgs and resolve every case."""
    here = str(_HERE.parent)
    sys.path[:] = [p for p in sys.path if os.path.realpath(p or ".") != here]
    src = Path(spec["src"]).resolve()
    sys.path.insert(0, str(src))
    import importlib.util

    gen_spec = importlib.util.spec_from_file_location("_sglwrap_generate", _HERE.parent / "generate.py")
    assert gen_spec is not None and gen_spec.loader is not None
    gen = importlib.util.module_from_spec(gen_spec)
    sys.modules["_sglwrap_generate"] = gen
    gen_spec.loader.exec_module(gen)
    gen._install_permissive_import(src)
    import importlib

    mod = importlib.import_module("sglang.srt.server_args")
    cls = mod.__dict__.get("ServerArgs")
    if cls is None or isinstance(cls, gen._Stub):
        raise SystemExit(f"ServerArgs itself failed to define: {gen._CHILD_FAILURES[-5:]}")
    for extra in ("sglang.srt.configs.model_config", "sglang.srt.utils"):
        try:
            importlib.import_module(extra)
        except Exception:  # noqa: BLE001 - absent in some releases
            pass
    runner = None
    try:
        cgr = importlib.import_module("sglang.srt.model_executor.cuda_graph_runner")
        runner = cgr.__dict__.get("get_batch_sizes_to_capture")
        if isinstance(runner, gen._Stub):
            runner = None
    except Exception:  # noqa: BLE001 - older releases build the list elsewhere
        runner = None
    _install()
    results = {c["key"]: _one(cls, c, runner) for c in spec["cases"]}
    return {"results": results, "import_failures": gen._CHILD_FAILURES[:50]}


def run_release(version: str, src_root: Path, python: str = sys.executable, timeout: float = 1800) -> dict[str, Any]:
    """Resolve every grid case with ``version``'s own ServerArgs in a child interpreter (``src_root/version``)."""
    src = src_root / version
    if not (src / "sglang" / "srt" / "server_args.py").is_file():
        raise FileNotFoundError(f"{src}/sglang/srt/server_args.py: not unpacked")
    cases = [{"key": c.key, "total_mib": c.total_mib, "capability": list(c.capability), "model": c.model,
              "given": c.given()} for c in grid()]  # the child's inputs
    with tempfile.TemporaryDirectory(prefix="sglwrap-defaults-") as tmp:
        out = Path(tmp) / "out.json"
        spec = {"src": str(src), "cases": cases, "out": str(out)}
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("SGLANG_", "XDG_", "HF_")) and k not in ("PYTHONPATH", "TMPDIR")}
        env.update(CUDA_VISIBLE_DEVICES="", TOKENIZERS_PARALLELISM="false", HF_HUB_OFFLINE="1",
                   PYTHONDONTWRITEBYTECODE="1", PYTHONWARNINGS="ignore", HOME=tmp)
        spec_file = Path(tmp) / "spec.json"
        spec_file.write_text(json.dumps(spec))
        proc = subprocess.run([python, str(_HERE), "--child", str(spec_file)], capture_output=True, text=True,
                              timeout=timeout, check=False, env=env, cwd=tmp)
        if proc.returncode != 0 or not out.is_file():
            tail = "\n    ".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
            raise RuntimeError(f"sglang {version}: child failed, exit {proc.returncode}:\n    {tail}")
        data: dict[str, Any] = json.loads(out.read_text())
    return data


def table(version: str, data: dict[str, Any]) -> dict[str, Any]:
    """The fixture document: the grid's inputs and what the release resolved for each case."""
    # the inputs of each case follow from its key (:func:`grid`); the table keeps only what the release resolved
    cases = [{"key": c.key, "sglang": data["results"][c.key]} for c in grid()]
    failures = sorted({f"{f['module']}: {f['error'][:120]}" for f in data.get("import_failures", [])})
    return {"version": version, "generator": "python -m sglwrap.sglang.check_defaults", "fields": list(FIELDS),
            "import_failures_stubbed": failures[:30], "cases": cases}


def traits(kind: str) -> Any:
    """The ``ModelTraits`` the rules get for a grid model kind (the same facts the child's mock config holds)."""
    from sglwrap.sglang.resolved import ModelTraits

    archs, _, vision = MODELS[kind]
    if vision is None:
        return ModelTraits(architectures=archs)
    return ModelTraits(architectures=archs, is_multimodal=True,
                       vision_num_hidden_layers=vision.get("num_hidden_layers"),
                       vision_hidden_size=vision.get("hidden_size"))


def rules_row(version: str, case: Case) -> dict[str, Any]:
    """What ``resolve_server_args`` gives for one grid case, in the fixture's fields."""
    from sglwrap.sglang.resolved import GpuInfo, resolve_server_args

    gpu = GpuInfo(total_mib=case.total_mib, capability=case.capability, name=case.gpu, count=case.tp)
    r = resolve_server_args(case.given(), version, gpu, traits(case.model))
    return {"mem_fraction_static": r.mem_fraction_static, "chunked_prefill_size": r.chunked_prefill_size,
            "cuda_graph_max_bs": r.cuda_graph_max_bs if r.decode_cuda_graph else None,
            "cuda_graph_bs_len": len(r.cuda_graph_bs) if r.decode_cuda_graph else None,
            "attention_backend": r.attention_backend}


def compare(doc: dict[str, Any]) -> list[str]:
    """Every field where the rules disagree with the release's own resolution, one line each.

    Compared: mem_fraction_static to 3 decimals; chunked_prefill_size (None/<= 0 is -1, disabled); the number of
    decode batch sizes captured (the release's ``get_batch_sizes_to_capture`` where it ran, else ServerArgs'
    cuda_graph_bs); cuda_graph_max_bs (ServerArgs' value where it builds the list, 0.5.3+; the runner's largest
    captured size where the runner builds it, which is what the rules report up to 0.5.2; up to 0.4.2, where the
    list is built inside ``CudaGraphRunner.__init__``, only that the rules stay within ServerArgs' bound);
    attention_backend where ServerArgs decides it (not None).
    Cases the release refused (an error in ServerArgs) are skipped.
    """
    version = doc["version"]
    by_key = {c.key: c for c in grid()}
    out = []
    for case in doc["cases"]:
        want = case["sglang"]
        if "error" in want:
            continue
        got = rules_row(version, by_key[case["key"]])
        diffs = []
        if abs(float(want["mem_fraction_static"]) - got["mem_fraction_static"]) > 0.0005 + 1e-9:
            diffs.append(f"mem_fraction_static {got['mem_fraction_static']:.4f} != {want['mem_fraction_static']}")
        cps = want["chunked_prefill_size"]
        cps = -1 if cps is None or int(cps) <= 0 else int(cps)
        if cps != got["chunked_prefill_size"]:
            diffs.append(f"chunked_prefill_size {got['chunked_prefill_size']} != {cps}")
        runner_built = want.get("cuda_graph_bs_len") is None and want.get("runner_bs_max") is not None
        list_unknown = want.get("cuda_graph_bs_len") is None and want.get("runner_bs_max") is None
        if list_unknown and want["cuda_graph_max_bs"] is not None and got["cuda_graph_max_bs"] is not None:
            # up to 0.4.2 the list is built inside CudaGraphRunner.__init__: ServerArgs' value only bounds it
            if got["cuda_graph_max_bs"] > int(want["cuda_graph_max_bs"]):
                diffs.append(f"cuda_graph_max_bs {got['cuda_graph_max_bs']} > bound {want['cuda_graph_max_bs']}")
        expect = {"cuda_graph_max_bs": None if list_unknown else
                  (want["runner_bs_max"] if runner_built else want["cuda_graph_max_bs"]),
                  "cuda_graph_bs_len": want.get("runner_bs_len", want["cuda_graph_bs_len"]),
                  "attention_backend": want["attention_backend"]}
        for name, value in expect.items():
            if value is not None and value != got[name]:
                diffs.append(f"{name} {got[name]} != {value}")
        if diffs:
            out.append(f"{version} {case['key']}: " + "; ".join(diffs))
    return out


def dump(doc: dict[str, Any]) -> str:
    """The table as JSON with one case per line (diffable, a third of the indented size)."""
    head = {k: v for k, v in doc.items() if k != "cases"}
    lines = [json.dumps(c, sort_keys=True, separators=(",", ":")) for c in doc["cases"]]
    body = json.dumps(head, indent=1, sort_keys=True)[:-2]
    return body + ',\n "cases": [\n' + ",\n".join(lines) + "\n ]\n}\n"


def main(argv: list[str] | None = None) -> int:
    """Write ``tests/fixtures/sglang_defaults/<version>.json`` for each release (all unpacked ones by default)."""
    ap = argparse.ArgumentParser(prog="python -m sglwrap.sglang.check_defaults")
    ap.add_argument("--src", type=Path, default=Path.home() / ".cache/sglwrap/releases/src")
    ap.add_argument("--versions", nargs="*")
    ap.add_argument("--out", type=Path, default=FIXTURES)
    ap.add_argument("--python", default=sys.executable)
    ns = ap.parse_args(argv)
    from sglwrap.versions import strict as version_key

    versions = ns.versions or sorted((p.name for p in ns.src.iterdir() if p.is_dir()), key=version_key)
    ns.out.mkdir(parents=True, exist_ok=True)
    skipped = {}
    for v in versions:
        try:
            data = run_release(v, ns.src, ns.python)
        except (RuntimeError, FileNotFoundError, subprocess.TimeoutExpired) as e:
            skipped[v] = str(e)
            print(f"sglang {v}: skipped: {e}", file=sys.stderr)
            continue
        doc = table(v, data)
        errors = sum(1 for c in doc["cases"] if "error" in c["sglang"])
        (ns.out / f"{v}.json").write_text(dump(doc))
        print(f"sglang {v}: {len(doc['cases'])} cases, {errors} refused/failed in ServerArgs")
    if skipped:
        (ns.out / "SKIPPED.json").write_text(json.dumps(skipped, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        spec_in = json.loads(Path(sys.argv[2]).read_text())
        result = child_main(spec_in)
        Path(spec_in["out"]).write_text(json.dumps(result))
        sys.exit(0)
    sys.exit(main())
