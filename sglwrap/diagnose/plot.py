"""``--plot FILE``: each rank's free GPU memory on one stage axis shared by all ranks, target and draft apart.

Every reading is placed by what it measures (before weights, after weights, after the KV pool, …), not by its index,
so a rank with a missing line is not shifted. Only the failing rank is marked; the y = 0 line is drawn for memory
failures only. matplotlib is optional: imported here only, with the Agg backend; its absence is a clear error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from sglwrap.diagnose import Report
from sglwrap.diagnose.timeline import Point, RankMemory
from sglwrap.errors import SglwrapError
from sglwrap.fsutil import atomic_write_bytes
from sglwrap.plotting import png_bytes, pyplot

MAX_LINES: Final = 32
# The shared stage axis: what each reading measures, in SGLang's startup order.
AXIS: Final = ("before weights", "after weights", "after KV pool", "before graphs", "after graphs",
               "post-capture KV")


def x_of(p: Point) -> int:
    """The position of a reading on the shared stage axis."""
    if p.label in AXIS:
        return AXIS.index(p.label)
    if p.label.startswith("before") and p.label.endswith("graph"):
        return AXIS.index("before graphs")
    return AXIS.index("after graphs")


def _series(r: RankMemory) -> tuple[list[int], list[float]]:
    by_x: dict[int, float] = {}
    for p in r.points:
        by_x.setdefault(x_of(p), p.avail_gib)  # the first reading of a kind (later graph captures add no point)
    xs = sorted(by_x)
    return xs, [by_x[x] for x in xs]


def _draw(ax: Any, report: Report, ranks: list[tuple[str, RankMemory]], title: str) -> set[int]:
    f = report.finding
    used: set[int] = set()
    for name, r in ranks[:MAX_LINES]:
        xs, ys = _series(r)
        if not xs:
            continue
        used.update(xs)
        (line,) = ax.plot(xs, ys, marker="o", label=name, linestyle="--" if name.endswith("draft") else "-")
        failing = f.failed is not None and (r.node, r.label) == f.failed and not name.endswith("draft")
        if f.outcome != "ok" and failing:
            ax.plot([xs[-1] + 0.4], [ys[-1]], "X", color="red", markersize=12)
            ax.annotate(f"{f.outcome} at {f.stage}", (xs[-1] + 0.4, ys[-1]), color="red", fontsize=8,
                        xytext=(6, 6), textcoords="offset points")
    if f.outcome == "oom":
        ax.axhline(0.0, color="red", linestyle=":", linewidth=1)
    ax.set_title(title, fontsize=10)
    ax.set_ylabel("free GPU memory (GiB)")
    if used:
        ticks = list(range(min(used), max(used) + 1))
        ax.set_xticks(ticks, [AXIS[t] for t in ticks], rotation=20, ha="right", fontsize=8)
        ax.set_xlim(min(used) - 0.3, max(used) + 0.9)
        ax.legend(fontsize=7, ncol=2, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        ax.text(0.5, 0.5, "no memory readings in the log", ha="center", transform=ax.transAxes)
    return used


def _name(r: RankMemory) -> str:
    label = r.label if r.label != "-" else "untagged rank"
    return f"{r.node}:{label}" if r.node else label


def render_png(report: Report) -> bytes:
    """The plot as PNG bytes: the target's workers on top, the draft workers (if any) below."""
    plt = pyplot(exit_code=2)
    target = [(_name(r), r) for r in report.ranks]
    draft = [(f"{n} draft", r.draft) for n, r in target if r.draft is not None]
    rows = 2 if draft else 1
    fig, axes = plt.subplots(rows, 1, figsize=(10, 4.5 * rows), dpi=100, squeeze=False)
    try:
        f = report.finding
        title = f"SGLang startup: {f.outcome}" + (f" ({f.stage})" if f.stage else "")
        if f.outcome != "ok" and f.failed is None:
            title += " — the error line names no rank"
        _draw(axes[0][0], report, target, title + (" — target model" if draft else ""))
        if draft:
            _draw(axes[1][0], report, draft, "draft model (speculative decoding)")
        return png_bytes(fig)
    finally:
        plt.close(fig)


def plot_paths(path: Path, n: int) -> list[Path]:
    """Where the PNGs of ``n`` runs go: ``path`` itself for one run, ``stem-runK.png`` beside it for several."""
    if n <= 1:
        return [path]
    return [path.with_name(f"{path.stem}-run{i + 1}{path.suffix}") for i in range(n)]


def write_plot(reports: Report | list[Report], path: Path) -> list[Path]:
    """Write one PNG per run atomically (temp file in the target directory, then rename); return the paths."""
    runs = [reports] if isinstance(reports, Report) else list(reports)
    out = []
    for report, target in zip(runs, plot_paths(path, len(runs))):
        data = render_png(report)
        try:
            atomic_write_bytes(target.resolve(), data, mode=0o644)
        except OSError as e:
            raise SglwrapError(f"cannot write {target}: {e.strerror}", exit_code=2) from None
        out.append(target)
    return out


__all__ = ["AXIS", "plot_paths", "render_png", "write_plot", "x_of"]
