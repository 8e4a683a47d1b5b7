"""The one error hierarchy of sglwrap and the exit codes a systemd unit can act on."""

from __future__ import annotations

EXIT_OK = 0
EXIT_USAGE = 64  # EX_USAGE: the command line was wrong
EXIT_CONFIG = 78  # EX_CONFIG: a configuration that must not be retried (Restart-PreventExitStatus=78)


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


class ProfileError(SglwrapError):
    """A profile file is missing, malformed or holds a bad value (exit 78)."""

    exit_code = EXIT_CONFIG


class ConfigError(SglwrapError):
    """Anything else about the configuration that retrying cannot fix (exit 78)."""

    exit_code = EXIT_CONFIG
