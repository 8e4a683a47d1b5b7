"""Render a systemd service unit that runs SGLang through ``sglwrap launch`` (research-deploy §2).

Choices, each for a reason:
- ``KillMode=mixed``: SIGTERM to the main PID only (SGLang drains; its schedulers have no SIGTERM handler),
  SIGKILL for the rest of the cgroup after ``TimeoutStopSec``.
- ``TimeoutStartSec=45min``: weight loading plus CUDA-graph capture outlasts systemd's 90 s default.
- ``Restart=on-failure`` with ``RestartPreventExitStatus=2 64 78``: SGLang's own usage error (argparse exits 2),
  sglwrap's usage error or a blocked profile cannot be fixed by restarting.
- No ``--profile`` in ``ExecStart`` unless one was asked for: ``SGLWRAP_PROFILE`` in the env file chooses.
- Secrets (``--api-key``, ``--admin-api-key``, any flag whose name has a word key/token/secret/password) never go into
  the unit file, which is world-readable: ``ExecStart`` says ``${SGLWRAP_API_KEY}``, systemd fills it in from the
  env file (SGLang 0.5.23 has no environment variable of its own for them), and ``ExecStartPre`` refuses to start
  with the variable unset or empty (an empty ``--api-key`` would serve without authentication).
- ``RuntimeDirectory=sglwrap/%N`` (mode 0700) holds the injector's files: one directory per unit, because
  systemd deletes a unit's runtime directory when it stops and two units sharing ``/run/sglwrap`` would
  overwrite each other's ``sitecustomize.py``.
- ``--notify``: ``Type=notify`` + ``NotifyAccess=main``; the unit is active only once ``/health`` answers 200.

``ExecStart=`` arguments are quoted per systemd.service(5) "Command lines": ``%`` → ``%%``, ``$`` → ``$$``,
C-style escapes inside double quotes, and a word is quoted whenever it is empty or holds whitespace, quotes,
backslashes, control characters or is a lone ``;``.
"""

from __future__ import annotations

import os
import shlex
import site
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

from sglwrap import __version__
from sglwrap.errors import UsageError
from sglwrap.record import Record, field

ENV_FILE: Final = "-/etc/sglwrap/%N.env"
TIMEOUT_START: Final = "45min"
# With --rehearse the start also holds the rehearsal: at most its default timeout's cap (30 min) before the load.
TIMEOUT_START_REHEARSE: Final = "75min"
TIMEOUT_STOP_S: Final = 330  # > longest request + SGLang's 15 s scheduler exit + margin
STOP_GRACE_S: Final = 300  # the supervisor's own deadline, before systemd's SIGKILL at TimeoutStopSec
_SAFE: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.,/:=+@%$^~[]{}()!?#*&<>|")


SECRET_WORDS: Final = frozenset({"key", "token", "secret", "password", "passwd", "credential", "credentials"})
SECRET_MISSING_EXIT: Final = 78


class Secret(Record):
    """An SGLang flag whose value moves from ``ExecStart`` to a variable of the env file."""

    flag: str
    variable: str


class UnitSpec(Record):
    """What goes into the unit. ``sglang_args`` holds :class:`Secret` references in place of secret values."""

    profile: str | None
    sglang_args: tuple[str | Secret, ...]
    command: tuple[str, ...]  # how to run sglwrap: (absolute executable,) or (python, "-m", "sglwrap")
    notify: bool = False
    watchdog_sec: int | None = None
    description: str | None = None
    environment: Mapping[str, str] = field(default_factory=dict)
    rehearse: bool = False  # ExecStart runs `launch --rehearse`


def quote_word(word: str) -> str:
    """One ``ExecStart=`` word, so that systemd hands exactly ``word`` to the program."""
    out = []
    for ch in word:
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        elif ch == "%":
            out.append("%%")
        elif ch == "$":
            out.append("$$")
        else:
            out.append(ch)
    text = "".join(out)
    if word and word != ";" and all(ch in _SAFE for ch in word):
        return text
    return f'"{text}"'


def is_secret_flag(flag: str) -> bool:
    """Whether a flag's name says it carries a secret: a ``-``-separated word key/token/secret/password.

    ``--api-key`` and ``--ssl-keyfile-password`` are; ``--ssl-keyfile`` (a path) and ``--max-total-tokens`` are not.
    """
    words = flag.lstrip("-").lower().replace("_", "-").split("-")
    return bool(SECRET_WORDS & set(words))


def secret_variable(flag: str) -> str:
    """The env-file variable for a secret flag: ``--admin-api-key`` -> ``SGLWRAP_ADMIN_API_KEY``."""
    return "SGLWRAP_" + flag.lstrip("-").upper().replace("-", "_")


def move_secrets(args: Sequence[str], flags: Sequence[str] = ()) -> tuple[tuple[str | Secret, ...], list[Secret]]:
    """Replace the value of every secret flag in ``args`` by a :class:`Secret`; returns the args and the secrets.

    ``flags`` are the option names the SGLang release knows (``--api-key=V`` and ``--api-key V`` are both read);
    with none given every ``--word`` is a candidate.
    """
    known = set(flags)
    out: list[str | Secret] = []
    secrets: dict[str, Secret] = {}
    i = 0
    while i < len(args):
        tok = args[i]
        name, eq, _value = tok.partition("=")
        if name.startswith("--") and is_secret_flag(name) and (not known or name in known):
            secret = secrets.setdefault(name, Secret(name, secret_variable(name)))
            if eq:
                out += [name, secret]
                i += 1
                continue
            if i + 1 < len(args):
                out += [name, secret]
                i += 2
                continue
        out.append(tok)
        i += 1
    return tuple(out), list(secrets.values())


def quote_assignment(name: str, value: str) -> str:
    """An ``Environment=`` value: ``"NAME=value"`` with quotes/backslashes escaped and ``%`` doubled."""
    text = f"{name}={value}".replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return f'"{text}"'


def exec_start(spec: UnitSpec) -> str:
    """The ``ExecStart=`` value: secrets as ``${VARIABLE}``, which systemd expands to exactly one word."""
    words: list[str | Secret] = [*spec.command, "launch"]
    if spec.profile is not None:
        words += ["--profile", spec.profile]
    if spec.notify:
        words.append("--notify")
    if spec.rehearse:
        words.append("--rehearse")
    words += ["--", *spec.sglang_args]
    return " ".join("${" + w.variable + "}" if isinstance(w, Secret) else quote_word(w) for w in words)


def secrets_of(spec: UnitSpec) -> list[Secret]:
    """The secrets ``ExecStart`` reads from the env file, in order, once each."""
    seen: dict[str, Secret] = {}
    for w in spec.sglang_args:
        if isinstance(w, Secret):
            seen.setdefault(w.variable, w)
    return list(seen.values())


def secret_check(secrets: Sequence[Secret]) -> str:
    """An ``ExecStartPre=`` that exits 78 (no restart) when a secret variable is unset or empty."""
    tests = " && ".join(f'test -n "${{{s.variable}}}"' for s in secrets)  # sh expands it: quote_word writes $$
    names = ", ".join(s.variable for s in secrets)
    msg = f"sglwrap: {names} must be set in /etc/sglwrap/%N.env (the unit reads its secrets from there)"
    script = f"{tests} || {{ echo '{msg}' >&2; exit {SECRET_MISSING_EXIT}; }}"
    return f"/bin/sh -c {quote_word(script).replace('%%N', '%N')}"


def sglwrap_command(explicit: str | None = None) -> tuple[tuple[str, ...], dict[str, str]]:
    """How the unit should start sglwrap, and any environment that needs (PYTHONPATH for a checkout).

    Order: ``explicit``; the ``sglwrap`` console script next to this interpreter (same venv); the script this
    process was started as; else this interpreter with ``-m sglwrap``.
    """
    if explicit:
        path = Path(explicit)
        if not path.is_absolute() or not os.access(path, os.X_OK) or path.is_dir():
            raise UsageError(f"--sglwrap-bin {explicit}: expected the absolute path of an executable file")
        return (str(path),), {}
    candidates = [Path(sys.executable).parent / "sglwrap", Path(sys.argv[0]) if sys.argv else None]
    for cand in candidates:
        if cand is not None and cand.name == "sglwrap" and cand.is_file() and os.access(cand, os.X_OK):
            return (str(cand.absolute()),), {}
    env: dict[str, str] = {}
    root = Path(__file__).resolve().parent.parent
    if not _on_default_path(root):
        env["PYTHONPATH"] = str(root)  # running from a checkout: the service's python must find it too
    return (os.path.abspath(sys.executable), "-m", "sglwrap"), env


def _on_default_path(root: Path) -> bool:
    dirs = list(site.getsitepackages()) + [site.getusersitepackages()]
    return any(root == Path(d).resolve() for d in dirs if d)


def render_unit(spec: UnitSpec, *, invocation: Sequence[str] = ()) -> str:
    """The whole unit file text."""
    desc = spec.description or ("SGLang server via sglwrap" + (f" (profile {spec.profile})" if spec.profile else ""))
    lines = [
        f"# Generated by sglwrap {__version__}" + (f": {_one_line(shlex.join(invocation))}" if invocation else ""),
        "# Save as /etc/systemd/system/NAME.service; per-host variables (SGLWRAP_PROFILE=..., NCCL_SOCKET_IFNAME, …)",
        "# go in /etc/sglwrap/NAME.env. Then: systemctl daemon-reload && systemctl enable --now NAME",
        *([] if spec.profile is not None else
          ["# No --profile below: SGLWRAP_PROFILE in /etc/sglwrap/NAME.env chooses it (unset: baseline)."]),
        "[Unit]",
        f"Description={desc.replace(chr(10), ' ').replace('%', '%%')}",
        "After=network-online.target nvidia-persistenced.service",
        "Wants=network-online.target",
        "StartLimitIntervalSec=1800",
        "StartLimitBurst=3",
        "",
        "[Service]",
    ]
    if spec.notify:
        lines += ["# sglwrap stays the main process and sends READY=1 once SGLang's /health answers 200",
                  "Type=notify", "NotifyAccess=main"]
        if spec.watchdog_sec:
            lines.append(f"WatchdogSec={spec.watchdog_sec}")
    else:
        lines += ["# sglwrap execs SGLang in the same PID: signals and exit codes are SGLang's own",
                  "Type=exec"]
    lines += ["# No User=: the unit runs as root, like the shell you ran `sglang serve` from, since SGLang needs",
              "# /dev/nvidia*, the model files and writable caches (HF, Triton, FlashInfer) under its HOME. To run it",
              "# unprivileged add User=NAME (in the video group, owning HOME and the caches) and Environment=HOME=...",
              f"EnvironmentFile={ENV_FILE}", quote_env("PYTHONUNBUFFERED", "1")]
    if spec.notify:
        lines.append(quote_env("SGLWRAP_STOP_GRACE", str(STOP_GRACE_S)))
    for name, value in sorted(spec.environment.items()):
        lines.append(quote_env(name, value))
    secrets = secrets_of(spec)
    if secrets:
        lines += [f"# Secrets are not written here (this file is world-readable): {_secret_list(secrets)}",
                  "# come from /etc/sglwrap/NAME.env (mode 0600, owner root); systemd puts them into ExecStart as",
                  "# ${NAME}. SGLang has no environment variable for them. Without them the unit does not start:",
                  f"ExecStartPre={secret_check(secrets)}"]
    if spec.rehearse:
        lines += ["# --rehearse: before loading the real weights, the same plan runs once with dummy weights, one",
                  "# request and a clean stop; a failure exits 78 (no restart loop). A restart or reboot with the",
                  "# same fingerprint (argv, profile, env, packages, driver, GPUs, config.json) skips it; an upgrade",
                  "# rehearses again."]
    lines += [
        f"ExecStart={exec_start(spec)}",
        "RuntimeDirectory=sglwrap/%N",
        "RuntimeDirectoryMode=0700",
        "# SIGTERM to the main process only, so SGLang drains; SIGKILL for the rest after TimeoutStopSec",
        "KillMode=mixed",
        "KillSignal=SIGTERM",
        *(["# the rehearsal (skipped when its fingerprint passed before) + weight loading + CUDA-graph capture",
           f"TimeoutStartSec={TIMEOUT_START_REHEARSE}"] if spec.rehearse else
          ["# weight loading + CUDA-graph capture", f"TimeoutStartSec={TIMEOUT_START}"]),
        f"TimeoutStopSec={TIMEOUT_STOP_S}",
        "Restart=on-failure",
        "RestartSec=15",
        "# 2: SGLang refused its arguments, 64: sglwrap's command line, 78: profile blocked or invalid;",
        "# restarting cannot fix any of them",
        "RestartPreventExitStatus=2 64 78",
        "LimitMEMLOCK=infinity",
        "LimitNOFILE=1048576",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return "\n".join(lines) + "\n"


def _secret_list(secrets: Sequence[Secret]) -> str:
    return ", ".join(f"{s.flag} ({s.variable})" for s in secrets)


def redact(args: Sequence[str | Secret]) -> list[str]:
    """The args for people to read: each secret as ``$VARIABLE``."""
    return ["$" + a.variable if isinstance(a, Secret) else a for a in args]


def _one_line(text: str) -> str:
    return text.replace("\r", "\\r").replace("\n", "\\n")


def quote_env(name: str, value: str) -> str:
    """One ``Environment=`` line."""
    return f"Environment={quote_assignment(name, value)}"


def unit_python(command: Sequence[str]) -> str | None:
    """The interpreter ``ExecStart`` runs: ``command[0]`` for ``python -m sglwrap``, else the script's ``#!`` line."""
    if len(command) >= 3 and command[1] == "-m":
        return command[0]
    try:
        with open(command[0], "rb") as fh:
            first = fh.readline(512).decode("utf-8", "replace").strip()
    except OSError:
        return None
    if not first.startswith("#!"):
        return None
    words = first[2:].split()
    if not words:
        return None
    if Path(words[0]).name == "env" and len(words) > 1:
        import shutil

        return shutil.which(words[-1])
    return words[0]


_CHECK = """import importlib.metadata as m, importlib.util as u, json
def v(n):
    try:
        return m.version(n)
    except Exception:
        return None
print(json.dumps({"sglwrap": u.find_spec("sglwrap") is not None, "sglang": v("sglang")}))
"""


def interpreter_warnings(command: Sequence[str], environment: Mapping[str, str]) -> list[str]:
    """What the unit's interpreter lacks (sglwrap, SGLang), as sentences for stderr; empty when it has both."""
    import json
    import subprocess

    python = unit_python(command)
    if python is None:
        return [f"cannot tell which Python {command[0]} runs (no #! line); check it has sglwrap and SGLang"]
    # systemd starts services with a clean environment plus the unit's Environment= lines: do the same
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")} | dict(environment)
    try:
        proc = subprocess.run([python, "-c", _CHECK], capture_output=True, text=True, timeout=60, check=False,
                              env=env, cwd="/")
        found = json.loads(proc.stdout) if proc.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        found = None
    if found is None:
        return [f"{python} (the unit's interpreter) could not be run; ExecStart will fail"]
    out = []
    if not found.get("sglwrap"):
        out.append(f"sglwrap is not installed for {python} (the unit's interpreter): "
                   f"{python} -m pip install sglwrap, or pass --sglwrap-bin PATH")
    if not found.get("sglang"):
        out.append(f"SGLang is not installed for {python} (the unit's interpreter), so the service would exit "
                   f"78 at start: {python} -m pip install sglang, or put SGLWRAP_PYTHON=<python that has it> in "
                   "/etc/sglwrap/NAME.env")
    return out
