"""``--plot FILE``: each rank's free GPU memory through the startup stages as a PNG, the failure marked.

matplotlib is optional: it is imported here only, with the Agg backend, and its absence is a clear error.
"""

from __future__ import annotations

from pathlib import Path

from sglwrap.diagnose import Report
from sglwrap.diagnose.timeline import STAGES
from sglwrap.errors import SglwrapError
from sglwrap.fsutil import atomic_write_bytes
from sglwrap.plotting import png_bytes, pyplot

MAX_LINES = 32


def render_png(report: Report) -> bytes:
    """The plot as PNG bytes."""
    plt = pyplot(exit_code=2)
    fig, ax = plt.subplots(figsize=(9, 5), dpi=100)
    try:
        for r in report.ranks[:MAX_LINES]:
            if not r.points:
                continue
            xs = list(range(len(r.points)))
            ys = [p.avail_gib for p in r.points]
            name = f"{r.node}:{r.label}" if r.node else r.label
            ax.plot(xs, ys, marker="o", label=name)
            ax.set_xticks(xs, [p.label for p in r.points], rotation=30, ha="right", fontsize=8)
            if report.finding.outcome != "ok":  # the failure: after the rank's last reading
                ax.plot([xs[-1] + 0.5], [ys[-1]], "rX", markersize=12)
        f = report.finding
        if f.outcome != "ok":
            ax.axhline(0.0, color="red", linestyle="--", linewidth=1)
            ax.text(0.01, 0.02, f"{f.outcome} at {f.stage or '?'}", transform=ax.transAxes, color="red")
        ax.set_ylabel("free GPU memory (GiB)")
        ax.set_title(f"SGLang startup: {f.outcome}" + (f" ({f.stage})" if f.stage else ""))
        if any(r.points for r in report.ranks):
            ax.legend(fontsize=7, ncol=2)
        else:
            ax.text(0.5, 0.5, "no memory readings in the log", ha="center", transform=ax.transAxes)
        return png_bytes(fig)
    finally:
        plt.close(fig)


def write_plot(report: Report, path: Path) -> None:
    """Write the PNG atomically (temp file in the target directory, then rename)."""
    data = render_png(report)
    try:
        atomic_write_bytes(path.resolve(), data, mode=0o644)
    except OSError as e:
        raise SglwrapError(f"cannot write {path}: {e.strerror}", exit_code=2) from None


__all__ = ["STAGES", "render_png", "write_plot"]
