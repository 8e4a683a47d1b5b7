"""The values an entry's conditions may take (``applies``): types, ranges and spellings, not only keys.

``condition_problems`` is pure and cheap (it runs when the knowledge-base cache is built); what needs the release
data (SGLang option names, model architectures of a release range) is checked by ``tests/test_compat_kb.py``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

INTERCONNECTS = frozenset({"pcie", "nvlink", "nvswitch"})
INT_KEYS = ("world_min", "world_max", "gpus_min", "gpus_max", "nnodes_min", "nnodes_max")
CC_KEYS = ("cc", "cc_min", "cc_max", "cc_not")
BOOL_KEYS = ("mixed_gpus", "p2p", "forward_compat")
_CC = re.compile(r"^\d{1,2}\.\d$")
_LOCAL_TAG = re.compile(r"^!?\+[A-Za-z0-9*.]+$")
_COMPARE = ("ge", "gt", "le", "lt")


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _spec_problem(name: str, spec: Any) -> str | None:
    if not isinstance(spec, str) or not spec.strip():
        return f"{name}: a version spec must be a non-empty string"
    from packaging.specifiers import InvalidSpecifier, Specifier

    for item in (p.strip() for p in spec.split(",")):
        if item == "*" or _LOCAL_TAG.match(item):
            continue
        try:
            Specifier(item)
        except InvalidSpecifier:
            return f"{name}: {item!r} is not a PEP 440 clause, '*', or '+tag'/'!+tag'"
    return None


def _arg_problem(dest: Any, cond: Any) -> str | None:
    if not isinstance(dest, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", dest):
        return f"{dest!r} is not an SGLang option dest (snake_case)"
    if isinstance(cond, dict):
        if not cond or set(cond) - set(_COMPARE):
            return f"{dest}: a comparison takes {', '.join(_COMPARE)}"
        for op, n in cond.items():
            if not (isinstance(n, (int, float)) and not isinstance(n, bool) or isinstance(n, str)):
                return f"{dest}: {op} needs a number or another dest"
    return None


def condition_problems(applies: Mapping[str, Any]) -> list[str]:
    """Every bad value under ``applies`` as ``applies: <key>: <problem>`` (empty when all values are well-formed)."""
    bad: list[str] = []
    for key in INT_KEYS:
        if key in applies and (not isinstance(applies[key], int) or isinstance(applies[key], bool)
                               or not 1 <= applies[key] <= 4096):
            bad.append(f"applies: {key} must be an integer from 1 to 4096")
    for key in CC_KEYS:
        for cc in _listed(applies.get(key)) if key in applies else ():
            if not isinstance(cc, str) or not _CC.match(cc):
                bad.append(f"applies: {key}: {cc!r} is not a compute capability like \"12.0\"")
    for key in BOOL_KEYS:
        if key in applies and not isinstance(applies[key], bool):
            bad.append(f"applies: {key} must be true or false")
    if "interconnect" in applies:
        kinds = _listed(applies["interconnect"])
        if not kinds or any(k not in INTERCONNECTS for k in kinds):
            bad.append(f"applies: interconnect takes {', '.join(sorted(INTERCONNECTS))}")
    for key in ("gpu_name", "model", "checkpoint_quant", "checkpoint_unquantized"):
        if key in applies:
            try:
                re.compile(str(applies[key]))
            except re.error as e:
                bad.append(f"applies: {key}: not a regular expression ({e})")
    for key in ("packages", "not_packages"):
        table = applies.get(key)
        if key in applies and not isinstance(table, dict):
            bad.append(f"applies: {key} must map a package to a version spec")
            continue
        for name, spec in (table or {}).items():
            problem = _spec_problem(str(name), spec)
            if problem:
                bad.append(f"applies: {key}: {problem}")
    for key in ("args", "not_args", "not_user_args"):
        table = applies.get(key)
        if key in applies and not isinstance(table, dict):
            bad.append(f"applies: {key} must map SGLang option dests to values")
            continue
        for dest, cond in (table or {}).items():
            problem = _arg_problem(dest, cond)
            if problem:
                bad.append(f"applies: {key}: {problem}")
    for key in ("absent", "from_index", "arch", "not_arch", "auto"):
        if key in applies and not all(isinstance(v, str) and v for v in _listed(applies[key])):
            bad.append(f"applies: {key} must be a name or a list of names")
    env = applies.get("env")
    if "env" in applies and (not isinstance(env, dict) or not all(re.fullmatch(r"[A-Z][A-Z0-9_]*", str(k))
                                                                  for k in env)):
        bad.append("applies: env must map UPPER_CASE variable names to values (null: unset)")
    return bad
