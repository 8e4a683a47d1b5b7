"""``--plot FILE``: median all-reduce latency against message size, one line per configuration, as a PNG.

Solid lines are eager, dashed ones graph mode (per op); the model's message sizes are marked. Sweep points are
drawn thinner than the profiles asked for by name. With ``--repeat`` the line is the median of the run medians
and a shaded band spans their p10-p90 (min-max for 10 runs or fewer). matplotlib is imported here only, with the Agg backend.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sglwrap.bench.output import write_new
from sglwrap.bench.sizes import human
from sglwrap.plotting import png_bytes, pyplot

MAX_LINES = 40


def render_png(doc: Mapping[str, Any]) -> bytes:
    """The plot as PNG bytes."""
    plt = pyplot(exit_code=2)
    fig, ax = plt.subplots(figsize=(10, 6), dpi=110)
    try:
        lines: dict[tuple[str, str], list[tuple[int, float, float, float]]] = {}
        kinds: dict[str, str] = {}
        mem: dict[tuple[str, str], int | None] = {}
        repeat = int(doc.get("config", {}).get("repeat", 1))
        for r in doc["results"]:
            lo = r.get("latency_us_runs_p10", r["latency_us"])
            hi = r.get("latency_us_runs_p90", r["latency_us"])
            lines.setdefault((r["profile"], r["mode"]), []).append((r["size_bytes"], r["latency_us"], lo, hi))
            kinds[r["profile"]] = r.get("kind", "profile")
            mem[(r["profile"], r["mode"])] = r.get("nccl_mem_bytes")
        colors: dict[str, Any] = {}
        cmap = plt.get_cmap("tab10")
        for (name, mode), pts in list(lines.items())[:MAX_LINES]:
            pts.sort()
            color = colors.setdefault(name, cmap(len(colors) % 10))
            sweep = kinds.get(name) == "sweep"
            m = mem.get((name, mode))
            mib = f", NCCL {m / 2**20:.0f} MiB" if m else ""
            ax.plot([p[0] for p in pts], [p[1] for p in pts], linestyle="--" if mode == "graph" else "-",
                    marker="o" if not sweep else ".", markersize=4 if not sweep else 3,
                    linewidth=0.9 if sweep else 1.8, alpha=0.7 if sweep else 1.0, color=color,
                    label=f"{name} ({mode}{mib})")
            if repeat > 1:
                ax.fill_between([p[0] for p in pts], [p[2] for p in pts], [p[3] for p in pts], color=color,
                                alpha=0.12 if sweep else 0.2, linewidth=0)
        cfg = doc.get("config", {})
        for s in cfg.get("sizes", []):
            if s.get("label") and s["label"] != "given":
                ax.axvline(s["size_bytes"], color="grey", linewidth=0.6, alpha=0.5)
                ax.text(s["size_bytes"], 1.0, " " + s["label"], rotation=90, va="top", fontsize=6, color="grey",
                        transform=ax.get_xaxis_transform())
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ticks = sorted({r["size_bytes"] for r in doc["results"]})
        if ticks:
            shown = ticks[:: max(1, len(ticks) // 12)]
            ax.set_xticks(shown, [human(t) for t in shown], rotation=30, ha="right", fontsize=7)
        ax.set_xlabel("message size")
        ax.set_ylabel("median latency per all-reduce (us)" if repeat == 1 else
                      f"median of {repeat} run medians per all-reduce (us); band: p10-p90 of runs")
        devs = doc.get("devices") or []
        what = f"{cfg.get('world_size')}x {devs[0].get('device') or 'cpu'}" if devs else f"{cfg.get('world_size')} ranks"
        nccl = f", NCCL {doc['nccl_version']}" if doc.get("nccl_version") else ""
        ax.set_title(f"all-reduce latency, {what}, backend {cfg.get('backend')}{nccl}", fontsize=10)
        ax.grid(True, which="both", linewidth=0.3, alpha=0.5)
        if lines:
            ax.legend(fontsize=6, ncol=2, loc="upper left")
        else:
            ax.text(0.5, 0.5, "no results", ha="center", transform=ax.transAxes)
        return png_bytes(fig)
    finally:
        plt.close(fig)


def write_plot(doc: Mapping[str, Any], path: Path) -> Path:
    """Write the PNG (never over an existing file: ``path.N`` then); returns the path written."""
    return write_new(Path(path), render_png(doc))
