"""The user's SGLang command line, read once, the way the target release's own parser reads it.

An ``argparse`` parser is generated from the release's flag table (types, choices, nargs, switches,
``BooleanOptionalAction``, append, SGLang's own abbreviation and ambiguity rules: ``allow_abbrev=True`` as in
``prepare_server_args``). SGLang's ``--config FILE`` is merged as its ``ConfigArgumentMerger`` merges it (the
file's keys become arguments placed before the command line, so the command line wins). A value SGLang's parser
would refuse (exit 2) is a UsageError (exit 64) naming the flag, the value and what SGLang accepts.

Every stage of sglwrap takes the resulting ``SglangCmdline``; nothing else reads SGLang's argv.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any, NoReturn

from sglwrap.errors import UsageError
from sglwrap.record import Record, field, replace
from sglwrap.sglang.flags import FlagInfo, FlagTable
from sglwrap.sglang.release import TargetRelease

# Destinations whose names changed between releases, normalised to today's (0.5.2/0.5.9 used the long names).
CANONICAL_DEST = {"tensor_parallel_size": "tp_size", "pipeline_parallel_size": "pp_size",
                  "data_parallel_size": "dp_size", "expert_parallel_size": "ep_size",
                  "attention_data_parallel_size": "attn_dp_size"}
_RELEASE_DESTS: dict[str, tuple[str, ...]] = {new: (new, old) for old, new in CANONICAL_DEST.items()}


class _ParseError(Exception):
    pass


class SilentParser(argparse.ArgumentParser):
    """An argparse parser that never prints help: argparse asks for a formatter on every ``add_argument``, only to
    check the metavar (which leaves it as it was), so one formatter of a fixed width serves every option: no terminal
    size query (with SGLang's 500+ options, about 10 ms; the first one also imports ``shutil``) and no new formatter
    (about 2 ms) per option."""

    def _get_formatter(self) -> argparse.HelpFormatter:
        formatter: argparse.HelpFormatter | None = self.__dict__.get("_metavar_formatter")
        if formatter is None:
            formatter = self._metavar_formatter = argparse.HelpFormatter(self.prog, width=100)
        return formatter


class _Parser(SilentParser):
    def error(self, message: str) -> NoReturn:
        raise _ParseError(message)


def _human_readable_int(value: str) -> int:
    """SGLang's ``human_readable_int`` (0.5.2x ``srt/utils/common.py``): an integer, or a number with an SI suffix
    (k M G T, decimals allowed) or an IEC suffix (Ki Mi Gi Ti, integers only); suffixes are case-sensitive."""
    text = value.strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", text)
    if m:
        number, suffix = m.groups()
        if suffix.endswith("i"):
            if "." in number:
                raise argparse.ArgumentTypeError(f"decimals are not allowed with IEC suffixes like {suffix!r}")
            return int(number) * 2 ** (10 * "KMGT".index(suffix[0]) + 10)
        from decimal import Decimal

        return int(Decimal(number) * 10 ** (3 * "kMGT".index(suffix) + 3))
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid integer value: {value!r} (a plain integer, SI suffixes 1k 1M, or "
                                         "IEC suffixes 1Ki 1Mi)") from None


def _nullable_str(value: str) -> str | None:
    return None if not value or value == "None" else value


# SGLang's own argument types that sglwrap reproduces, by the name the flag table records.
_CUSTOM_TYPES: dict[str, Any] = {"other:human_readable_int": _human_readable_int, "other:json_list_type": json.loads,
                                 "other:nullable_str": _nullable_str}


def _convert(type_name: str | None) -> Any:
    """The converter argparse would call for a flag of ``type_name`` (the flag tables record ``str`` for a store
    without a type)."""
    if type_name in _CUSTOM_TYPES:
        return _CUSTOM_TYPES[type_name]
    if type_name == "int":
        return int
    if type_name == "float":
        return float
    if type_name == "json":
        return json.loads
    return None  # str, a custom callable sglwrap cannot run, or unknown: the string as given


def _choices(info: FlagInfo, conv: Any) -> list[Any] | None:
    if not info.choices:
        return None
    out = []
    for c in info.choices:
        try:
            out.append(conv(c) if conv is not None and isinstance(c, str) and conv is not json.loads else c)
        except (TypeError, ValueError):
            out.append(c)
    return out


def _option_strings(info: FlagInfo) -> list[str]:
    """The option strings ``info`` is declared with (a ``BooleanOptionalAction`` by its positive spellings)."""
    options = list(info.options)
    if info.action == "BooleanOptionalAction":
        return [o for o in options if not o.startswith("--no-")] or options
    return options


def _registered(info: FlagInfo, options: list[str]) -> list[str]:
    """The option strings argparse registers for ``info``: a ``BooleanOptionalAction`` adds ``--no-X``."""
    if info.action == "BooleanOptionalAction":
        return [*options, *(f"--no-{o[2:]}" for o in options if o.startswith("--"))]
    return options


def _bindable(tokens: Sequence[str]) -> tuple[frozenset[str], tuple[str, ...]]:
    """``(exact, prefixes)``: an option string argparse (allow_abbrev, 3.11+) may bind a token of ``tokens`` to is
    one of ``exact`` or starts with one of ``prefixes`` (``_parse_optional`` and ``_get_option_tuples``)."""
    exact: set[str] = set()
    prefixes: set[str] = set()
    for tok in tokens:
        if len(tok) < 2 or tok[0] != "-" or tok == "--":
            continue
        prefixes.add(tok.split("=", 1)[0])  # the option itself, or one it abbreviates
        if tok[1] != "-":  # a short option: its first two characters, or the whole token as a prefix
            exact.add(tok[:2])
            prefixes.add(tok)
    return frozenset(exact), tuple(prefixes)


def _arguments(info: FlagInfo, table: FlagTable) -> dict[str, Any]:
    """``add_argument``'s keywords for ``info``, every default suppressed."""
    action = info.action
    kw: dict[str, Any] = {"dest": info.dest, "default": argparse.SUPPRESS}
    if action in ("_StoreTrueAction", "DeprecatedStoreTrueAction"):
        kw["action"] = "store_true"
    elif action in ("_StoreFalseAction", "DeprecatedStoreFalseAction"):
        kw["action"] = "store_false"
    elif "StoreConst" in action:
        kw["action"] = "store_const"
        kw["const"] = info.const
    elif action == "BooleanOptionalAction":
        kw["action"] = argparse.BooleanOptionalAction
    elif action == "_CountAction":
        kw["action"] = "count"
    elif info.nargs == 0:  # a custom switch-like action (DeprecatedAction with nargs=0 …)
        kw["action"] = "store_true"
    else:
        kw["action"] = "append" if "Append" in action else "store"
        if info.nargs != 1:
            kw["nargs"] = info.nargs
        conv = _convert(info.type)
        if conv is not None:
            kw["type"] = conv
        choices = _choices(info, conv)
        if choices is not None and table.stands_in_for is None:
            kw["choices"] = choices
    return kw


def build_parser(table: FlagTable, reading: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """An argparse parser equivalent to the release's own, with every default suppressed (so the namespace holds
    exactly what the user gave). A table standing in for an unread release keeps types but not choice lists (that
    release may accept more).

    With ``reading`` (the tokens it will parse), only the options a token can bind to (exactly, as an abbreviation or
    a short option's prefix) and the required ones are added: argparse reads those tokens exactly as the whole
    parser does (the same candidates for each token, so the same matches, ambiguities and unknowns), and a command
    line of a few options does not pay for building SGLang's 500+ (``tests/test_sglang_cmdline_partial.py``)."""
    p = _Parser(prog="sglang serve", add_help=False, allow_abbrev=True)
    exact, prefixes = _bindable(reading) if reading is not None else (frozenset(), ())
    taken: set[str] = set()
    for info in table.unique():
        if info.action == "_HelpAction" or info.dest == "help":
            continue
        options = _option_strings(info)
        registered = _registered(info, options)
        if not taken.isdisjoint(registered):
            continue  # a spelling two releases' data disagree on; the first one stays (argparse would refuse it)
        taken.update(registered)
        if reading is not None and not info.required and not any(
                o in exact or o.startswith(prefixes) for o in registered):
            continue
        try:
            p.add_argument(*options, **_arguments(info, table))
        except (argparse.ArgumentError, ValueError, TypeError):
            continue
    return p


class SglangCmdline(Record):
    """What the user asked SGLang for, parsed as the target release parses it."""

    argv: tuple[str, ...]
    table: FlagTable
    given_values: Mapping[str, Any]  # dest -> value, only what the argv or --config set
    config_path: str | None = None
    config_dests: frozenset[str] = frozenset()
    abbreviations: tuple[tuple[str, str], ...] = ()  # (as written, exact flag)
    # with a table standing in for an unread release: what it did not know, passed on to SGLang unchecked
    unchecked: tuple[str, ...] = ()
    _defaults: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def version(self) -> str:
        return self.table.version

    def given(self) -> frozenset[str]:
        """Destinations the user set (command line or --config), under the release's own names."""
        return frozenset(self.given_values)

    def is_given(self, dest: str) -> bool:
        """Whether ``dest`` (a release's name or today's canonical name) was set by the user."""
        return any(d in self.given_values for d in _RELEASE_DESTS.get(dest, (dest,)))

    def get(self, dest: str, default: Any = None) -> Any:
        """The value SGLang's parser yields for ``dest``: the user's, else the release's default, else ``default``.

        ``dest`` may be today's canonical name (``tp_size``) for releases that used the long one."""
        for d in _RELEASE_DESTS.get(dest, (dest,)):
            if d in self.given_values:
                return self.given_values[d]
        for d in _RELEASE_DESTS.get(dest, (dest,)):
            if d in self._defaults and self._defaults[d] is not None and not _is_repr(self._defaults[d]):
                return self._defaults[d]
        return default

    def canonical_given(self) -> dict[str, Any]:
        """The user's values keyed by today's destination names."""
        return {CANONICAL_DEST.get(k, k): v for k, v in self.given_values.items()}

    def _int(self, dest: str, default: int) -> int:
        v = self.get(dest, default)
        try:
            return int(v)
        except (TypeError, ValueError):
            return default

    @property
    def tp(self) -> int:
        return self._int("tp_size", 1)

    @property
    def pp(self) -> int:
        return self._int("pp_size", 1)

    @property
    def dp(self) -> int:
        return self._int("dp_size", 1)

    @property
    def ep(self) -> int:
        return self._int("ep_size", 1)

    @property
    def nnodes(self) -> int:
        return self._int("nnodes", 1)

    @property
    def node_rank(self) -> int:
        return self._int("node_rank", 0)

    @property
    def attn_dp(self) -> int:
        """Attention-DP size: ``--attn-dp-size`` (0.5.23), or ``--dp-size`` with ``--enable-dp-attention``."""
        if self.is_given("attn_dp_size"):
            return self._int("attn_dp_size", 1)
        return self.dp if self.get("enable_dp_attention") else 1

    @cached_property
    def gpus_needed(self) -> int:
        """GPUs across all nodes: tp x pp, times dp unless DP lives inside attention."""
        dp_outside = 1 if self.attn_dp > 1 else self.dp
        return self.tp * self.pp * dp_outside

    @property
    def device(self) -> str | None:
        """``--device`` as given (None: SGLang picks, CUDA on an NVIDIA host)."""
        v = self.given_values.get("device")
        return None if v is None else str(v)

    @property
    def model_path(self) -> str | None:
        v = self.get("model_path")
        return None if v is None else str(v)

    @property
    def host(self) -> str:
        return str(self.get("host", "127.0.0.1"))

    @property
    def port(self) -> int:
        return self._int("port", 30000)

    def flag_for(self, dest: str) -> str | None:
        """The release's preferred spelling for ``dest`` (canonical names accepted)."""
        for d in _RELEASE_DESTS.get(dest, (dest,)):
            info = self.table.by_dest(d)
            if info is not None:
                return info.options[0]
        return None

    def with_args(self, extra: Sequence[str]) -> SglangCmdline:
        """The command line with ``extra`` appended (a profile's settings), parsed again."""
        return parse_cmdline([*self.argv, *extra], self.table)


def _is_repr(v: Any) -> bool:
    return isinstance(v, str) and v.startswith("<") and v.endswith(">")


def parse_cmdline(argv: Sequence[str], table: FlagTable, *, require_model: bool = False) -> SglangCmdline:
    """Parse SGLang's argv as release ``table.version`` would; UsageError (64) for anything it would refuse."""
    argv = tuple(argv)
    if argv[:1] == ("--",):
        argv = argv[1:]
    config_path, config_args = _config_args(argv, table)
    rest = _without_config(argv) if config_path else list(argv)
    tokens = [*config_args, *rest]
    parser = build_parser(table, reading=tokens)
    try:
        ns, extras = parser.parse_known_args(tokens)
    except _ParseError as e:
        raise UsageError(_explain(str(e), table)) from None
    misspelled = _misspelled(extras, table)
    if extras and (table.stands_in_for is None or misspelled):
        raise UsageError(_unknown(misspelled or extras, table, argv))
    given = vars(ns)
    config_dests: frozenset[str] = frozenset()
    if config_args:
        try:
            cns, _ = parser.parse_known_args(config_args)
            config_dests = frozenset(vars(cns))
        except _ParseError:
            config_dests = frozenset()
    if require_model:
        missing = [i.options[0] for i in table.unique() if i.required and i.dest not in given]
        if "model_path" not in given and "--model-path" not in missing:
            missing.insert(0, "--model-path")
        if missing:
            raise UsageError(f"SGLang {table.version} needs {', '.join(missing)} (it refuses to start without it; "
                             "--model-path takes a local directory or a Hugging Face name)")
    _check_sizes(given, table)
    defaults = {info.dest: info.default for info in table.unique()}
    return SglangCmdline(argv=argv, table=table, given_values=given, config_path=config_path,
                         config_dests=config_dests, abbreviations=tuple(_abbreviations(argv, table)),
                         unchecked=tuple(extras), _defaults=defaults)


def read_cmdline(argv: Sequence[str], release: TargetRelease, table: FlagTable, *,
                 require_model: bool = False) -> tuple[TargetRelease, SglangCmdline]:
    """Parse ``argv`` for ``release``. When SGLang is neither installed nor named, the newest bundled release is a
    guess, and its refusal (an option it dropped, such as --cuda-graph-max-bs from 0.5.20) is no fact about the
    user's SGLang: the plan then reads the command line as the newest bundled release that takes it, and says so.
    A command line no release takes is refused with the first error."""
    try:
        return release, parse_cmdline(argv, table, require_model=require_model)
    except UsageError as first:
        if release.source != "bundled-newest":
            raise
        from sglwrap import versions
        from sglwrap.sglang.flags import bundled_table, bundled_versions

        for version in sorted((versions.strict(v) for v in bundled_versions()), reverse=True):
            if version >= release.version:
                continue
            try:
                cmd = parse_cmdline(argv, bundled_table(str(version)), require_model=require_model)
            except UsageError:
                continue
            why = (f"SGLang is not installed for {release.python} and no release was named; {release.text} would "
                   f"refuse this command line ({first.message}), so the plan reads it as {version}, the newest "
                   "release that takes it; pass --assume-stack sglang=VERSION to plan for another")
            return replace(release, version=version, source="bundled-fitted", why=why), cmd
        raise


SIZE_DESTS = ("tp_size", "pp_size", "dp_size", "ep_size", "nnodes", "attn_dp_size")


def _check_sizes(given: dict[str, Any], table: FlagTable) -> None:
    """A parallel size below 1 (``--tp-size 0``) is a UsageError: SGLang divides by these and never starts. A GPU
    count or batch size beyond ``sglwrap.bounds`` (``--tp-size 999999999999``) is one too: nothing is sized by it."""
    from sglwrap.bounds import SGLANG_BOUNDS, check_count

    def flag(dest: str) -> str:
        return next((i.options[0] for i in table.unique() if i.dest == dest), "--" + dest.replace("_", "-"))

    for dest, value in given.items():  # a release's own name (--tensor-parallel-size's dest before 0.4) counts too
        if CANONICAL_DEST.get(dest, dest) not in SIZE_DESTS:
            continue
        if isinstance(value, int) and not isinstance(value, bool) and value < 1:
            raise UsageError(f"{flag(dest)} {value}: must be a positive integer (SGLang {table.version} divides by "
                             "it and cannot start with it)")
    for dest, value in given.items():
        if (dest == "port" or dest.endswith("_port")) and isinstance(value, int) and not isinstance(value, bool):
            low = 1 if dest == "port" else 0
            if not low <= value <= 65535:
                why = ("0 would bind a random port no client knows" if value == 0
                       else "the socket refuses it: 'bind(): port must be 0-65535'")
                raise UsageError(f"{flag(dest)} {value}: not a TCP port; allowed: {low}-65535 (SGLang would start and "
                                 f"then fail or hide: {why})")
        bound = SGLANG_BOUNDS.get(CANONICAL_DEST.get(dest, dest))
        if bound is None:
            continue
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, int) and not isinstance(v, bool):
                check_count(flag(dest), v, *bound)


def _abbreviations(argv: Sequence[str], table: FlagTable) -> list[tuple[str, str]]:
    out = []
    for tok in argv:
        if not tok.startswith("--") or tok == "--":
            continue
        name = tok.split("=", 1)[0]
        if name in table.flags:
            continue
        matches = sorted({o for o in table.flags if o.startswith(name)})
        if len(matches) == 1:
            out.append((name, matches[0]))
    return out


def _without_config(argv: Sequence[str]) -> list[str]:
    out: list[str] = []
    skip = False
    for tok in argv:
        if skip:
            skip = False
            continue
        if tok == "--config":
            skip = True
            continue
        if tok.startswith("--config="):
            continue
        out.append(tok)
    return out


def _config_args(argv: Sequence[str], table: FlagTable) -> tuple[str | None, list[str]]:
    """SGLang's ``--config FILE`` turned into arguments (its ConfigArgumentMerger's rules), read once."""
    paths = [argv[i + 1] for i, t in enumerate(argv) if t == "--config" and i + 1 < len(argv)]
    paths += [t.split("=", 1)[1] for t in argv if t.startswith("--config=")]
    if "--config" in argv and not paths:
        raise UsageError("--config needs a file (SGLang: 'No config file specified after --config flag!')")
    if not paths:
        return None, []
    if len(paths) > 1:
        raise UsageError("--config given more than once (SGLang: 'Multiple config files specified! Only one "
                         "allowed.')")
    path = Path(paths[0])
    if path.suffix.lower() not in (".yaml", ".yml"):
        raise UsageError(f"--config {path}: SGLang reads only YAML files (.yaml, .yml), got {path.suffix or 'none'}")
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise UsageError(f"--config {path}: cannot read it ({e.strerror})") from None
    except yaml.YAMLError as e:
        raise UsageError(f"--config {path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UsageError(f"--config {path}: SGLang needs a mapping of option names to values at the top level")
    switches = {o[2:].replace("-", "_") for o, i in table.flags.items() if i.nargs == 0 and o.startswith("--")}
    switches |= {i.dest for i in table.flags.values() if i.nargs == 0}
    args: list[str] = []
    for key, value in data.items():
        k = str(key)
        if isinstance(value, bool):
            if k.replace("-", "_") in switches:
                if value:
                    args.append(f"--{k}")
            else:
                args += [f"--{k}", str(value).lower()]
        elif isinstance(value, list):
            args += [f"--{k}", *(str(v) for v in value)]
        elif isinstance(value, dict):
            args += [f"--{k}", json.dumps(value)]
        else:
            args += [f"--{k}", str(value)]
    for tok in args:
        if tok.startswith("--") and tok.split("=", 1)[0] not in table.flags and not any(
                o.startswith(tok) for o in table.flags):
            dashed = tok.replace("_", "-")
            if dashed in table.flags:  # SGLang's merger writes the key as it is: --tp_size, which argparse refuses
                raise UsageError(f"--config {path}: key {tok[2:]!r}: SGLang {table.version} passes it on as {tok}, "
                                 f"which its parser refuses (exit 2); write the key as {dashed[2:]!r}")
            raise UsageError(f"--config {path}: key {tok[2:]!r} is not an option of SGLang {table.version}"
                             + _did_you_mean(tok, table))
    return str(path), args


def _did_you_mean(name: str, table: FlagTable) -> str:
    import difflib

    close = difflib.get_close_matches(name, [o for o in table.flags if o.startswith("--")], n=3)
    return f"; did you mean {', '.join(close)}?" if close else ""


def _explain(message: str, table: FlagTable) -> str:
    """argparse's error, said as what SGLang would do with it."""
    hint = ". Write the exact flag." if message.startswith("ambiguous option") else ""
    return f"SGLang {table.version} would refuse this (exit 2): {message}{hint}"


def _misspelled(extras: Sequence[str], table: FlagTable) -> list[str]:
    """Unknown options that are a known option written with underscores (``--enable_metrics``): refused by every
    release, so refused even when the table only stands in for the release asked for."""
    return [t for t in extras if t.startswith("--") and "_" in t.split("=", 1)[0]
            and t.split("=", 1)[0].replace("_", "-") in table.flags]


def _unknown(extras: Sequence[str], table: FlagTable, argv: Sequence[str]) -> str:
    first = extras[0]
    v = table.version
    if first.startswith("-"):
        name = first.split("=", 1)[0]
        return f"SGLang {v} has no option {name!r} (it would exit 2){_did_you_mean(name, table)}"
    hint = ""
    if not any(t.split("=", 1)[0] in ("--model-path", "--model") for t in argv):
        hint = f"; did you mean --model-path {first}?"
    return f"SGLang {v} takes no positional arguments, got {first!r} (it would exit 2){hint}"


def cmdline_for(argv: Sequence[str], version: str | None) -> SglangCmdline:
    """``argv`` parsed with the bundled data of release ``version`` (the newest when None): for callers that plan
    from a log or a test, where no SGLang is resolved for a launch."""
    from sglwrap.sglang.flags import bundled_table

    return parse_cmdline(argv, bundled_table(version))
