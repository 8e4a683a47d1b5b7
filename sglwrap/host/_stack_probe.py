"""Run by path with the *target* interpreter: facts about its torch/FlashInfer/SGLang that need an import or a
source read. Prints one JSON object. Standard library only; never creates a CUDA context:
``torch._C._cuda_getArchFlags`` and ``torch.cuda.nccl.version`` read build constants, and FlashInfer is *read*,
not imported (``import flashinfer`` initialises CUDA, FlashInfer 0.7.2 ``flashinfer/jit/core.py:173``).
"""

import ast
import importlib.util
import json
import os
import re
import sys


def _src(module):
    """The source of ``a.b.c`` found through the top-level package only (find_spec on a submodule would
    import its parents, and importing flashinfer or sglang is what this probe must not do)."""
    top, _, rest = module.partition(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for base in spec.submodule_search_locations:
        path = os.path.join(base, *rest.split(".")) if rest else base
        for cand in (path + ".py", os.path.join(path, "__init__.py")):
            if os.path.isfile(cand):
                with open(cand, encoding="utf-8", errors="replace") as fh:
                    return fh.read()
    return None


def _gate(tree, func):
    """The supported_major_versions=[...] list in the body of one generator function."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == func:
            for sub in ast.walk(node):
                if isinstance(sub, ast.keyword) and sub.arg == "supported_major_versions":
                    try:
                        return sorted(int(v) for v in ast.literal_eval(sub.value))
                    except (ValueError, TypeError):
                        return None
            return "ungated"
    return "absent"


def flashinfer():
    out = {}
    src = _src("flashinfer.jit.comm")
    if src is None:
        return {"found": False}
    tree = ast.parse(src)
    for name in ("gen_trtllm_comm_module", "gen_trtllm_mnnvl_comm_module", "gen_pcie_ipc_comm_module"):
        out[name] = _gate(tree, name)
    init = _src("flashinfer.comm") or ""
    out["pcie_ipc_api"] = "PcieIpcAllReduceWorkspace" in init
    out["found"] = True
    return out


def sglang():
    out: dict = {}
    fusion = _src("sglang.srt.layers.flashinfer_comm_fusion")
    if fusion is not None:
        out["fusion_requires_sm90_sm10x"] = "requires SM90 or SM10X" in fusion
    table = _src("sglang.srt.distributed.device_communicators.all_reduce_utils")
    if table is not None:
        m = re.search(r"TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES\s*=\s*\{(.*?)\n\}", table, re.S)
        if m:
            out["symm_mem_majors"] = sorted(int(k) for k in re.findall(r"^\s{4}(\d+)\s*:", m.group(1), re.M))
            out["symm_mem_world_sizes"] = sorted({int(k) for k in re.findall(r"^\s{8}(\d+)\s*:", m.group(1), re.M)})
    return out


def torch_facts():
    try:
        import torch
    except Exception as e:  # a broken install is a fact too
        return {"error": f"{type(e).__name__}: {e}"}
    out: dict = {"version": torch.__version__, "cuda": torch.version.cuda}
    flags = getattr(torch._C, "_cuda_getArchFlags", None)
    try:
        out["arch_list"] = flags().split() if flags is not None and torch.version.cuda else []
    except Exception as e:
        out["arch_list_error"] = str(e)
    try:
        out["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
    except Exception as e:
        out["nccl_error"] = str(e)
    cpp = _src("torch.utils.cpp_extension") or ""
    m = re.search(r"supported_arches\s*=\s*\[(.*?)\]", cpp, re.S)
    if m:
        out["cpp_extension_arches"] = re.findall(r"'([0-9.]+a?)'", m.group(1))
    return out


def main():
    result = {"python": sys.executable, "flashinfer": flashinfer(), "sglang": sglang()}
    if "--no-torch" not in sys.argv:
        result["torch"] = torch_facts()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
