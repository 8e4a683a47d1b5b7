"""The values a user gave SGLang, by destination: command line over SGLang's own ``--config`` YAML file.

Only what sglwrap needs to read back (host, port, node rank …); SGLang still parses its argv itself.
"""

from __future__ import annotations

from collections.abc import Sequence

from sglwrap.sglang_args import FlagTable, parse_user_args


def user_values(sglang_args: Sequence[str], table: FlagTable) -> dict[str, object]:
    """``dest -> value`` for the options the user set; a switch is ``True``, a list-valued option its last value."""
    values = config_file_values(sglang_args)
    for p in parse_user_args(sglang_args, table):
        info = table.flags[p.flag]
        values[p.dest] = p.values[-1] if p.values else (True if info.nargs == 0 else None)
    return values


def config_file_values(sglang_args: Sequence[str]) -> dict[str, object]:
    """The keys of the ``--config FILE`` SGLang will merge (dash or underscore spelling → dest); {} if none."""
    import yaml

    for i, tok in enumerate(sglang_args):
        if tok == "--config" and i + 1 < len(sglang_args):
            try:
                with open(sglang_args[i + 1], encoding="utf-8") as fh:
                    data = yaml.safe_load(fh)
            except (OSError, yaml.YAMLError):
                return {}  # the launch planner reports an unreadable --config with its own message
            if isinstance(data, dict):
                return {str(k).lstrip("-").replace("-", "_"): v for k, v in data.items()}
    return {}


def is_true(value: object) -> bool:
    """A switch's value as SGLang would read it (CLI ``True`` or a YAML/str boolean)."""
    return value is True or str(value).lower() in ("true", "1", "yes")
