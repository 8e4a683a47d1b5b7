"""matplotlib for the ``--plot`` options: imported only when a plot is asked for, always with the Agg backend."""

from __future__ import annotations

import io
from typing import Any

from sglwrap.errors import SglwrapError

INSTALL_HINT = "pip install matplotlib"


def pyplot(error: type[SglwrapError] = SglwrapError, *, exit_code: int | None = None,
           hint: str = INSTALL_HINT) -> Any:
    """``matplotlib.pyplot`` on the Agg backend; ``error`` (with ``exit_code``) when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise error(f"--plot needs matplotlib: {hint}", exit_code=exit_code) from None
    return plt


def require_matplotlib(verb: str) -> None:
    """A UsageError (64) before any work when ``--plot`` is asked for and matplotlib is not installed."""
    from sglwrap.errors import UsageError

    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError(f"{verb}: --plot needs matplotlib, which is not installed: pip install 'sglwrap[plot]' "
                         "(or matplotlib), or drop --plot") from None


def png_bytes(fig: Any, **savefig: Any) -> bytes:
    """Lay ``fig`` out and render it to PNG bytes (the caller closes it)."""
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", **savefig)
    return buf.getvalue()
