"""Checks of the machine and the launch line: gpu-count, gpu-processes, nccl-env, sglang-flags."""

from __future__ import annotations

from sglwrap.envvars import misread, nccl_int
from sglwrap.preflight.model import Context, Status, Verdict

GIB = 1024**3
# SGLang sizes the KV pool from total memory x mem-fraction-static (~0.8-0.9 by default): memory held by
# someone else beyond this share of a GPU makes the launch run out of memory.
BLOCK_SHARE = 0.10
UNNAMED_SHARE = 0.05


def check_gpu_count(ctx: Context) -> Verdict:
    """Enough GPUs for tp x pp x dp (per node), all of one model and memory size."""
    cid, a, gpus = "gpu-count", ctx.args, ctx.facts.gpus
    need_total = a.gpus_needed
    need = -(-need_total // max(a.nnodes, 1))
    shape = f"tp={a.tp} pp={a.pp} dp={a.dp}" + (f" attn-dp={a.attn_dp}" if a.attn_dp > 1 else "")
    if a.nnodes > 1:
        shape += f" over {a.nnodes} nodes"
    device = a.device
    if device not in (None, "cuda"):
        return Verdict(cid, Status.SKIP, f"--device {device}: no NVIDIA GPU needed")
    if not gpus:
        why = "; ".join(ctx.facts.notes) or "no GPU"
        fix = "run on a GPU machine, or plan with --assume 8xH200"
        if device is None:  # SGLang picks its device itself; it may run elsewhere than CUDA
            return Verdict(cid, Status.WARN, f"{shape}: this host has no NVIDIA GPU ({why}); SGLang will choose "
                           "another device or fail", fix + " (pass --device cuda to make this a block)")
        return Verdict(cid, Status.BLOCK, f"{shape} needs {need} GPU(s), this host has none ({why})", fix)
    if len(gpus) < need:
        cvd = ctx.facts.cuda_visible_devices
        seen = f"{len(gpus)} visible" + (f" (CUDA_VISIBLE_DEVICES={cvd})" if cvd is not None else "")
        return Verdict(cid, Status.BLOCK, f"{shape} needs {need} GPU(s) per node, {seen}",
                       f"lower --tp/--dp/--pp to fit {len(gpus)} GPU(s), or expose more GPUs")
    used = gpus[:need]
    names = sorted({g.name for g in used})
    mems = sorted({g.memory_total_bytes for g in used})
    if len(names) > 1 or len(mems) > 1:
        return Verdict(cid, Status.WARN, f"{shape} uses GPUs of different kinds ({', '.join(names)}; "
                       f"{', '.join(f'{m / GIB:.1f}' for m in mems)} GiB): SGLang sizes every rank by the smallest",
                       "set CUDA_VISIBLE_DEVICES to GPUs of one model")
    return Verdict(cid, Status.PASS, f"{shape} uses {need} of {len(gpus)} x {names[0]} "
                   f"({mems[0] / GIB:.1f} GiB each)")


def check_gpu_processes(ctx: Context) -> Verdict:
    """Memory held on the launch's GPUs by other processes (a crashed launch's leftover workers), by PID."""
    cid = "gpu-processes"
    used = ctx.facts.gpus[: max(ctx.args.gpus_needed, 1)]
    if not used or all(g.memory_free_bytes is None for g in used):
        return Verdict(cid, Status.SKIP, f"no live memory readings ({ctx.facts.source})")
    held: list[str] = []
    pids: set[int] = set()
    worst = 0.0
    for g in used:
        total = g.memory_total_bytes or 1
        by_procs = sum(p.used_bytes or 0 for p in g.processes)
        for p in g.processes:
            pids.add(p.pid)
            mib = f"{(p.used_bytes or 0) / 2**20:.0f} MiB" if p.used_bytes is not None else "? MiB"
            held.append(f"GPU{g.index}: pid {p.pid} {mib}" + (f" ({p.name[:60]})" if p.name else ""))
        in_use = total - (g.memory_free_bytes or 0)
        unnamed = in_use - by_procs
        if not g.processes and unnamed / total > UNNAMED_SHARE:
            held.append(f"GPU{g.index}: {unnamed / GIB:.1f} GiB in use by processes NVML cannot name "
                        "(another container or PID namespace)")
        worst = max(worst, in_use / total)
    if not held:
        return Verdict(cid, Status.PASS, f"no other compute processes on GPU(s) {[g.index for g in used]}")
    fix = f"stop them: kill {' '.join(map(str, sorted(pids)))}" if pids else "free the GPUs, or pick others"
    reason = "; ".join(held)
    if worst > BLOCK_SHARE:
        return Verdict(cid, Status.BLOCK, f"{reason}: {worst:.0%} of a GPU is taken, SGLang will run out of memory",
                       fix + " (leftover workers of a crashed launch keep their memory until killed)")
    return Verdict(cid, Status.WARN, reason, fix)


_P2P_LEVELS = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS")
_LEGACY_LEVEL = {"0": "LOC", "1": "PIX", "2": "PXB", "3": "PHB", "4": "SYS", "5": "SYS"}
_NVML_TO_NCCL = {"INTERNAL": "PIX", "PIX": "PIX", "PXB": "PXB", "PHB": "PHB", "NODE": "SYS", "SYS": "SYS"}


def check_nccl_env(ctx: Context) -> Verdict:
    """The NCCL variables a worker will see, against the measured topology (NVLS, LL128, P2P level)."""
    cid, f = "nccl-env", ctx.facts
    problems: list[tuple[Status, str, str]] = []
    nvls = ctx.env("NCCL_NVLS_ENABLE")
    if nvls == "1" and not f.nvswitch:
        problems.append((Status.BLOCK, "NCCL_NVLS_ENABLE=1 forces NVLS without checking multicast (nvls.cc:270-277) "
                         "and this host has no NVSwitch", "drop NCCL_NVLS_ENABLE (SGLang sets 0 itself)"))
    proto = ctx.env("NCCL_PROTO")
    if proto and _forces_ll128(proto) and f.gpu_count > 1 and not f.all_pairs_nvlink:
        problems.append((Status.WARN, f"NCCL_PROTO={proto} forces LL128 over PCIe, which NCCL enables only on NVLink "
                         "(tuning.cc:440-462; 2.18.1 notes: data corruption risk)", "use NCCL_PROTO=LL,Simple"))
    level = ctx.env("NCCL_P2P_LEVEL")
    if level is not None:
        problems.extend(_p2p_level(ctx, level))
    if ctx.env("NCCL_P2P_DISABLE") == "1" and f.all_pairs_nvlink:
        problems.append((Status.WARN, "NCCL_P2P_DISABLE=1 on NVLink-connected GPUs: NCCL falls back to host memory",
                         "drop NCCL_P2P_DISABLE"))
    for name, text in sorted(ctx.environ.items()):
        if name.startswith("NCCL_") and (why := misread(name, text)) is not None:
            problems.append((Status.WARN, why, f"set {name} to the value you mean, or unset it"))
    lo, hi = nccl_int(ctx.env("NCCL_MIN_NCHANNELS")), nccl_int(ctx.env("NCCL_MAX_NCHANNELS"))
    if lo is not None and hi is not None and lo > hi:
        problems.append((Status.WARN, f"NCCL_MIN_NCHANNELS={lo} > NCCL_MAX_NCHANNELS={hi}", "set min <= max"))
    seen = {k: v for k in ("NCCL_NVLS_ENABLE", "NCCL_PROTO", "NCCL_P2P_LEVEL", "NCCL_ALGO", "NCCL_MIN_NCHANNELS",
                           "NCCL_MAX_NCHANNELS", "NCCL_BUFFSIZE") if (v := ctx.env(k)) is not None}
    topo = _topology_words(ctx)
    if not problems:
        shown = " ".join(f"{k}={v}" for k, v in seen.items()) or "no NCCL variables"
        return Verdict(cid, Status.PASS, f"{shown} on {topo}")
    from sglwrap.preflight.model import SEVERITY

    status = max((p[0] for p in problems), key=lambda s: SEVERITY[s])
    return Verdict(cid, status, "; ".join(p[1] for p in problems) + f" ({topo})",
                   "; ".join(p[2] for p in problems))


def _forces_ll128(proto: str) -> bool:
    for part in proto.split(";"):
        body = part.split(":", 1)[-1].strip()
        excluded = body.startswith("^")
        tokens = {t.strip().upper() for t in body.lstrip("^").split(",")}
        if "LL128" in tokens and not excluded:
            return True
    return False


def _p2p_level(ctx: Context, level: str) -> list[tuple[Status, str, str]]:
    name = _LEGACY_LEVEL.get(level.strip(), level.strip())
    if name not in _P2P_LEVELS:
        return [(Status.WARN, f"NCCL_P2P_LEVEL={level} is not one of {', '.join(_P2P_LEVELS)} (case-sensitive): "
                 "NCCL ignores it silently (paths.cc:243-292)", "use an upper-case level such as PHB or SYS")]
    limit = _P2P_LEVELS.index(name)
    far = []
    for lk in ctx.facts.links:
        if lk.p2p_nvlink == "ok" or lk.nvlink_count > 0 or lk.common_ancestor is None:
            continue
        path = _NVML_TO_NCCL.get(lk.common_ancestor, "SYS")
        if _P2P_LEVELS.index(path) > limit:
            far.append(f"GPU{lk.a}-GPU{lk.b} {lk.common_ancestor}")
    if far:
        return [(Status.WARN, f"NCCL_P2P_LEVEL={level} disables P2P for {', '.join(far[:4])}"
                 + (f" (+{len(far) - 4} more)" if len(far) > 4 else "") + ": NCCL uses host shared memory there",
                 "measure NCCL_P2P_LEVEL=SYS with sglwrap bench-comm")]
    return []


def _topology_words(ctx: Context) -> str:
    f = ctx.facts
    if f.gpu_count < 2:
        return f"{f.gpu_count} GPU"
    if f.nvswitch:
        return f"{f.gpu_count} GPUs on NVSwitch"
    if f.all_pairs_nvlink:
        counts = sorted({lk.nvlink_count for lk in f.links})
        return f"{f.gpu_count} GPUs, NVLink between all pairs (NV{'/'.join(map(str, counts))}, no NVSwitch)"
    levels = sorted({lk.common_ancestor or "?" for lk in f.links})
    return f"{f.gpu_count} GPUs on PCIe ({'/'.join(levels)})"


def check_sglang_flags(ctx: Context) -> Verdict:
    """Every flag the launch will pass exists, exactly, in the installed SGLang."""
    cid, table = "sglang-flags", ctx.flags
    if table is None:
        return Verdict(cid, Status.SKIP, "SGLang's flag table is not available (SGLang not installed?)")
    want_ver = ctx.stack.sglang
    unread = table.stands_in_for or (want_ver if want_ver and table.version != want_ver else None)
    if unread:
        if ctx.args.unchecked:
            opts = [t for t in ctx.args.unchecked if t.startswith("-")]
            return Verdict(cid, Status.WARN, f"sglwrap has not read SGLang {unread}'s options; read against "
                           f"{table.version}'s (the nearest it has), {', '.join(opts) or ctx.args.unchecked[0]} "
                           "is unknown there and is passed on unchecked",
                           f"check the spelling against `python -m sglang.launch_server --help` of {unread}")
        return Verdict(cid, Status.SKIP, f"planned SGLang {unread} but the flag table is {table.version}'s (the "
                       "nearest release sglwrap has read)")
    bad: list[str] = []
    fixes: list[str] = []
    # unknown, ambiguous and wrongly typed options never get here: reading the command line refused them (64)
    abbrev = [f"{written} -> {exact}" for written, exact in ctx.args.abbreviations]
    bad += _profile_flags(ctx, fixes)
    if bad:
        return Verdict(cid, Status.BLOCK, f"SGLang {table.version}: " + "; ".join(bad), "; ".join(fixes))
    n = len(ctx.args.given())
    if abbrev:
        return Verdict(cid, Status.WARN, f"SGLang {table.version} accepts abbreviations: {', '.join(abbrev)}; a new "
                       "flag with the same prefix would make them ambiguous (exit 2)",
                       "write the exact flags: " + ", ".join(a.split(" -> ")[1] for a in abbrev))
    return Verdict(cid, Status.PASS, f"{n} user option(s) and the profile's settings exist in SGLang {table.version}")


def _profile_flags(ctx: Context, fixes: list[str]) -> list[str]:
    """Settings and features the profile turns into flags, with no spelling in this SGLang."""
    from sglwrap.settings import FEATURES, SETTINGS

    bad: list[str] = []
    if ctx.profile is None or ctx.flags is None:
        return bad
    flags = ctx.flags.flags
    for key in ctx.profile.sglang:
        cands = SETTINGS[key].flags if key in SETTINGS else ()
        if cands and not any(c in flags for c in cands):
            bad.append(f"profile setting {key} has no flag here (tried {', '.join(cands)})")
            fixes.append(f"remove sglang.{key} from profile {ctx.profile.name}")
    for name, mode in ctx.profile.features.items():
        feat = FEATURES.get(name)
        if feat is None:
            continue
        frags = feat.off_flags if mode == "off" else feat.on_flags if mode in ("require", "prefer") else ((),)
        if any(all(t in flags for t in frag if t.startswith("--")) for frag in frags):
            continue
        bad.append(f"feature {name}: {mode} needs one of {[' '.join(f) for f in frags]}")
        fixes.append(f"set features.{name}: auto in profile {ctx.profile.name}")
    return bad
