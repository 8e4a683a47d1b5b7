"""Host traps that fail a launch on a machine that has the right GPUs: host-shm, host-noexec, host-port,
host-memlock, host-ram, host-disk.

``gather_hostenv`` reads the live machine (``/dev/shm``, mount flags, a test bind, rlimits, ``/proc/meminfo``, free
disk) once, before the checks run, and only when the facts are this host's (NVML); under ``--assume`` each check
says "skipped (--assume)". Each check is a pure rule (``*_verdict``) over those readings (``Context.hostenv``).
"""

from __future__ import annotations

import errno
import os
import resource
from collections.abc import Mapping, Sequence
from pathlib import Path

from sglwrap.preflight.model import Context, HostEnv, Status, Verdict

MIB, GIB = 2**20, 2**30
SHM_BLOCK = 512 * MIB  # NCCL's SHM transport maps buffers of several MiB per peer pair and channel
SHM_WARN = 4 * GIB
DISK_BLOCK = 512 * MIB
DISK_WARN = 4 * GIB  # FlashInfer/Triton/DeepGEMM JIT caches grow to a few GiB


def is_live(ctx: Context) -> bool:
    """Whether the facts describe this machine (NVML), so its files and sockets may be read."""
    return ctx.facts.source.split("+", 1)[0] == "nvml"


def _skipped(cid: str) -> Verdict:
    return Verdict(cid, Status.SKIP, "skipped (--assume): host traps are checked on the live host only")


def local_ranks(ctx: Context) -> int:
    """GPUs this node drives (the ranks that share its /dev/shm and RAM)."""
    return max(1, -(-ctx.args.gpus_needed // max(ctx.args.nnodes, 1)))


# --- /dev/shm ---------------------------------------------------------------------------------------------


def shm_verdict(total: int | None, free: int | None, ranks: int) -> Verdict:
    """/dev/shm of ``total``/``free`` bytes for ``ranks`` GPUs on this node (pure)."""
    cid = "host-shm"
    if total is None:
        return Verdict(cid, Status.WARN if ranks > 1 else Status.PASS, "no /dev/shm: NCCL's shared-memory "
                       "transport and SGLang's IPC need it", "mount a tmpfs on /dev/shm (docker: --shm-size 32g)")
    size = f"/dev/shm is {total / MIB:.0f} MiB ({(free or 0) / MIB:.0f} MiB free)"
    fix = "docker run --shm-size 32g (or --ipc=host); Kubernetes: an emptyDir with medium: Memory on /dev/shm"
    if ranks > 1 and (free or 0) < SHM_BLOCK:
        return Verdict(cid, Status.BLOCK, f"{size} for {ranks} GPUs: NCCL fails with 'unhandled system error' "
                       "('failed to extend /dev/shm/nccl-… : No space left on device'); 64 MiB is Docker's default",
                       fix)
    if (free or 0) < SHM_WARN:
        return Verdict(cid, Status.WARN, f"{size}: tight for NCCL buffers and SGLang's multimodal/IPC transfers", fix)
    return Verdict(cid, Status.PASS, size)


def _shm() -> tuple[int | None, int | None]:
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return None, None
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def check_host_shm(ctx: Context) -> Verdict:
    """/dev/shm large enough for NCCL's SHM transport (containers default to 64 MiB)."""
    if ctx.hostenv is None:
        return _skipped("host-shm")
    total, free = ctx.hostenv.shm
    return shm_verdict(total, free, local_ranks(ctx))


# --- noexec -----------------------------------------------------------------------------------------------


def jit_dirs(env: Mapping[str, str]) -> dict[str, str]:
    """Where JIT compilers write and load shared objects: role -> path."""
    import tempfile

    home = env.get("HOME") or os.path.expanduser("~")
    tmp = env.get("TMPDIR") or tempfile.gettempdir()
    return {
        "TMPDIR": tmp,
        "TRITON_CACHE_DIR": env.get("TRITON_CACHE_DIR") or os.path.join(env.get("TRITON_HOME") or home, ".triton",
                                                                        "cache"),
        # flashinfer/jit/env.py: $FLASHINFER_WORKSPACE_BASE (default $HOME)/.cache/flashinfer
        "FLASHINFER_WORKSPACE_BASE": os.path.join(env.get("FLASHINFER_WORKSPACE_BASE") or home, ".cache",
                                                  "flashinfer"),
        "TORCHINDUCTOR_CACHE_DIR": env.get("TORCHINDUCTOR_CACHE_DIR") or os.path.join(tmp, "torchinductor"),
    }


def existing_parent(path: str) -> str:
    """``path`` or its nearest existing ancestor (whose filesystem the JIT will write to)."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    return str(p)


def noexec_verdict(noexec: Sequence[tuple[str, str]]) -> Verdict:
    """``noexec``: (role, path) of JIT directories on a filesystem mounted noexec (pure)."""
    cid = "host-noexec"
    if not noexec:
        return Verdict(cid, Status.PASS, "JIT cache and temp directories are on executable filesystems")
    where = ", ".join(f"{role}={path}" for role, path in noexec)
    fixes = {"TMPDIR": "export TMPDIR=<dir on an exec filesystem>",
             "TRITON_CACHE_DIR": "export TRITON_CACHE_DIR=<dir on an exec filesystem>",
             "FLASHINFER_WORKSPACE_BASE": "export FLASHINFER_WORKSPACE_BASE=<dir on an exec filesystem>",
             "TORCHINDUCTOR_CACHE_DIR": "export TORCHINDUCTOR_CACHE_DIR=<dir on an exec filesystem>"}
    return Verdict(cid, Status.BLOCK, f"{where} mounted noexec: Triton/FlashInfer compile kernels there and load "
                   "them with dlopen, which fails ('failed to map segment from shared object: Operation not "
                   "permitted')", "; ".join(fixes[r] for r, _ in noexec) + " (or remount without noexec)")


def _noexec(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    bad: list[tuple[str, str]] = []
    for role, path in jit_dirs(env).items():
        try:
            if os.statvfs(existing_parent(path)).f_flag & os.ST_NOEXEC:
                bad.append((role, path))
        except OSError:
            continue
    return tuple(bad)


def check_host_noexec(ctx: Context) -> Verdict:
    """/tmp, $TRITON_CACHE_DIR and the FlashInfer/Inductor caches must allow exec (JIT kernels are dlopen'ed)."""
    if ctx.hostenv is None:
        return _skipped("host-noexec")
    return noexec_verdict(list(ctx.hostenv.noexec))


# --- port -------------------------------------------------------------------------------------------------


def port_in_use(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be bound (the OS error), or None when it can (bound and released at once)."""
    import socket  # live hosts only: --assume runs never bind

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as e:
        return f"cannot resolve {host}: {e}"
    fam, _, _, _, addr = infos[0]
    with socket.socket(fam, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: TIME_WAIT is no conflict
        try:
            s.bind(addr)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                return f"[Errno {e.errno}] Address already in use"
            if e.errno == errno.EADDRNOTAVAIL:
                return f"[Errno {e.errno}] {host} is not an address of this host"
            if e.errno == errno.EACCES:
                return f"[Errno {e.errno}] permission denied (ports below 1024 need privileges)"
            return str(e)
    return None


def launch_ports(ctx: Context) -> dict[str, int]:
    """flag -> port this node binds: ``--port`` and the other ports the user pinned (``--nccl-port``, ...); empty
    on a node rank other than 0, which serves no HTTP port."""
    if ctx.args.nnodes > 1 and ctx.args.node_rank != 0:
        return {}
    ports = {"--port": ctx.args.port}
    for dest, value in sorted(ctx.args.given_values.items()):  # other ports the user pinned (--nccl-port, ...)
        if dest.endswith("_port") and isinstance(value, int) and not isinstance(value, bool) and value > 0:
            ports.setdefault(ctx.args.flag_for(dest) or dest, value)
    return ports


def check_host_port(ctx: Context) -> Verdict:
    """The HTTP port must be free: SGLang binds it after loading the model (minutes lost) and exits on
    'Address already in use'."""
    cid = "host-port"
    if ctx.hostenv is None:
        return _skipped(cid)
    if ctx.args.nnodes > 1 and ctx.args.node_rank != 0:
        return Verdict(cid, Status.PASS, f"node rank {ctx.args.node_rank} serves no HTTP port")
    host, ports, busy = ctx.args.host, ctx.hostenv.ports, ctx.hostenv.busy
    if not busy:
        return Verdict(cid, Status.PASS, f"{host}: {', '.join(f'{f} {p}' for f, p in ports.items())} free")
    flag, port, why = busy[0]
    more = "".join(f"; {f} {p}: {w}" for f, p, w in busy[1:])
    return Verdict(cid, Status.BLOCK, f"--host {host} {flag} {port}: {why}{more} (SGLang binds the HTTP port only after "
                   "loading the model, sgl-project/sglang#16556)",
                   f"pass another {flag} (e.g. {port + 10}), or stop what listens there (ss -ltnp 'sport = :{port}')")


# --- memlock ----------------------------------------------------------------------------------------------


def needs_rdma(ctx: Context) -> str | None:
    """Why this launch registers memory with an RDMA NIC (multi-node NCCL, DeepEP, Mooncake, disaggregation)."""
    a = ctx.args
    if a.nnodes > 1:
        return f"--nnodes {a.nnodes} (NCCL over InfiniBand/RoCE)"
    a2a = a.get("moe_a2a_backend")
    if a2a not in (None, "none"):
        return f"--moe-a2a-backend {a2a} (NVSHMEM)"
    mode = a.get("disaggregation_mode")
    if mode not in (None, "null"):
        return f"--disaggregation-mode {mode} (KV transfer over RDMA)"
    return None


def memlock_verdict(soft: int, why: str | None) -> Verdict:
    """``ulimit -l`` (soft, bytes; RLIM_INFINITY for unlimited) against RDMA use ``why`` (pure)."""
    cid = "host-memlock"
    text = "unlimited" if soft == resource.RLIM_INFINITY else f"{soft // 1024} KiB"
    if soft == resource.RLIM_INFINITY:
        return Verdict(cid, Status.PASS, f"ulimit -l {text}")
    if why is None:
        return Verdict(cid, Status.PASS, f"ulimit -l {text}; no RDMA in this launch")
    return Verdict(cid, Status.BLOCK if soft < 64 * MIB else Status.WARN,
                   f"ulimit -l {text} with {why}: registering pinned buffers fails ('ibv_reg_mr failed: Cannot "
                   "allocate memory', NCCL 'unhandled system error')",
                   "ulimit -l unlimited (docker: --ulimit memlock=-1; systemd: LimitMEMLOCK=infinity)")


def check_host_memlock(ctx: Context) -> Verdict:
    """``ulimit -l`` for pinned memory registered with RDMA NICs."""
    if ctx.hostenv is None:
        return _skipped("host-memlock")
    return memlock_verdict(ctx.hostenv.memlock_soft, needs_rdma(ctx))


# --- host RAM ---------------------------------------------------------------------------------------------


def pinned_host_bytes(ctx: Context) -> tuple[int, list[str]]:
    """Host memory the launch pins on this node (bytes) and what asks for it: ``--hicache-size`` GB and
    ``--cpu-offload-gb`` per rank."""
    a, ranks = ctx.args, local_ranks(ctx)
    total, parts = 0, []
    if a.get("enable_hierarchical_cache") and a.get("hicache_size"):
        gb = float(a.get("hicache_size"))
        total += int(gb * GIB) * ranks
        parts.append(f"--hicache-size {gb:g} GB x {ranks} rank(s)")
    off = a.get("cpu_offload_gb")
    if off:
        total += int(float(off) * GIB) * ranks
        parts.append(f"--cpu-offload-gb {float(off):g} x {ranks} rank(s)")
    return total, parts


def ram_verdict(need: int, parts: Sequence[str], available: int | None) -> Verdict:
    """Pinned host buffers ``need`` against ``MemAvailable`` (pure)."""
    cid = "host-ram"
    if not need:
        return Verdict(cid, Status.PASS, "no pinned host buffers requested (no hierarchical cache, no CPU offload)")
    if available is None:
        return Verdict(cid, Status.SKIP, "MemAvailable unknown (no /proc/meminfo)")
    what = f"{', '.join(parts)} = {need / GIB:.1f} GiB pinned, {available / GIB:.1f} GiB available"
    if need > available:
        return Verdict(cid, Status.BLOCK, f"{what}: the host pool allocation fails or the OOM killer ends the "
                       "server", "lower --hicache-size / --cpu-offload-gb, or free host memory")
    if need > 0.8 * available:
        return Verdict(cid, Status.WARN, f"{what}: little left for the page cache of weight loading",
                       "lower --hicache-size / --cpu-offload-gb")
    return Verdict(cid, Status.PASS, what)


def mem_available() -> int | None:
    """``MemAvailable`` of /proc/meminfo in bytes."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_host_ram(ctx: Context) -> Verdict:
    """Free host RAM against the pinned host buffers the launch will ask for."""
    if ctx.hostenv is None:
        return _skipped("host-ram")
    need, parts = pinned_host_bytes(ctx)
    return ram_verdict(need, parts, ctx.hostenv.mem_available)


# --- disk for JIT caches ----------------------------------------------------------------------------------


def disk_verdict(free: Mapping[str, tuple[str, int]]) -> Verdict:
    """``free``: role -> (path, free bytes) of the JIT cache filesystems (pure)."""
    cid = "host-disk"
    if not free:
        return Verdict(cid, Status.SKIP, "no JIT cache directory could be measured")
    role, (path, low) = min(free.items(), key=lambda kv: kv[1][1])
    what = f"{role}={path} has {low / GIB:.1f} GiB free"
    fix = f"free space there, or point {role} at a larger filesystem"
    if low < DISK_BLOCK:
        return Verdict(cid, Status.BLOCK, f"{what}: Triton/FlashInfer JIT writes fail ('No space left on device')",
                       fix)
    if low < DISK_WARN:
        return Verdict(cid, Status.WARN, f"{what}: JIT caches grow to a few GiB", fix)
    return Verdict(cid, Status.PASS, f"JIT caches have room (least: {what})")


def _disk_free(env: Mapping[str, str]) -> dict[str, tuple[str, int]]:
    free: dict[str, tuple[str, int]] = {}
    for role, path in jit_dirs(env).items():
        try:
            st = os.statvfs(existing_parent(path))
        except OSError:
            continue
        free[role] = (path, st.f_bavail * st.f_frsize)
    return free


def check_host_disk(ctx: Context) -> Verdict:
    """Free disk where the JIT caches go (Triton, FlashInfer, Inductor, TMPDIR)."""
    if ctx.hostenv is None:
        return _skipped("host-disk")
    return disk_verdict(ctx.hostenv.disk_free)


def gather_hostenv(ctx: Context) -> HostEnv | None:
    """This machine's readings for the host checks (``/dev/shm``, mount flags, a test bind of the launch's ports,
    ``ulimit -l``, ``/proc/meminfo``, free disk), taken once before the checks; None when the facts describe another
    machine (``--assume``, a captured host)."""
    if not is_live(ctx):
        return None
    env = {**ctx.process_environ, **ctx.environ}
    ports = launch_ports(ctx)
    busy = tuple((flag, p, why) for flag, p in ports.items() if (why := port_in_use(ctx.args.host, p)) is not None)
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return HostEnv(shm=_shm(), noexec=_noexec(env), ports=ports, busy=busy, memlock_soft=soft,
                   mem_available=mem_available(), disk_free=_disk_free(env))


HOSTENV_CHECKS = (check_host_shm, check_host_noexec, check_host_port, check_host_memlock, check_host_ram,
                  check_host_disk)
