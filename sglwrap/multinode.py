"""Multi-node launches: each node runs the same command but its ``--node-rank`` (research-deploy §4).

With ``--nnodes N`` (N > 1) and no ``--node-rank``, the rank comes from the first orchestrator whose variables
are present — Slurm (``SLURM_NODEID``, else ``SLURM_PROCID``), a Kubernetes LeaderWorkerSet
(``LWS_WORKER_INDEX``) or SkyPilot (``SKYPILOT_NODE_RANK``) — and a missing ``--dist-init-addr`` becomes the
leader's address (first Slurm node, ``LWS_LEADER_ADDRESS``, first of ``SKYPILOT_NODE_IPS``) on port
``$SGLWRAP_DIST_INIT_PORT`` (20000). Without SGLang's own default (rank 0 everywhere) every node would wait
for the others forever, so a multi-node launch with no rank from anywhere is refused (exit 78).

``--use-ray`` is refused while the profile sets variables: SGLang's Ray schedulers are actors that take the
raylet's environment, never this process's, so neither the environment nor the sitecustomize reaches them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Final

from sglwrap.errors import ConfigError
from sglwrap.record import Record
from sglwrap.sglang.cmdline import SglangCmdline

DIST_PORT_VAR: Final = "SGLWRAP_DIST_INIT_PORT"
DEFAULT_DIST_PORT: Final = 20000  # the port SGLang's multi-node docs use for --dist-init-addr


class Placement(Record):
    """Where this node sits in a multi-node launch, and which source said so."""

    sglang_args: tuple[str, ...]  # the user's args plus anything derived (appended)
    nnodes: int
    node_rank: int
    dist_init_addr: str | None
    source: str  # e.g. "--node-rank", "Slurm SLURM_NODEID", "single node"
    added: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, object]:
        """For ``--dry-run --json`` and the log."""
        return {"nnodes": self.nnodes, "node_rank": self.node_rank, "dist_init_addr": self.dist_init_addr,
                "source": self.source, "added": list(self.added), "notes": list(self.notes)}


class _Orchestrator(Record):
    name: str
    rank_vars: tuple[str, ...]
    size_vars: tuple[str, ...]
    leader: Callable[[Mapping[str, str]], str | None]


def first_slurm_host(nodelist: str) -> str | None:
    """The first host of a Slurm hostlist: ``gpu[003-010,015],cpu1`` → ``gpu003``."""
    m = re.match(r"\s*([^,\[\s]+)(?:\[([^\]]+)\])?", nodelist)
    if not m:
        return None
    prefix, ranges = m.group(1), m.group(2)
    if not ranges:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0]


def _slurm_leader(env: Mapping[str, str]) -> str | None:
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    return first_slurm_host(nodelist) if nodelist else None


def _skypilot_leader(env: Mapping[str, str]) -> str | None:
    ips = env.get("SKYPILOT_NODE_IPS", "").split()
    return ips[0] if ips else None


ORCHESTRATORS: Final = (
    _Orchestrator("Slurm", ("SLURM_NODEID", "SLURM_PROCID"), ("SLURM_NNODES", "SLURM_JOB_NUM_NODES"), _slurm_leader),
    _Orchestrator("LeaderWorkerSet", ("LWS_WORKER_INDEX",), ("LWS_GROUP_SIZE",),
                  lambda env: env.get("LWS_LEADER_ADDRESS") or None),
    _Orchestrator("SkyPilot", ("SKYPILOT_NODE_RANK",), ("SKYPILOT_NUM_NODES",), _skypilot_leader),
)


def _int(name: str, raw: object, allowed: str) -> int:
    try:
        return int(str(raw).strip())
    except ValueError:
        raise ConfigError(f"{name}={raw!r}: expected {allowed}") from None


def _detect(environ: Mapping[str, str]) -> tuple[_Orchestrator, str, int] | None:
    """The first orchestrator that gives a rank: (it, the variable used, the rank)."""
    for orch in ORCHESTRATORS:
        present = [(v, environ[v]) for v in orch.rank_vars if environ.get(v, "").strip()]
        if not present:
            continue
        ranks = {v: _int(v, raw, "a node index 0, 1, 2 …") for v, raw in present}
        if orch.name == "Slurm" and len(set(ranks.values())) > 1:
            raise ConfigError(
                f"SLURM_PROCID={ranks['SLURM_PROCID']} but SLURM_NODEID={ranks['SLURM_NODEID']}: Slurm started more "
                "than one task per node, so several SGLang servers would start on each node; run one task per "
                "node (srun --ntasks-per-node=1) or pass --node-rank yourself")
        var, rank = present[0][0], ranks[present[0][0]]
        return orch, var, rank
    return None


def _env_size(orch: _Orchestrator, environ: Mapping[str, str]) -> tuple[str, int] | None:
    for v in orch.size_vars:
        if environ.get(v, "").strip():
            return v, _int(v, environ[v], "a node count 1, 2, …")
    return None


def place(cmd: SglangCmdline, environ: Mapping[str, str]) -> Placement:
    """This node's rank and rendezvous: the user's flags win; else derived from the orchestrator's variables."""
    values = cmd.given_values
    args = cmd.argv
    nnodes = _int("--nnodes", values.get("nnodes") or 1, "a node count 1, 2, …")
    if nnodes < 1:
        raise ConfigError(f"--nnodes {nnodes}: expected a node count 1, 2, …")
    found = _detect(environ)
    notes: list[str] = []
    if values.get("node_rank") is not None:
        rank = _int("--node-rank", values["node_rank"], "a node index 0, 1, 2 …")
        if found and found[2] != rank:
            notes.append(f"--node-rank {rank} given; {found[0].name} says {found[1]}={found[2]} (yours wins)")
        return Placement(args, nnodes, rank, _str(values.get("dist_init_addr")), "--node-rank", notes=tuple(notes))
    if nnodes == 1:
        if found and (size := _env_size(found[0], environ)) and size[1] > 1:
            notes.append(f"{found[0].name} has {size[0]}={size[1]} but --nnodes is not given: each node runs its "
                         "own single-node server")
        return Placement(args, 1, 0, _str(values.get("dist_init_addr")), "single node", notes=tuple(notes))
    if found is None:
        raise ConfigError(
            f"--nnodes {nnodes} needs this node's --node-rank, and none was found: pass --node-rank, or run under "
            "Slurm (SLURM_NODEID), a LeaderWorkerSet (LWS_WORKER_INDEX) or SkyPilot (SKYPILOT_NODE_RANK). "
            "Without it every node would be rank 0 and wait for the others forever")
    orch, var, rank = found
    size = _env_size(orch, environ)
    if size is not None and size[1] != nnodes:
        raise ConfigError(f"--nnodes {nnodes} but {size[0]}={size[1]}: give --nnodes the number of nodes "
                          f"{orch.name} started, or pass --node-rank yourself")
    if not 0 <= rank < nnodes:
        raise ConfigError(f"{var}={rank} is not a node rank for --nnodes {nnodes} (allowed 0-{nnodes - 1})")
    added = ["--node-rank", str(rank)]
    addr = _str(values.get("dist_init_addr"))
    if addr is None:
        leader = orch.leader(environ)
        if leader is None:
            raise ConfigError(f"--nnodes {nnodes} needs --dist-init-addr HOST:PORT (rank 0's address), and "
                              f"{orch.name} does not say which node leads; pass --dist-init-addr")
        port = _dist_port(environ)
        addr = f"[{leader}]:{port}" if ":" in leader else f"{leader}:{port}"
        added += ["--dist-init-addr", addr]
    return Placement(args + tuple(added), nnodes, rank, addr, f"{orch.name} {var}", tuple(added), tuple(notes))


def _dist_port(environ: Mapping[str, str]) -> int:
    raw = environ.get(DIST_PORT_VAR, "").strip()
    if not raw:
        return DEFAULT_DIST_PORT
    port = _int(DIST_PORT_VAR, raw, "a TCP port number 1-65535")
    if not 0 < port < 65536:
        raise ConfigError(f"{DIST_PORT_VAR}={raw!r}: expected a TCP port number 1-65535")
    return port


def _str(value: object) -> str | None:
    return None if value is None or value == "" else str(value)


def refuse_ray_without_env(cmd: SglangCmdline, env_set: Mapping[str, str], profile_name: str, *,
                           force: bool) -> str | None:
    """ConfigError for ``--use-ray`` when the profile sets variables (unless ``force``); a warning text if forced."""
    if cmd.get("use_ray") is not True or not env_set:
        return None
    names = ", ".join(sorted(env_set))
    msg = (f"--use-ray: SGLang runs its schedulers as Ray actors, which get the raylet's environment, not this "
           f"process's, so profile {profile_name!r} ({names}) would not reach the GPU workers. Launch one sglwrap "
           "per node with --nnodes/--node-rank instead, or start the Ray cluster with these variables set "
           "(`ray start` in the same environment) and pass --force")
    if not force:
        raise ConfigError(msg)
    return msg.split(". Launch")[0] + " (--force given: launching anyway)"
