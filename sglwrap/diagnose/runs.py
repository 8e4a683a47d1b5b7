"""Several inputs → runs: files of one launch (the nodes of a multi-node run) are diagnosed together, files of
different launches apart, so one run's numbers never leak into another's fix.

Identity of a file: the model path and the server args that define the launch (minus the node rank), the profile
hash its sglwrap worker-env lines carry, its node rank, and when it started. Two files belong to one run when their
identities agree, their node ranks differ, and they started within ``SAME_RUN_S`` of each other. A file that shows
no identity (an excerpt) joins the only run there is, or stands alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from sglwrap.diagnose.sources import Manifest
from sglwrap.diagnose.timeline import NodeLog

SAME_RUN_S: Final = 15 * 60
IDENTITY_ARGS: Final = (
    "model_path", "tp_size", "pp_size", "dp_size", "mem_fraction_static", "quantization", "kv_cache_dtype",
    "context_length", "chunked_prefill_size", "cuda_graph_max_bs", "nnodes", "dist_init_addr",
    "speculative_algorithm", "dtype", "page_size",
)


@dataclass
class Run:
    """The files (node logs) and manifests of one launch."""

    nodes: list[NodeLog] = field(default_factory=list)
    manifests: list[Manifest] = field(default_factory=list)


def identity(node: NodeLog) -> tuple[object, ...] | None:
    """What defines the launch a file logged; None when the file shows none of it. The profile hash counts only for
    single-node launches: the nodes of one multi-node launch (same --dist-init-addr and --nnodes, other node ranks)
    stay one run even when their profiles differ, because that difference is what diagnose must report."""
    args = tuple(node.server_args.get(k) for k in IDENTITY_ARGS)
    hashes = tuple(sorted({w.hash for w in node.workers if w.hash}))
    if not any(a is not None for a in args) and not hashes:
        return None
    multi = node.server_args.get("dist_init_addr") is not None and str(node.server_args.get("nnodes", 1)) not in (
        "1", "None")
    return args if multi else args + hashes


def _node_rank(node: NodeLog) -> object:
    return node.server_args.get("node_rank")


def _start(node: NodeLog) -> datetime | None:
    if not node.first_ts:
        return None
    try:
        return datetime.fromisoformat(node.first_ts.replace(",", ".")[:19])
    except ValueError:
        return None


def _fits(run: Run, node: NodeLog, ident: tuple[object, ...]) -> bool:
    head = run.nodes[0]
    if identity(head) != ident:
        return False
    if any(_node_rank(n) == _node_rank(node) for n in run.nodes):
        return False  # one node cannot log the same launch twice: a second file of it is another launch
    a, b = _start(head), _start(node)
    return a is None or b is None or abs((a - b).total_seconds()) <= SAME_RUN_S


def group(nodes: list[NodeLog], manifests: list[Manifest]) -> list[Run]:
    """Runs in input order; manifests go to the run whose workers carry their profile hash, or to the only run."""
    runs: list[Run] = []
    loose: list[NodeLog] = []
    for node in nodes:
        ident = identity(node)
        if ident is None:
            loose.append(node)
            continue
        run = next((r for r in runs if _fits(r, node, ident)), None)
        if run is None:
            runs.append(run := Run())
        run.nodes.append(node)
    if len(runs) == 1:
        runs[0].nodes.extend(loose)
    elif len(runs) == 0 and loose and len(loose) <= 1:
        runs.append(Run(nodes=loose))
    elif len(runs) == 0:
        runs.append(Run(nodes=loose))  # excerpts without identity: read together, as before
    else:
        runs.extend(Run(nodes=[n]) for n in loose)
    if not runs:
        runs.append(Run())
    for m in manifests:
        target = next((r for r in runs if any(w.hash == m.profile_hash for n in r.nodes for w in n.workers)), None)
        (target or runs[0]).manifests.append(m)
    return runs
