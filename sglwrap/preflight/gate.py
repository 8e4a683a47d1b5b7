"""The preflight gate of ``sglwrap launch``: gather facts, run the checks, block (exit 78) or hand on the
downgraded profile, and give launch the record for its manifest."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sglwrap.errors import ConfigError
from sglwrap.host.facts import HostFacts
from sglwrap.host.probe import gather_facts
from sglwrap.preflight.model import Status
from sglwrap.preflight.runner import run_preflight

if TYPE_CHECKING:
    from sglwrap.profiles import Profile
    from sglwrap.sglang.cmdline import SglangCmdline


def preflight_gate(
    profile: Profile,
    cmd: SglangCmdline,
    *,
    assume: str | None,
    assume_stack: str | None,
    python: str,
    environ: Mapping[str, str],
    force: bool = False,
) -> tuple[Profile, HostFacts, dict[str, Any]]:
    """(the profile that launches, the facts used, the manifest record with the memory plan under ``memory``).
    Blocked -> ConfigError (exit 78), unless ``force``, in which case the blocks are recorded and the launch goes
    on."""
    facts = gather_facts(assume, assume_stack, python=python, environ=environ)
    result = run_preflight(facts, profile, cmd, flags=cmd.table, environ=environ, force=force, deep=True)
    record = result.manifest()
    blocks = [v for v in result.checks if v.status is Status.BLOCK]
    if blocks and not force:
        lines = "\n".join(f"  {v.id}: {v.reason}\n    fix: {v.fix}" for v in blocks)
        err = ConfigError(f"preflight blocked the launch (nothing was started):\n{lines}\n"
                          "(`sglwrap preflight` shows every check; --force launches anyway)")
        mem = record.pop("memory", None) if "memory" in record else result.memory
        err.gates = {"memory": mem or {"skipped": "the memory check did not run"},  # type: ignore[attr-defined]
                     "preflight": record}
        raise err
    record["forced"] = bool(blocks)
    record["memory"] = result.memory
    return result.profile or profile, facts, record
