"""What a rehearsal runs: the launch plan's argv with ``--load-format dummy`` (and a private loopback port)
appended, the refusals for what cannot be rehearsed here, and the default timeout sized from the model.

Appending works because SGLang parses its argv with argparse, where the last occurrence of an option wins; the
user's own arguments and the profile's stay exactly as the launch would pass them.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Mapping
from typing import Any, Final

from sglwrap.errors import ConfigError, UsageError
from sglwrap.host.facts import HostFacts
from sglwrap.record import Record
from sglwrap.sglang.cmdline import SglangCmdline

GIB: Final = 2**30
# Default timeout: SGLang's import and JIT warm-up, then per layer (model construction, graph capture walks every
# layer once per captured batch size) and per GiB of weights per rank (dummy weights are generated on the GPU).
BASE_TIMEOUT_S: Final = 300
PER_LAYER_S: Final = 4
PER_GIB_S: Final = 2
MAX_TIMEOUT_S: Final = 1800
UNKNOWN_MODEL_TIMEOUT_S: Final = 600


class Rehearsal(Record):
    """A launch plan turned into a rehearsal: what runs, where it answers, and how long it may take."""

    argv: tuple[str, ...]  # the launch's argv followed by ``added``
    added: tuple[str, ...]
    host: str
    port: int
    timeout_s: float
    timeout_why: str
    layers: int | None
    api_key: str | None
    skip_tokenizer_init: bool
    is_embedding: bool
    notes: tuple[str, ...] = ()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


def refuse(cmd: SglangCmdline, facts: HostFacts | None, *, assume: str | None) -> None:
    """Raise when this launch cannot be rehearsed on this machine: ``--assume`` (64), multi-node, no GPU for a
    CUDA launch, or GPUs another process holds (78)."""
    if assume is not None:
        raise UsageError(f"rehearse: --assume {assume} plans for GPUs that are not here, and a rehearsal runs SGLang "
                         "on this machine's GPUs; drop --assume (use `sglwrap launch --dry-run --assume` to plan)")
    refuse_early(cmd)
    refuse_gpus(cmd, facts)


def refuse_early(cmd: SglangCmdline) -> None:
    """What the command line alone rules out (before preflight runs): a multi-node launch (78)."""
    if cmd.nnodes > 1:
        raise ConfigError(f"rehearse: --nnodes {cmd.nnodes}: a multi-node launch cannot be rehearsed yet (node "
                          f"{cmd.node_rank} alone would wait for peers that are not rehearsing, and starting every "
                          "node together is not supported); rehearse each node's share with --nnodes 1 and its "
                          "--tp-size, or launch without --rehearse")


def refuse_gpus(cmd: SglangCmdline, facts: HostFacts | None) -> None:
    """No GPU for a CUDA launch, or a GPU it takes held by another process (78), as NVML reports them."""
    device = (cmd.device or "cuda").lower()
    if device != "cuda" or facts is None:
        return  # --device cpu/xpu/npu: nothing NVML can tell; SGLang itself will say
    if not facts.gpus:
        why = "; ".join(facts.notes) or "NVML sees no GPU"
        raise ConfigError(f"rehearse: no NVIDIA GPU here ({why}); a rehearsal runs SGLang on this machine's GPUs "
                          "(for a CPU run pass --device cpu)")
    used = gpus_used(cmd, facts)
    held = [(g, p) for g in used for p in g.processes]
    if held:
        what = "; ".join(f"GPU {g.index} ({g.name}) by pid {p.pid}"
                         f"{' (' + p.name + ')' if p.name else ''}"
                         f"{f', {p.used_bytes / GIB:.1f} GiB' if p.used_bytes else ''}" for g, p in held)
        raise ConfigError(f"rehearse: GPUs are held by another process: {what}; a rehearsal beside it would "
                          "measure and fail on memory the real launch will not have (stop that process, or point "
                          "CUDA_VISIBLE_DEVICES at free GPUs)")


def gpus_used(cmd: SglangCmdline, facts: HostFacts) -> list[Any]:
    """The GPUs this launch takes on this node: --base-gpu-id onwards, tp x pp x dp of them (at least one)."""
    base = int(cmd.get("base_gpu_id", 0) or 0)
    step = int(cmd.get("gpu_id_step", 1) or 1)
    need = max(1, cmd.gpus_needed // max(1, cmd.nnodes))
    wanted = {base + i * step for i in range(need)}
    return [g for g in facts.gpus if g.index in wanted]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def additions(cmd: SglangCmdline, *, port: int, layers: int | None) -> tuple[list[str], list[str]]:
    """(arguments appended to the launch's, notes). Dummy weights, loopback host, a private port; ``layers``
    overrides ``num_hidden_layers`` through SGLang's own ``--json-model-override-args`` (merged with the user's)."""
    notes: list[str] = []
    load_flag = cmd.flag_for("load_format") or "--load-format"
    added = [load_flag, "dummy", "--host", "127.0.0.1", "--port", str(port)]
    given = cmd.given_values.get("load_format")
    if given not in (None, "auto", "dummy"):
        notes.append(f"your --load-format {given} is replaced by dummy for the rehearsal")
    if cmd.host not in ("127.0.0.1", "localhost"):
        notes.append(f"the rehearsal listens on 127.0.0.1:{port}, not on your --host {cmd.host} (random weights "
                     "must not answer the network)")
    if layers is not None:
        if layers < 1:
            raise UsageError(f"rehearse: --layers {layers}: expected a number of layers >= 1")
        flag = cmd.flag_for("json_model_override_args")
        if flag is None:
            raise UsageError(f"rehearse: --layers needs SGLang's --json-model-override-args, which SGLang "
                             f"{cmd.version} does not have")
        raw = cmd.given_values.get("json_model_override_args") or "{}"
        try:
            override = json.loads(str(raw))
        except json.JSONDecodeError:
            raise UsageError(f"rehearse: --json-model-override-args {raw!r} is not JSON, so --layers cannot be "
                             "merged into it") from None
        if not isinstance(override, dict):
            raise UsageError("rehearse: --json-model-override-args is not a JSON object; --layers cannot merge")
        override["num_hidden_layers"] = layers
        added += [flag, json.dumps(override, sort_keys=True)]
        notes.append(f"--layers {layers}: the model is built with {layers} layer(s); the memory numbers below "
                     "(weights, KV tokens, graph memory) do not hold for the real model")
    return added, notes


def model_layers(memory: Mapping[str, Any] | None) -> int | None:
    """``num_hidden_layers`` as the accountant read it from the model's config, if it planned."""
    model = (memory or {}).get("model") or {}
    layers = model.get("layers")
    return int(layers) if isinstance(layers, int) and layers > 0 else None


def default_timeout(memory: Mapping[str, Any] | None, layers: int | None) -> tuple[float, str]:
    """(seconds, why): 300 s for SGLang's start, JIT and warm-up, + 4 s per layer + 2 s per GiB of weights per
    rank, at most 30 min; 600 s when the accountant could not read the model."""
    n_layers = layers or model_layers(memory)
    weights = (memory or {}).get("weights_bytes_per_rank")
    if n_layers is None or not isinstance(weights, int):
        return float(UNKNOWN_MODEL_TIMEOUT_S), (f"{UNKNOWN_MODEL_TIMEOUT_S} s: the model's size is unknown "
                                                "(the accountant did not plan it)")
    gib = weights / GIB
    if layers is not None and model_layers(memory):
        gib = gib * layers / (model_layers(memory) or layers)
    total = min(MAX_TIMEOUT_S, round(BASE_TIMEOUT_S + PER_LAYER_S * n_layers + PER_GIB_S * gib))
    why = (f"{total} s = {BASE_TIMEOUT_S} s start + {PER_LAYER_S} s x {n_layers} layers + {PER_GIB_S} s x "
           f"{gib:.1f} GiB weights per rank" + (f", capped at {MAX_TIMEOUT_S} s" if total == MAX_TIMEOUT_S else ""))
    return float(total), why


def build(launch_argv: list[str], cmd: SglangCmdline, memory: Mapping[str, Any] | None, *,
          layers: int | None = None, timeout_s: float | None = None, port: int | None = None) -> Rehearsal:
    """The rehearsal of a launch whose argv is ``launch_argv`` (the plan's, unchanged) and cmdline ``cmd``."""
    if timeout_s is not None and not timeout_s > 0:
        raise UsageError(f"rehearse: --timeout {timeout_s:g}: expected seconds > 0")
    port = port or free_port()
    added, notes = additions(cmd, port=port, layers=layers)
    if timeout_s is None:
        timeout, why = default_timeout(memory, layers)
    else:
        timeout, why = timeout_s, f"{timeout_s:g} s (--timeout)"
    key = cmd.given_values.get("api_key")
    return Rehearsal(argv=(*launch_argv, *added), added=tuple(added), host="127.0.0.1", port=port,
                     timeout_s=timeout, timeout_why=why, layers=layers, api_key=str(key) if key else None,
                     skip_tokenizer_init=bool(cmd.get("skip_tokenizer_init")),
                     is_embedding=bool(cmd.get("is_embedding")), notes=tuple(notes))
