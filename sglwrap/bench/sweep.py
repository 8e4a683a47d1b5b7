"""``--sweep``: a grid of NCCL settings on top of a base profile, and ``--write-profile``: the winner as YAML.

The grid's dimensions are variables with candidate values (``channels`` sets ``NCCL_MIN_NCHANNELS`` and
``NCCL_MAX_NCHANNELS`` together). By default each value is tried alone on top of the base (one factor at a
time: a handful of runs); ``--sweep-full`` tries the cartesian product. Every value is validated by the same
registry as profiles (``sglwrap.envvars``), so a sweep point is exactly a profile that could be written down.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from sglwrap import envvars
from sglwrap.bench.output import publish
from sglwrap.bench.results import Winner
from sglwrap.bench.runner import Config
from sglwrap.bench.sizes import human
from sglwrap.errors import ConfigError, UsageError
from sglwrap.profiles import EnvSetting, Profile, load_profile
from sglwrap.record import replace

CHANNELS = "channels"
# (dimension, values): channel count, Simple buffer size, protocol, algorithm, P2P reach (LOC = never P2P, the
# shared-memory path of PCIe boxes whose GPUs sit under different root ports; SYS = P2P across the whole host).
DEFAULT_GRID: tuple[tuple[str, tuple[str, ...]], ...] = (
    (CHANNELS, ("2", "8", "32")),
    ("NCCL_BUFFSIZE", ("131072",)),
    ("NCCL_PROTO", ("LL", "Simple")),
    ("NCCL_ALGO", ("Ring", "Tree")),
    ("NCCL_P2P_LEVEL", ("LOC",)),
)
SHORT = {CHANNELS: "ch", "NCCL_BUFFSIZE": "buf", "NCCL_PROTO": "proto", "NCCL_ALGO": "algo",
         "NCCL_P2P_LEVEL": "p2p", "NCCL_P2P_DISABLE": "p2pdisable"}


def parse_grid(specs: Sequence[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``--sweep-var NAME=v1,v2`` (repeatable) -> dimensions; none given -> ``DEFAULT_GRID``."""
    if not specs:
        return DEFAULT_GRID
    dims: list[tuple[str, tuple[str, ...]]] = []
    for spec in specs:
        name, sep, values = spec.partition("=")
        name = name.strip()
        vals = tuple(v.strip() for v in values.split(",") if v.strip())
        if not sep or not name or not vals:
            raise UsageError(f"--sweep-var {spec!r}: expected NAME=v1,v2 (NAME an NCCL variable or 'channels')")
        dims.append((name, vals))
    return tuple(dims)


def _env_for(dim: str, value: str) -> dict[str, str]:
    names = ("NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS") if dim == CHANNELS else (dim,)
    out = {}
    for name in names:
        var = envvars.REGISTRY.get(name)
        if var is None:
            hint = envvars.suggest(name)
            raise UsageError(f"--sweep-var {dim}: unknown variable" + (f"; did you mean {hint}?" if hint else ""))
        try:
            out[name] = envvars.canonical_value(var, value)
        except envvars.EnvValueError as e:
            raise UsageError(f"--sweep-var {dim}={value}: {e.problem}. Allowed: {e.allowed}") from None
    return out


def _label(dim: str, value: str) -> str:
    return f"{SHORT.get(dim, dim.removeprefix('NCCL_').lower())}={value}"


def grid_points(dims: Sequence[tuple[str, Sequence[str]]], *, full: bool) -> list[tuple[str, dict[str, str]]]:
    """(label, env overrides) per sweep point: one factor at a time, or the cartesian product."""
    if not full:
        return [(_label(d, v), _env_for(d, v)) for d, vals in dims for v in vals]
    out = []
    for combo in itertools.product(*[[(d, v) for v in vals] for d, vals in dims]):
        env: dict[str, str] = {}
        for d, v in combo:
            env.update(_env_for(d, v))
        out.append(("+".join(_label(d, v) for d, v in combo), env))
    return out


def sweep_configs(base: Profile, dims: Sequence[tuple[str, Sequence[str]]], *, full: bool) -> list[Config]:
    """The sweep points as configurations: ``base`` with the point's variables set (not forced)."""
    out = []
    for label, overrides in grid_points(dims, full=full):
        env = dict(base.env)
        env.update({k: EnvSetting(v) for k, v in overrides.items()})
        name = f"{base.name}+{label}"
        prof = replace(base, name=name, env=env, description=f"{base.name} with {label} (bench-comm sweep)")
        out.append(Config(name=name, profile=prof, base=base.name, overrides=overrides))
    return out


def user_profile_dir(environ: Mapping[str, str] | None = None) -> Path:
    """The first user profile directory: ``$SGLWRAP_PROFILE_PATH``'s first entry, else ~/.config/sglwrap/profiles."""
    env = os.environ if environ is None else environ
    first = [p for p in env.get("SGLWRAP_PROFILE_PATH", "").split(":") if p]
    if first:
        return Path(first[0]).expanduser()
    home = env.get("HOME")
    xdg = env.get("XDG_CONFIG_HOME") or (f"{home}/.config" if home else None)
    if not xdg:
        raise ConfigError("--write-profile: no $SGLWRAP_PROFILE_PATH, $XDG_CONFIG_HOME or $HOME to write into")
    return Path(xdg) / "sglwrap" / "profiles"


def profile_yaml(name: str, winner: Winner, config: Config, context: Mapping[str, Any]) -> str:
    """The profile text: ``extends`` the winner's base, its variables, the measurements in the description."""
    extends = config.base if config.kind == "sweep" else config.profile.name
    sizes = ", ".join(human(s) for s in winner.sizes)
    per = "; ".join(f"{human(s)} {winner.latency_us[s]:.1f} us (vs {winner.reference_us[s]:.1f})"
                    for s in winner.sizes)
    mem = ""
    if winner.nccl_mem_bytes is not None and winner.reference_mem_bytes is not None:
        mem = (f" NCCL device memory {winner.nccl_mem_bytes / 2**20:.0f} MiB per GPU vs "
               f"{winner.reference_mem_bytes / 2**20:.0f} MiB.")
    where = (f"{context.get('world_size')}x {context.get('device') or context.get('backend')} "
             f"(NCCL {context.get('nccl_version') or '-'}, torch {context.get('torch_version') or '-'}, "
             f"backend {context.get('backend')}) on {context.get('host')}")
    if winner.repeat > 1:
        won = dict((n, (k, p)) for n, k, p in winner.pairs_won).get(config.name)
        pairs = f" It was faster in {won[0]} of {won[1]} interleaved pairs." if won else ""
        runs = (f" Each configuration ran {winner.repeat} times in fresh processes, interleaved; latencies are "
                f"medians of the run medians.{pairs} Rule: {winner.rule}.")
    else:
        runs = f" One run per configuration. Rule: {winner.rule}."
    how = ("the reference: nothing beat it beyond the noise" if winner.name == winner.reference else
           "faster beyond the noise" if winner.score < 1 - winner.margin else
           "as fast within the noise, with less NCCL memory")
    desc = (f"Written by sglwrap bench-comm on {context.get('date')}: the winner ({how}) of {context.get('n_configs')} "
            f"configurations for all-reduces of {sizes} in {winner.mode} mode on {where}, measured against "
            f"{winner.reference}. Median per all-reduce: {per}. Geometric-mean ratio {winner.score:.3f}.{mem}"
            f"{runs} Valid for this topology and these sizes only; measure again on other hardware.")
    evidence = [f"sglwrap bench-comm {context.get('date')}: {where}; winner {config.name} over "
                f"{context.get('n_configs')} configurations ({winner.mode} mode, {winner.repeat} run(s) each)."]
    evidence += [f"{human(s)} ({s} B): {winner.latency_us[s]:.2f} us vs {winner.reference} "
                 f"{winner.reference_us[s]:.2f} us" for s in winner.sizes]
    doc: dict[str, Any] = {"name": name, "description": desc, "extends": extends, "evidence": evidence}
    if config.overrides:
        doc["env"] = dict(config.overrides)
    return yaml.safe_dump(doc, sort_keys=False, width=110, allow_unicode=True)


def write_profile(name: str, winner: Winner, config: Config, context: Mapping[str, Any],
                  environ: Mapping[str, str] | None = None) -> tuple[Path, Profile]:
    """Write ``NAME.yaml`` into the first user profile dir, atomically, after ``load_profile`` accepted it.

    An existing profile file of that name in that directory is never overwritten.
    """
    env = dict(os.environ if environ is None else environ)
    target_dir = user_profile_dir(env)
    try:
        target_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(f"--write-profile: cannot create {target_dir}: {e.strerror}") from None
    target = target_dir / f"{name}.yaml"
    if target.exists() or (target_dir / f"{name}.yml").exists():
        raise ConfigError(f"--write-profile: {target} already exists; choose another name or remove it")
    text = profile_yaml(name, winner, config, context)
    stage = Path(tempfile.mkdtemp(dir=target_dir, prefix=".sglwrap-bench-"))
    try:
        staged = stage / f"{name}.yaml"
        staged.write_text(text, encoding="utf-8")
        os.chmod(staged, 0o644)
        rest = env.get("SGLWRAP_PROFILE_PATH", "")
        check_env = dict(env, SGLWRAP_PROFILE_PATH=str(stage) + (":" + rest if rest else ""))
        load_profile(name, check_env)  # validated (extends chain included) before it gets its real name
        if not publish(staged, target):
            raise ConfigError(f"--write-profile: {target} appeared meanwhile; not overwriting")
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return target, load_profile(str(target), env)


def stamp() -> str:
    return time.strftime("%Y-%m-%d", time.gmtime())
