"""The one error hierarchy of sglwrap and the exit codes a systemd unit can act on."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FINDING = 1  # the verb worked and found something: a downgrade, a memory risk, a failed run in a log
EXIT_UNREADABLE = 2  # diagnose: no input it could read
EXIT_USAGE = 64  # EX_USAGE: the command line was wrong (sglwrap's options, or SGLang's args SGLang would refuse)
EXIT_SOFTWARE = 70  # EX_SOFTWARE: a bug in sglwrap (never for anything a user typed or set)
EXIT_CONFIG = 78  # EX_CONFIG: a configuration that must not be retried (Restart-PreventExitStatus=78)
EXIT_INTERRUPTED = 130  # Ctrl-C

# The one exit-code table: verb -> (code, meaning). README shows it, each verb's --help shows its rows, and a test
# checks both against this. Codes every verb shares come last.
_SHARED: tuple[tuple[int, str], ...] = (
    (EXIT_USAGE, "usage error: an sglwrap option, or SGLang args that SGLang itself would refuse"),
    (EXIT_SOFTWARE, "internal error in sglwrap (a bug: the traceback is written to a file)"),
    (EXIT_INTERRUPTED, "interrupted (Ctrl-C)"),
)
EXIT_CODES: dict[str, tuple[tuple[int, str], ...]] = {
    "launch": ((EXIT_OK, "--dry-run planned (a real launch execs SGLang: its own exit code from then on)"),
               (EXIT_CONFIG, "bad profile or config, SGLang missing, or blocked by preflight / a sure OOM"),
               *_SHARED),
    "preflight": ((EXIT_OK, "ok"), (EXIT_FINDING, "ok after a downgrade"), (EXIT_CONFIG, "blocked, or a bad profile"),
                  *_SHARED),
    "memory": ((EXIT_OK, "fits (or fits tightly: a warning)"),
               (EXIT_FINDING, "risk beyond the model's uncertainty, or an OOM that rests on an estimated checkpoint size"),
               (EXIT_CONFIG, "sure OOM (the checkpoint's size read), or a bad profile"), *_SHARED),
    "diagnose": ((EXIT_OK, "the server came up (or a run completed)"), (EXIT_FINDING, "a failure was found"),
                 (EXIT_UNREADABLE, "no input could be read (missing, empty or binary)"), *_SHARED),
    "profiles": ((EXIT_OK, "ok"), (EXIT_CONFIG, "a profile is missing or broken"), *_SHARED),
    "bench-comm": ((EXIT_OK, "measured"), (EXIT_FINDING, "some configurations failed or hung"),
                   (EXIT_CONFIG, "cannot run here (no GPUs, bad profile)"), *_SHARED),
    "systemd-unit": ((EXIT_OK, "unit printed"), (EXIT_CONFIG, "bad profile"), *_SHARED),
    "rehearse": ((EXIT_OK, "passed: SGLang came up with dummy weights and answered one request"),
                 (EXIT_CONFIG, "failed (stage, cause and fix printed), or cannot rehearse here (GPUs held by "
                               "another process, no GPU, multi-node, preflight blocked)"), *_SHARED),
}


def exit_codes_text(verb: str) -> str:
    """The exit-code rows of ``verb`` as shown at the end of its ``--help``."""
    rows = EXIT_CODES.get(verb, _SHARED)
    return "exit codes:\n" + "\n".join(f"  {code:>3}  {meaning}" for code, meaning in rows)


class SglwrapError(Exception):
    """An expected failure with a message for the user and the exit code to leave with."""

    exit_code: int = EXIT_CONFIG

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code

    @property
    def message(self) -> str:
        return str(self.args[0])


class UsageError(SglwrapError):
    """The sglwrap command line itself was wrong (exit 64)."""

    exit_code = EXIT_USAGE


class ArgValueError(UsageError):
    """A value of SGLang's args that SGLang cannot run with (``--mem-fraction-static 85``): a usage error for the
    ``memory`` verb, a block for preflight and launch, which judge a launch rather than an sglwrap command."""


class ProfileError(SglwrapError):
    """A profile file is missing, malformed or holds a bad value (exit 78)."""

    exit_code = EXIT_CONFIG


class ConfigError(SglwrapError):
    """Anything else about the configuration that retrying cannot fix (exit 78)."""

    exit_code = EXIT_CONFIG
