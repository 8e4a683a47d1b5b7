"""sglwrap: a launcher for SGLang servers with profiles, preflight checks and a memory accountant."""

__version__ = "0.1.0"
