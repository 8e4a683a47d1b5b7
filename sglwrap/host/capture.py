"""Capture this machine's HostFacts to a JSON fixture: ``python3 -m sglwrap.host.capture --out FILE``.

Imports only the standard library and pynvml (no structlog, no yaml), so it runs on a bare GPU machine with
``PYTHONPATH`` set to the repository root. NVML makes no CUDA context; the stack probe runs in a subprocess
that reads build constants and sources only.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import socket
import sys
from collections.abc import Sequence

from sglwrap.host.nvml import probe_nvml
from sglwrap.host.probe import with_local_stack
from sglwrap.record import replace


def main(argv: Sequence[str] | None = None) -> int:
    """Write the HostFacts of this machine to ``--out`` (or stdout) and return 0."""
    ap = argparse.ArgumentParser(prog="python3 -m sglwrap.host.capture", allow_abbrev=False)
    ap.add_argument("--out", help="file to write (default: stdout)")
    ap.add_argument("--python", default=sys.executable, help="interpreter whose stack to describe")
    ap.add_argument("--origin", default="", help="where this capture comes from (kept in provenance)")
    ap.add_argument("--no-stack-probe", action="store_true", help="package versions only, no import probe")
    args = ap.parse_args(argv)
    facts = probe_nvml()
    facts = with_local_stack(facts, args.python, probe=not args.no_stack_probe)
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    where = f"captured {when} on {socket.gethostname()} ({platform.platform()}) by sglwrap.host.capture"
    facts = replace(
        facts,
        source=f"capture:{socket.gethostname()}",
        provenance="; ".join(p for p in (args.origin, where, facts.provenance) if p),
        probes={**facts.probes, "env": _env()},
    )
    text = facts.to_json() + "\n"
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write(text)
        sys.stderr.write(f"wrote {args.out}: {len(facts.gpus)} GPU(s), driver {facts.driver_version}\n")
    else:
        sys.stdout.write(text)
    if not facts.gpus:
        why = "; ".join(facts.notes) or "NVML reported no GPU"
        sys.stderr.write(f"warning: 0 GPUs captured ({why}); preflight --assume with this file blocks, as it "
                         "would live on this host: capture on the GPU machine, with its driver loaded\n")
    return 0


def _env() -> dict[str, str]:
    keep = ("NCCL_", "CUDA_", "TORCH_", "NVSHMEM_", "PYTORCH_")
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(keep) and "TOKEN" not in k}


if __name__ == "__main__":
    raise SystemExit(main())
