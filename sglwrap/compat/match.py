"""Does an entry apply here? Every condition under ``applies`` must hold; a condition on a fact nobody knows (a
package that is not installed, a /sys bit read without root) does not hold, so an entry never fires on a guess.

Each condition key has a matcher (one function, or one per family: the GPU keys, the bounds), listed in
``MATCHERS``; ``matches`` folds the matchers of the keys an entry names in that order, which is the order of the
words in ``Match.facts``. Conditions, in that order:
  cc / cc_min / cc_max / cc_not  one GPU of the launch has a compute capability in / at least / at most / not in
  gpu_name                      a regular expression one GPU's NVML name matches (case-insensitive)
  interconnect                  pcie, nvlink (all pairs of the launch's GPUs, no NVSwitch) or nvswitch
  packages                      {name: "<spec>"}: ">=0.5.0,<0.5.9", "==0.6.*", "*" (any installed version); names
                                are distributions, or torch-cuda, nccl, nvcc, driver, cuda-driver
  not_packages                  {name: "<spec>"}: holds unless that version is known (installed or assumed) and
                                satisfies the spec; a release's pins stand for what nobody named (a newer build
                                installed or assumed by hand rules the entry out)
  from_index                    [distributions] installed from a package index wheel (no PEP 610 direct_url.json);
                                built from source or a repository: does not hold; a wheel file, or an assumed
                                version: unknown (the entry can only warn)
  absent                        distributions that are not installed: named ``=none`` in --assume-stack, or missing
                                from a live environment; under --assume-stack sglang=X a distribution that release
                                requires is there, and one it does not is unknown (the entry can only warn)
  args / not_args               {dest: value | [values] | true | "*" | {ge|gt|le|lt: n}} on SGLang's parsed args;
                                n may name another dest ({lt: tp_size}: below the launch's tp size; unset: no hold)
  not_user_args                 as not_args, on the values the user gave only (the bundled defaults of the nearest
                                release read may differ from a post release's)
  env                           {NAME: value | [values] | null} as a worker will see it (null: unset)
  auto                          a path SGLang turns on by itself (``sglwrap.sglang.resolved``), e.g. custom_all_reduce
  resolved                      {field: value} on what the target release fills in by itself
                                (``sglwrap.sglang.resolved``: attention_backend, page_size, ...); None never holds
  prefill_per_rank_over         {cap: n, env: NAME}: the prefill tokens one rank runs in a forward (the chunked
                                prefill size the release resolves, already divided by dp size under DP attention
                                where the release does so; chunked prefill off counts as over) exceed the integer in
                                NAME as a worker will see it, else ``cap`` (no ``env``: ``cap`` alone); as
                                ``resolved``, a default of a release nobody named or installed never holds
  arch / not_arch               [architectures]: one of / none of the model config.json's ``architectures`` (config
                                not found: neither holds)
  checkpoint_quant              a regular expression the checkpoint's quantization matches, as ``checkpoint_quant()``
                                names it from config.json ("compressed-tensors:w8a8-int", "fp8", "none"); "unknown"
                                when no config.json is found (so an entry can say what holds without one)
  checkpoint_unquantized        a regular expression one module the checkpoint keeps unquantized matches
                                (case-insensitive search), as its config.json lists them: quantization_config's
                                ``modules_to_not_convert`` (AWQ/GPTQ), ``ignore`` (compressed-tensors) or
                                ``exclude_modules`` (ModelOpt); no config.json or no such list: does not hold
  lacks_arch                    a package (sgl-kernel, flashinfer, deep-gemm, torch, ...) whose installed binaries
                                (or ``--assume-stack <pkg>-arch=``) cover none of one GPU's architecture (of the GPUs
                                the GPU keys pick)
  world_min / world_max         tp at least / at most n
  gpus_min / gpus_max           the launch needs at least / at most n GPUs
  nnodes_min / nnodes_max       at least / at most n nodes
  p2p                           false: some pair of the launch's GPUs has no PCIe/NVLink peer access (NVML read/write);
                                true: every pair has it
  host                          {fact: value} on what sglwrap.host.binaries read (nvidia_caps: false, ...)
  forward_compat                true: the libcuda loaded reports a newer CUDA than the driver (a cuda-compat package)
  version_differs               [a, b]: both distributions installed and their versions (local tag dropped) differ
  model                         a regular expression the --model-path matches (case-insensitive): a model family
  mixed_gpus                    true: the launch's GPUs differ in model or memory
  iommu / acs                   /sys facts: iommu mode (translated, passthrough, off); acs state (redirect, clear)
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sglwrap.compat.kb import Entry
from sglwrap.host.probe import SAME_MODULE
from sglwrap.record import Record

if TYPE_CHECKING:
    from sglwrap.preflight.model import Context

DERIVED = ("torch-cuda", "nccl", "nvcc", "driver", "cuda-driver")


class Match(Record):
    """An entry that applies, and the user's own flags among its conditions (empty: SGLang's default path)."""

    entry: Entry
    user_flags: tuple[str, ...]
    facts: str
    unknown: tuple[str, ...] = ()  # conditions whose facts nobody knows here: the entry can only warn


def used_gpus(ctx: Context) -> list[Any]:
    """The GPUs this launch runs on (the first tp x pp x dp, at least one)."""
    n = max(ctx.args.gpus_needed, 1)
    per_node = -(-n // max(ctx.args.nnodes, 1))
    return list(ctx.facts.gpus[: max(per_node, 1)])


def interconnect(ctx: Context) -> str:
    """nvswitch, nvlink or pcie for the launch's GPUs (pcie for a single GPU)."""
    n = len(used_gpus(ctx))
    if n < 2:
        return "single"
    if ctx.facts.nvswitch:
        return "nvswitch"
    return "nvlink" if ctx.facts.nvlink_among(n) else "pcie"


def package_version(ctx: Context, name: str) -> str | None:
    """The version the entry conditions compare: a distribution, or a derived fact (torch-cuda, nccl, nvcc, ...)."""
    st, b = ctx.stack, ctx.facts.binaries
    if name == "torch-cuda":
        return st.torch_cuda
    if name == "nccl":
        return ctx.facts.packages.get("nccl") or b.get("nccl") or st.nccl
    if name == "nvcc":
        return ctx.facts.packages.get("nvcc") or b.get("nvcc")
    if name == "driver":
        return ctx.facts.driver_version
    if name == "cuda-driver":
        return st.driver_cuda
    if name == "sglang" and name not in st.packages:
        return ctx.args.version  # the release the command line was read for (assumed, installed or bundled)
    return st.packages.get(name)


def version_ok(version: str | None, spec: str) -> bool:
    """Whether ``version`` satisfies a comma-separated PEP 440 spec (``>=0.5.2,<0.5.12``, ``==2.30.*``), ``*`` (any
    installed version), or ``+cu130`` / ``!+cu130`` on the local tag. Pre-releases count."""
    if version is None:
        return False
    spec = str(spec).strip()
    if spec in ("*", ""):
        return True
    tag = version.split("+", 1)[1] if "+" in version else ""
    clauses = []
    for clause in (c.strip() for c in spec.split(",")):
        if clause.startswith(("+", "!+")):  # the local tag: "+cu130" must be it, "!+cu130" must not be ("*": any tag)
            want = clause.lstrip("!+")
            if (bool(tag) if want == "*" else tag == want) == clause.startswith("!"):
                return False
            continue
        clauses.append(clause if clause[0] in "<>=!~" else f"=={clause}")
    if not clauses:
        return True
    key = f"{version}|{','.join(clauses)}"
    found = _CONTAINS.get(key)
    if found is None:
        found = _CONTAINS[key] = _contains(version, ",".join(clauses))
    return found


# "version|specifier" -> whether the specifier set contains the version: what packaging answers, kept between runs
# (``load_contains``/``keep_contains``, called by the preflight runner around the checks) because importing
# ``packaging.specifiers`` and building the sets costs a preflight ~5 ms, for answers that never change.
_CONTAINS: dict[str, bool] = {}
_contains_kept = 0  # how many answers the cache document held when it was last read or written
_CONTAINS_MAX = 4096  # answers kept on disk at most (a few hundred per host)


def _contains(version: str, specifier: str) -> bool:
    from packaging.specifiers import InvalidSpecifier

    from sglwrap.versions import InvalidVersion

    try:
        return bool(_specifier(specifier).contains(_version(version), prereleases=True))
    except (InvalidVersion, InvalidSpecifier):
        return False


def _contains_name() -> str:
    import packaging

    from sglwrap import diskcache

    return "contains-" + diskcache.key(packaging.__version__)  # another packaging may answer otherwise


def load_contains() -> None:
    """Read the kept answers of earlier runs (before the checks: they do no I/O)."""
    global _contains_kept
    from sglwrap import diskcache

    kept = diskcache.load("specs", _contains_name())
    if isinstance(kept, dict):
        for key, value in kept.items():
            if isinstance(value, bool):
                _CONTAINS.setdefault(key, value)
        _contains_kept = len(kept)


def keep_contains() -> None:
    """Keep this run's answers when the checks asked something new (after the checks)."""
    global _contains_kept
    from sglwrap import diskcache

    if _contains_kept < len(_CONTAINS) <= _CONTAINS_MAX:
        diskcache.store("specs", _contains_name(), dict(sorted(_CONTAINS.items())))
        _contains_kept = len(_CONTAINS)


@functools.lru_cache(maxsize=1024)
def _specifier(text: str) -> Any:
    from packaging.specifiers import SpecifierSet

    return SpecifierSet(text)


@functools.lru_cache(maxsize=256)
def _version(text: str) -> Any:
    from sglwrap.versions import strict

    return strict(text)


def _cc(text: Any) -> tuple[int, int]:
    major, _, minor = str(text).partition(".")
    return int(major), int(minor or 0)


def value_ok(value: Any, cond: Any) -> bool:
    """An argument's or variable's value against a condition (see the module docstring)."""
    if isinstance(cond, dict):
        try:
            num = float(value)
        except (TypeError, ValueError):
            return False
        ops = {"ge": num >= cond.get("ge", num), "gt": "gt" not in cond or num > cond["gt"],
               "le": num <= cond.get("le", num), "lt": "lt" not in cond or num < cond["lt"]}
        return all(ops.values())
    if cond is True:
        return value not in (None, False, "", 0, "0", "false", "False")
    if cond is False:
        return value in (None, False, "", 0, "0", "false", "False")
    if cond == "*":
        return value not in (None, False, "")
    options = cond if isinstance(cond, list) else [cond]
    norm = {_norm(o) for o in options}
    return _norm(value) in norm


def _bind(cond: Any, ctx: Context) -> Any:
    """A comparison whose operand names another dest ({lt: tp_size}) with that dest's value filled in; None when
    that dest has no numeric value (the condition then says nothing). Other conditions come back unchanged."""
    if not isinstance(cond, dict) or not any(isinstance(v, str) for v in cond.values()):
        return cond
    out = {}
    for op, operand in cond.items():
        if isinstance(operand, str):
            try:
                operand = float(ctx.args.get(operand))
            except (TypeError, ValueError):
                return None
        out[op] = operand
    return out


def _norm(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v).strip().lower()


def arch_covers(cc: tuple[int, int], arches: list[str] | tuple[str, ...]) -> bool:
    """SASS sm_XY runs on CC X.Z with Z >= Y; sm_XYa on X.Y only; sm_XYf on X.Z with Z >= Y; PTX compute_XY on any
    CC >= X.Y (compute_XYa/f on X.Y only)."""
    for a in arches:
        m = re.fullmatch(r"(sm|compute)_(\d+?)(\d)([af]?)", a.strip())
        if m is None:
            continue
        kind, major, minor, suffix = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4)
        if kind == "sm":
            if suffix == "a" and (major, minor) == cc:
                return True
            if suffix != "a" and major == cc[0] and minor <= cc[1]:
                return True
        else:
            if suffix and (major, minor) == cc:
                return True
            if not suffix and (major, minor) <= cc:
                return True
    return False


def _gpu_ok(gpu: Any, ap: dict[str, Any]) -> bool:
    cc = tuple(gpu.compute_capability)
    if "cc" in ap and cc not in {_cc(c) for c in ap["cc"]}:
        return False
    if "cc_not" in ap and cc in {_cc(c) for c in ap["cc_not"]}:
        return False
    if "cc_min" in ap and cc < _cc(ap["cc_min"]):
        return False
    if "cc_max" in ap and cc > _cc(ap["cc_max"]):
        return False
    if "gpu_name" in ap and not re.search(str(ap["gpu_name"]), gpu.name, re.I):
        return False
    return True


def binary_arches(ctx: Context, pkg: str) -> list[str] | None:
    """The architectures of ``pkg``'s installed binaries: ``--assume-stack <pkg>-arch=`` first, then what
    ``sglwrap.host.binaries`` read (only when the package version it read is the one planned)."""
    given = (ctx.facts.probes.get("assume_stack") or {}).get(f"{pkg}-arch")
    if given:
        return [a for a in re.split(r"[:; ]+", given) if a]
    if pkg == "torch" and ctx.stack.torch_arch_list is not None:
        return list(ctx.stack.torch_arch_list)
    arches = (ctx.facts.binaries.get("arches") or {}).get(pkg)
    return list(arches) if arches else None


def resolved_args(ctx: Context) -> Any | None:
    """What the target release fills in by itself for this launch (``sglwrap.sglang.resolved``, with the model's own
    traits where its config is found), or None when it cannot be resolved. Imported only when an entry asks."""
    version = package_version(ctx, "sglang")
    gpus = used_gpus(ctx)
    key = (version, repr(sorted(ctx.args.canonical_given().items(), key=lambda kv: kv[0])),
           tuple((g.name, tuple(g.compute_capability), g.memory_total_bytes) for g in gpus))
    if key in _RESOLVED:
        return _RESOLVED[key]
    res = None
    try:
        from sglwrap.memory.facts import model_traits_for
        from sglwrap.sglang.resolved import GpuInfo, resolve_server_args

        gpu = None
        if gpus:
            gpu = GpuInfo(total_mib=min(g.memory_total_bytes for g in gpus) / 2**20,
                          capability=tuple(gpus[0].compute_capability), name=gpus[0].name, count=len(gpus))
        traits, _note = model_traits_for(ctx.args.model_path)
        if version:
            res = resolve_server_args(ctx.args.canonical_given(), version, gpu, traits)  # type: ignore[arg-type]
    except Exception:  # another module's gap (an unreadable config, an unmodelled release) must not stop preflight
        res = None
    _RESOLVED.clear()  # one launch at a time
    _RESOLVED[key] = res
    return res


_RESOLVED: dict[tuple[Any, ...], Any] = {}


def _resolved_auto(ctx: Context) -> set[str] | None:
    res = resolved_args(ctx)
    return None if res is None else set(getattr(res, "auto_enabled", ()) or ())


def _guessed_default(ctx: Context, res: Any, name: str) -> bool:
    """True when ``name`` is SGLang's own default for a release nobody named or installed (the bundled release is a
    guess, so a condition on it never holds)."""
    return (getattr(res, "sources", {}) or {}).get(name) != "user" and "sglang" not in ctx.stack.packages


def _prefill_per_rank_over(ctx: Context, spec: dict[str, Any]) -> str | None:
    """What ``prefill_per_rank_over`` found when it holds (the per-rank prefill chunk above the cap), else None."""
    cap, name = int(spec["cap"]), spec.get("env")
    raw = ctx.env(str(name)) if name else None
    if raw not in (None, ""):
        try:
            cap = int(str(raw).strip())
        except ValueError:
            return None  # SGLang's own int() would refuse it first: not this entry's failure
    res = resolved_args(ctx)
    if res is None:
        return None
    if _guessed_default(ctx, res, "chunked_prefill_size"):
        return None
    cps = int(res.chunked_prefill_size)
    if 0 < cps <= cap:
        return None
    where = f"{name}={raw}" if raw not in (None, "") else f"cap {cap}"
    return (f"prefill chunk per rank {cps} > {where}" if cps > 0
            else f"chunked prefill off (whole prompts per forward) > {where}")


def _model_facts(ctx: Context) -> Any | None:
    """The model's ModelFacts (config.json found as the memory planner finds it), or None when nobody can read it."""
    facts = ctx.model  # read once by run_preflight before the checks
    return None if isinstance(facts, str) else facts


def model_architectures(ctx: Context) -> list[str] | None:
    """The ``architectures`` of the model's config.json (found as the memory planner finds it), or None."""
    facts = _model_facts(ctx)
    return (facts.architectures or None) if facts is not None else None


def _quant_config(config: dict[str, Any] | None) -> dict[str, Any] | None:
    """config.json's ``quantization_config`` (``compression_config`` in older compressed-tensors files), or None."""
    if config is None:
        return None
    qcfg = config.get("quantization_config") or config.get("compression_config")
    return qcfg if isinstance(qcfg, dict) else None


def _ct_scheme(qcfg: dict[str, Any]) -> str:
    """A compressed-tensors config's scheme as ``w<bits>a<bits>-<type>`` (its first config group), or "" unread."""
    groups = qcfg.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        return ""
    first = next(iter(groups.values()))
    if not isinstance(first, dict):
        return ""
    w, a = first.get("weights") or {}, first.get("input_activations") or {}
    if not isinstance(w, dict) or not isinstance(a, dict) or not w.get("num_bits"):
        return ""
    wtype = str(w.get("type", "int")).lower()
    abits = a.get("num_bits") or 16
    return f"w{w['num_bits']}a{abits}-{wtype}"


def checkpoint_quant(config: dict[str, Any] | None) -> str:
    """The checkpoint's quantization named from its config.json: "unknown" (no config), "none", the
    ``quant_method`` in lower case, or "compressed-tensors:<scheme>" (e.g. "compressed-tensors:w8a8-int")."""
    if config is None:
        return "unknown"
    qcfg = _quant_config(config)
    if qcfg is None:
        return "none"
    method = str(qcfg.get("quant_method") or qcfg.get("format") or "unknown").lower().replace("_", "-")
    if method == "compressed-tensors":
        scheme = _ct_scheme(qcfg)
        return f"{method}:{scheme}" if scheme else method
    return method


def unquantized_modules(config: dict[str, Any] | None) -> list[str]:
    """The modules a checkpoint's config.json says it keeps unquantized (``modules_to_not_convert``, ``ignore`` or
    ``exclude_modules`` of its quantization_config, as written: names, prefixes or ``re:`` patterns); [] without."""
    qcfg = _quant_config(config)
    if qcfg is None:
        return []
    out: list[str] = []
    for key in ("modules_to_not_convert", "ignore", "exclude_modules"):
        val = qcfg.get(key)
        if isinstance(val, list):
            out += [str(v) for v in val]
    return out


def model_config(ctx: Context) -> dict[str, Any] | None:
    """The model's config.json as a dict, or None when nobody can read it."""
    facts = _model_facts(ctx)
    return facts.config if facts is not None else None


def _absence(ctx: Context, name: str) -> str:
    """Whether distribution ``name`` is "absent", "present" or "unknown" for the launch planned: named ``=none`` in
    --assume-stack is absent; installed, named, or required by an assumed SGLang release (its own pins,
    ``sglwrap.sglang.pins``) is present; under an assumed release, or on a catalogue host (another machine), anything
    else is unknown; with nothing known about the environment at all, not judged (as "present": no entry fires)."""
    probes = ctx.facts.probes or {}
    if name in (probes.get("assumed_absent") or ()):
        return "absent"
    pins = probes.get("release_pins") or {}
    if name in ctx.stack.packages or name in (pins.get("pinned") or {}) or name in (pins.get("brought") or {}):
        return "present"
    if "sglang" in (probes.get("assume_stack") or {}) or name in (probes.get("assume_stack_left_out") or {}):
        return "unknown"
    if not ctx.stack.packages:  # nothing read about this environment at all: not judged
        return "present"
    # a catalogue host is another machine: this interpreter's packages (and --assume-stack's few) are not its own
    return "unknown" if ctx.facts.source.startswith("catalogue:") else "absent"


class Held(Record):
    """A condition that holds: its words for ``Match.facts``, the user's own flags among it, and the facts it rests on
    that nobody knows here (``Match.unknown``)."""

    said: tuple[str, ...] = ()
    user: tuple[str, ...] = ()
    unknown: tuple[str, ...] = ()


HOLDS = Held()
# a condition's matcher: the entry's ``applies`` (all of it: a family reads its own keys), the entry, the launch;
# None when the condition does not hold
Matcher = Callable[[dict[str, Any], Entry, "Context"], "Held | None"]
GPU_KEYS = ("cc", "cc_min", "cc_max", "cc_not", "gpu_name")
BOUND_KEYS = ("world_min", "gpus_min", "gpus_max", "nnodes_min", "nnodes_max", "world_max")


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _hit_gpus(ap: dict[str, Any], ctx: Context) -> list[Any]:
    """The launch's GPUs the entry's GPU conditions pick (all of them without such a condition)."""
    gpus = used_gpus(ctx)
    return [g for g in gpus if _gpu_ok(g, ap)] if not set(GPU_KEYS).isdisjoint(ap) else gpus


def _match_gpu(ap: dict[str, Any], entry: Entry, ctx: Context) -> Held | None:
    """cc / cc_min / cc_max / cc_not / gpu_name: one GPU of the launch fits them all."""
    hit = _hit_gpus(ap, ctx)
    if not hit:
        return None
    cc = hit[0].compute_capability
    return Held(said=(f"{hit[0].name} (CC {cc[0]}.{cc[1]})",))


def _match_interconnect(ap: dict[str, Any], entry: Entry, ctx: Context) -> Held | None:
    """interconnect: the launch's GPUs are linked by one of the listed kinds."""
    ic = interconnect(ctx)
    return Held(said=(ic,)) if ic in ap["interconnect"] else None


def _match_packages(ap: dict[str, Any], entry: Entry, ctx: Context) -> Held | None:
    """packages: every named version satisfies its spec; a version that is a guess (no SGLang named, a release's pin)
    is unknown."""
    said: list[str] = []
    unknown: list[str] = []
    pinned = _pinned(ctx)
    for name, spec in (ap.get("packages") or {}).items():
        ver = package_version(ctx, name)
        if not version_ok(ver, spec):
            return None
        if _guessed_release(ctx, name):
            unknown.append(f"which SGLang release (none installed or named; planned as {ver})")
        if name in pinned:  # what the release installs, not what the user has (GLM-5 users upgrade transformers)
            unknown.append(f"{name}'s version (the planned SGLang pins {ver}; name it in --assume-stack)")
        said.append(f"{name} {ver}")
    return Held(said=tuple(said), unknown=tuple(unknown))


def _match_not_packages(ap: dict[str, Any], entry: Entry, ctx: Context) -> Held | None:
    """not_packages: no named version is known to satisfy its spec. A version nobody named (the release's own pin,
    or a release that is itself a guess) may be what holds it, so the entry can then only warn."""
    unknown: list[str] = []
    for name, spec in (ap.get("not_packages") or {}).items():
        version = package_version(ctx, name)
        if version_ok(version, spec):
            return None
        other = SAME_MODULE.get(name)
        if version is None and other is not None and package_version(ctx, other) is not None:
            continue  # the distribution that provides the same module is the one there (sgl-kernel / sglang-kernel)
        if version is None or name in _pinned(ctx) or _guessed_release(ctx, name):
            unknown.append(f"{name}'s version (not named: {spec} would rule the entry out)")
    return Held(unknown=tuple(unknown)) if unknown else HOLDS


def _guessed_release(ctx: Context, name: str) -> bool:
    """Whether ``name`` is SGLang and its version only the release planned for (none installed or named)."""
    return name == "sglang" and name not in ctx.stack.packages


def _pinned(ctx: Context) -> dict[str, str]:
    """Versions the assumed release's pins filled in (not named by the user)."""
    pinned: dict[str, str] = ((ctx.facts.probes or {}).get("release_pins") or {}).get("pinned") or {}
    return pinned


def _match_from_index(ap: dict[str, Any], entry: Entry, ctx: Context) -> Held | None:
    """from_index: every named distribution came from a package index wheel (not known: unknown)."""
    said: list[str] = []
    unknown: list[str] = []
    for name in ap.get("from_index") or ():
        origin = (ctx.facts.binaries.get("origins") or {}).get(name)
        if origin in ("local", "vcs"):
            return None  # built here, against the torch installed with it
        if origin == "index":
            said.append(f"{name} from a package index")
        else:
            unknown.append(f"where {name} was built (an index wheel, or a build for this torch)")
    return Held(said=tuple(said), unknown=tuple(unknown))


def _match_absent(ap: dict[str, Any], entry: Entry, ctx: Context) -> Held | None:
    """absent: no named distribution is known to be installed (see ``_absence``)."""
    said: list[str] = []
    unknown: list[str] = []
    for name in ap.get("absent") or ():
        absence = _absence(ctx, name)
        if absence == "present":
            return None
        if absence == "unknown":
            unknown.append(f"whether {name} is installed")
        said.append(f"no {name}" if absence == "absent" else f"{name} unknown")
    return Held(said=tuple(said), unknown=tuple(unknown))


def _match_args(ap: dict[str, Any], entry: Entry, ctx: Context) -> Held | None:
    """args: every named dest has a value the condition accepts; the ones the user gave are the user's flags."""
    said: list[str] = []
    user: list[str] = []
    for dest, cond in (ap.get("args") or {}).items():
        val = ctx.args.get(dest)
        cond = _bind(cond, ctx)
        if cond is None or not value_ok(val, cond):
            return None
        if ctx.args.is_given(dest):
            user.append(f"{ctx.args.flag_for(dest) or dest} {val}" if not isinstance(val, bool)
                        else ctx.args.flag_for(dest) or dest)
        said.append(f"{dest}={val}")
    return Held(said=tuple(said), user=tuple(user))


def _match_not_args(ap: dict[str, Any], entry: Entry, ctx: Context) -> Held | None:
    """not_args: no named dest has a value the condition accepts (an operand naming an unset dest: no hold)."""
    for dest, cond in (ap.get("not_args") or {}).items():
        cond = _bind(cond, ctx)
        if cond is not None and value_ok(ctx.args.get(dest), cond):
            return None
    return HOLDS


def _match_not_user_args(ap: dict[str, Any], entry: Entry, ctx: Context) -> Held | None:
    """not_user_args: as not_args, on what the user gave only (defaults can lag a post release)."""
    for dest, cond in (ap.get("not_user_args") or {}).items():
        if ctx.args.is_given(dest) and value_ok(ctx.args.get(dest), cond):
            return None
    return HOLDS


def _match_env(ap: dict[str, Any], entry: Entry, ctx: Context) -> Held | None:
    """env: every named variable, as a worker will see it, has an accepted value (null: unset); the ones set in
    sglwrap's own environment are the user's."""
    said: list[str] = []
    user: list[str] = []
    for name, cond in (ap.get("env") or {}).items():
        val = ctx.env(name)
        if cond is None:
            if val not in (None, ""):
                return None
            continue
        if not value_ok(val, cond):
            return None
        if ctx.environ.get(name) is not None:
            user.append(f"{name}={val}")
        said.append(f"{name}={val}")
    return Held(said=tuple(said), user=tuple(user))


def _match_auto(ap: dict[str, Any], entry: Entry, ctx: Context) -> Held | None:
    """auto: the target release turns one of the named paths on by itself."""
    auto = _resolved_auto(ctx)
    wanted = _listed(ap["auto"])
    if auto is None or not any(w in auto for w in wanted):
        return None
    return Held(said=(f"SGLang turns on {'/'.join(wanted)} by itself",))


def _match_resolved(ap: dict[str, Any], entry: Entry, ctx: Context) -> Held | None:
    """resolved: every named field the target release fills in has an accepted value (not a guessed default)."""
    said: list[str] = []
    for name, cond in (ap.get("resolved") or {}).items():
        res = resolved_args(ctx)
        val = None if res is None else getattr(res, name, None)
        if val is None or not value_ok(val, cond):
            return None
        if _guessed_default(ctx, res, name):
            return None
        said.append(f"SGLang resolves {name}={val}")
    return Held(said=tuple(said))


def _match_prefill(ap: dict[str, Any], entry: Entry, ctx: Context) -> Held | None:
    """prefill_per_rank_over: one rank's prefill chunk exceeds the cap (see ``_prefill_per_rank_over``)."""
    over = _prefill_per_rank_over(ctx, ap["prefill_per_rank_over"])
    return None if over is None else Held(said=(over,))


def _match_arch(ap: dict[str, Any], entry: Entry, ctx: Context) -> Held | None:
    """arch: one of the model config's architectures is listed."""
    wanted = _listed(ap["arch"])
    hit = [a for a in model_architectures(ctx) or () if a in wanted]
    return Held(said=(f"architecture {hit[0]}",)) if hit else None


def _match_not_arch(ap: dict[str, Any], entry: Entry, ctx: Context) -> Held | None:
    """not_arch: the model config is found and none of its architectures is listed."""
    archs = model_architectures(ctx)
    if not archs or any(a in ap["not_arch"] for a in archs):
        return None  # no config found: nobody knows, so nothing fires
    return Held(said=(f"architecture {archs[0]}",))


def _match_checkpoint_quant(ap: dict[str, Any], entry: Entry, ctx: Context) -> Held | None:
    """checkpoint_quant: the checkpoint's quantization matches ("unknown" without config.json: a block on it is
    only a guess, so the quantization is then an unknown fact)."""
    quant = checkpoint_quant(model_config(ctx))
    if not re.search(str(ap["checkpoint_quant"]), quant, re.I):
        return None
    if quant != "unknown":
        return Held(said=(f"checkpoint quantization {quant}",))
    unknown = ("the checkpoint's quantization (no config.json found)",) if entry.severity == "block" else ()
    return Held(said=("checkpoint quantization unknown (no config.json)",), unknown=unknown)


def _match_checkpoint_unquantized(ap: dict[str, Any], entry: Entry, ctx: Context) -> Held | None:
    """checkpoint_unquantized: one module the checkpoint keeps unquantized matches."""
    pattern = re.compile(str(ap["checkpoint_unquantized"]), re.I)
    kept = [m for m in unquantized_modules(model_config(ctx)) if pattern.search(m)]
    return Held(said=(f"checkpoint keeps {kept[0]} unquantized",)) if kept else None


def _match_lacks_arch(ap: dict[str, Any], entry: Entry, ctx: Context) -> Held | None:
    """lacks_arch: a named package's binaries run on none of the architectures of one GPU the entry picks."""
    hit = _hit_gpus(ap, ctx)
    missing = []
    for pkg in _listed(ap["lacks_arch"]):
        arches = binary_arches(ctx, pkg)
        if arches is None:
            continue
        bad = [g for g in hit if not arch_covers(tuple(g.compute_capability), arches)]
        if bad:
            missing.append(f"{pkg} binaries have {' '.join(arches) or 'no GPU code'}, not {bad[0].sm}")
    return Held(said=tuple(missing)) if missing else None


def _match_bounds(ap: dict[str, Any], entry: Entry, ctx: Context) -> Held | None:
    """world_min / gpus_min / gpus_max / nnodes_min / nnodes_max / world_max: tp, the GPUs needed and the nodes
    within bounds (only world_min says what it found)."""
    a = ctx.args
    have = {"world": a.tp, "gpus": a.gpus_needed, "nnodes": a.nnodes}
    said: list[str] = []
    for key in BOUND_KEYS:
        if key not in ap:
            continue
        what, _, side = key.rpartition("_")
        if (have[what] < int(ap[key])) if side == "min" else (have[what] > int(ap[key])):
            return None
        if key == "world_min":
            said.append(f"tp={a.tp}")
    return Held(said=tuple(said))


def _match_p2p(ap: dict[str, Any], entry: Entry, ctx: Context) -> Held | None:
    """p2p: every pair of the launch's GPUs has (true) / some pair lacks (false) peer access; unread: no hold."""
    n = len(used_gpus(ctx))
    pairs = [ctx.facts.link(i, j) for i in range(n) for j in range(i + 1, n)]
    if not pairs or any(lk is None for lk in pairs):
        return None
    has = all(lk.p2p_read == "ok" and lk.p2p_write == "ok" for lk in pairs if lk is not None)
    if has != bool(ap["p2p"]):
        return None
    return Held(said=("peer access between all GPUs" if has else "no peer access between some GPUs",))


def _match_host(ap: dict[str, Any], entry: Entry, ctx: Context) -> Held | None:
    """host: every named fact sglwrap.host.binaries read has the value given."""
    said: list[str] = []
    for key, want in (ap.get("host") or {}).items():
        have = ctx.facts.binaries.get(key)
        if have is None or have != want:
            return None
        said.append(f"{key}={have}")
    return Held(said=tuple(said))


def _match_forward_compat(ap: dict[str, Any], entry: Entry, ctx: Context) -> Held | None:
    """forward_compat: libcuda reports a newer CUDA than the driver (true) or not (false); unread: no hold."""
    api, nvml = ctx.facts.binaries.get("cuda_driver_api"), ctx.facts.cuda_driver_version
    if api is None or nvml is None or (api > nvml) != bool(ap["forward_compat"]):
        return None
    return Held(said=(f"libcuda reports CUDA {api // 1000}.{api % 1000 // 10}, "
                      f"the driver {nvml // 1000}.{nvml % 1000 // 10}",))


def _match_version_differs(ap: dict[str, Any], entry: Entry, ctx: Context) -> Held | None:
    """version_differs: both distributions installed, at versions that differ (local tag dropped)."""
    a, b = ap["version_differs"]
    va, vb = ctx.stack.packages.get(a), ctx.stack.packages.get(b)
    if va is None or vb is None or va.split("+", 1)[0] == vb.split("+", 1)[0]:
        return None
    return Held(said=(f"{a} {va} vs {b} {vb}",))


def _match_model(ap: dict[str, Any], entry: Entry, ctx: Context) -> Held | None:
    """model: the --model-path matches."""
    path = ctx.args.model_path or ""
    return Held(said=(f"model {path}",)) if re.search(str(ap["model"]), path, re.I) else None


def _match_mixed_gpus(ap: dict[str, Any], entry: Entry, ctx: Context) -> Held | None:
    """mixed_gpus: true: the launch's GPUs differ in model or memory (false: no condition)."""
    if not ap.get("mixed_gpus"):
        return HOLDS
    gpus = used_gpus(ctx)
    if len({(g.name, g.memory_total_bytes) for g in gpus}) < 2:
        return None
    return Held(said=("GPUs of different models/memory: " + ", ".join(sorted({g.name for g in gpus})),))


def _match_iommu(ap: dict[str, Any], entry: Entry, ctx: Context) -> Held | None:
    """iommu: the IOMMU mode read from /sys is listed."""
    mode = (ctx.facts.binaries.get("iommu") or {}).get("mode")
    return Held(said=(f"IOMMU {mode}",)) if mode in ap["iommu"] else None


def _match_acs(ap: dict[str, Any], entry: Entry, ctx: Context) -> Held | None:
    """acs: the PCIe ACS state read from /sys is listed."""
    state = (ctx.facts.binaries.get("acs") or {}).get("state")
    return Held(said=(f"ACS {state}",)) if state in ap["acs"] else None


# Every condition key's matcher, in the order ``matches`` folds them: the order of the words in ``Match.facts``,
# of ``Match.user_flags`` and of ``Match.unknown``. A family (GPU keys, bounds) is one matcher reading its own keys.
MATCHERS: tuple[tuple[tuple[str, ...], Matcher], ...] = (
    (GPU_KEYS, _match_gpu),
    (("interconnect",), _match_interconnect),
    (("packages",), _match_packages),
    (("not_packages",), _match_not_packages),
    (("from_index",), _match_from_index),
    (("absent",), _match_absent),
    (("args",), _match_args),
    (("not_args",), _match_not_args),
    (("not_user_args",), _match_not_user_args),
    (("env",), _match_env),
    (("auto",), _match_auto),
    (("resolved",), _match_resolved),
    (("prefill_per_rank_over",), _match_prefill),
    (("arch",), _match_arch),
    (("not_arch",), _match_not_arch),
    (("checkpoint_quant",), _match_checkpoint_quant),
    (("checkpoint_unquantized",), _match_checkpoint_unquantized),
    (("lacks_arch",), _match_lacks_arch),
    (BOUND_KEYS, _match_bounds),
    (("p2p",), _match_p2p),
    (("host",), _match_host),
    (("forward_compat",), _match_forward_compat),
    (("version_differs",), _match_version_differs),
    (("model",), _match_model),
    (("mixed_gpus",), _match_mixed_gpus),
    (("iommu",), _match_iommu),
    (("acs",), _match_acs),
)
CONDITION_KEYS = frozenset(key for keys, _ in MATCHERS for key in keys)


def matches(entry: Entry, ctx: Context) -> Match | None:
    """The Match when every condition of ``entry`` holds for ``ctx``, else None: the matchers of the conditions it
    names, folded in ``MATCHERS`` order (the first that does not hold ends it). A condition no matcher knows raises
    ValueError (``kb`` refuses such an entry on load)."""
    ap = dict(entry.applies)
    strange = set(ap) - CONDITION_KEYS
    if strange:
        raise ValueError(f"{entry.id}: applies: no matcher for {', '.join(sorted(strange))}")
    said: list[str] = []
    user: list[str] = []
    unknown: list[str] = []
    for keys, matcher in MATCHERS:
        if ap.keys().isdisjoint(keys):
            continue
        held = matcher(ap, entry, ctx)
        if held is None:
            return None
        said += held.said
        user += held.user
        unknown += held.unknown
    return Match(entry=entry, user_flags=tuple(user), facts=", ".join(said), unknown=tuple(unknown))
