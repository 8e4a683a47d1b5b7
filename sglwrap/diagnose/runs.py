"""Several inputs → runs: files of one launch (the nodes of a multi-node run) are diagnosed together, files of
different launches apart, so one run's numbers never leak into another's fix.

Two files are read as one run only when nothing tells them apart and something ties them together:
- launch identity: the model path and the server args that define the launch (minus the node rank), and the profile
  hash its sglwrap worker-env lines carry (single-node launches); the model classes of "Load weight end. type=…";
- node: one node cannot log the same launch twice, so the same node rank, or the same rank label, is another launch;
- time: they started within ``SAME_RUN_S`` of each other;
- processes: the worker pids of a single-node launch are one process tree, so disjoint pid sets are two launches;
- outcome: a file whose server came up and one whose launch failed are not the same launch.
Files that show no launch identity (excerpts) join a run only when both carry timestamps that put them in the same
window; otherwise each is a run of its own. Runs keep the order of the command line.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from sglwrap.diagnose.sources import Manifest
from sglwrap.diagnose.timeline import NodeLog
from sglwrap.record import Record, field

SAME_RUN_S: Final = 15 * 60
IDENTITY_ARGS: Final = (
    "model_path", "tp_size", "pp_size", "dp_size", "mem_fraction_static", "quantization", "kv_cache_dtype",
    "context_length", "chunked_prefill_size", "cuda_graph_max_bs", "nnodes", "dist_init_addr",
    "speculative_algorithm", "dtype", "page_size",
)


class Run(Record, frozen=False):
    """The files (node logs) and manifests of one launch."""

    nodes: list[NodeLog] = field(default_factory=list)
    manifests: list[Manifest] = field(default_factory=list)


def _multi_node(node: NodeLog) -> bool:
    return node.server_args.get("dist_init_addr") is not None and str(node.server_args.get("nnodes", 1)) not in (
        "1", "1.0", "None")


def identity(node: NodeLog) -> tuple[object, ...] | None:
    """What defines the launch a file logged; None when the file shows none of it. The profile hash counts only for
    single-node launches: the nodes of one multi-node launch (same --dist-init-addr and --nnodes, other node ranks)
    stay one run even when their profiles differ, because that difference is what diagnose must report."""
    args = tuple(node.server_args.get(k) for k in IDENTITY_ARGS)
    hashes = tuple(sorted({w.hash for w in node.workers if w.hash}))
    if not any(a is not None for a in args) and not hashes:
        return None
    return args if _multi_node(node) else args + hashes


def _node_rank(node: NodeLog) -> object:
    return node.server_args.get("node_rank")


def _start(node: NodeLog) -> datetime | None:
    if not node.first_ts:
        return None
    try:
        return datetime.fromisoformat(node.first_ts.replace(",", ".")[:19])
    except ValueError:
        return None


def _outcome(node: NodeLog) -> str:
    """"up", "failed" or "unknown" for one file on its own."""
    from sglwrap.diagnose.cause import fatal_failures

    if fatal_failures((node,)):
        return "failed"
    return "up" if node.came_up else "unknown"


def same_launch(a: NodeLog, b: NodeLog) -> bool:
    """Whether two files can be logs of one launch (see the module docstring)."""
    ia, ib = identity(a), identity(b)
    if ia is not None and ib is not None and ia != ib:
        return False
    if ia is not None and _node_rank(a) == _node_rank(b):
        return False  # one node cannot log the same launch twice: a second file of it is another launch
    if {r.label for r in a.ranks} & {r.label for r in b.ranks}:
        return False
    if a.model_types and b.model_types and not set(a.model_types) & set(b.model_types):
        return False
    sa, sb = _start(a), _start(b)
    if sa is not None and sb is not None and abs((sa - sb).total_seconds()) > SAME_RUN_S:
        return False
    if (ia is None or ib is None) and (sa is None or sb is None):
        return False  # an excerpt with nothing that ties it to the other file
    pa, pb = {w.pid for w in a.workers if w.pid}, {w.pid for w in b.workers if w.pid}
    if pa and pb and not pa & pb and not (_multi_node(a) or _multi_node(b)):
        return False
    oa, ob = _outcome(a), _outcome(b)
    return not ({oa, ob} == {"up", "failed"})


def group(nodes: list[NodeLog], manifests: list[Manifest]) -> list[Run]:
    """Runs in command-line order; manifests go to the run whose workers carry their profile hash, or to the first."""
    runs: list[Run] = []
    for node in nodes:
        run = next((r for r in runs if all(same_launch(n, node) for n in r.nodes)), None)
        if run is None:
            runs.append(run := Run())
        run.nodes.append(node)
    if not runs:
        runs.append(Run())
    for m in manifests:
        target = next((r for r in runs if any(w.hash == m.profile_hash for n in r.nodes for w in n.workers)), None)
        (target or runs[0]).manifests.append(m)
    return runs
