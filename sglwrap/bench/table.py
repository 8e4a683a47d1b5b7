"""Text output on stderr: nccl-tests' table per configuration, a summary matrix, and a progress bar.

nccl-tests' layout: non-data lines start with ``#``; columns ``size count type redop ... time algbw busbw
#wrong``; floats in fixed-width columns with 2 decimals, then 1, then 0, then an exponent as the value grows.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any, TextIO

from sglwrap.bench.sizes import human


def fstr(value: float | None, width: int = 7) -> str:
    """nccl-tests' getFloatStr: the most decimals (2, 1, 0) that fit ``width``, else an exponent."""
    if value is None:
        return "-".rjust(width)
    for prec in (2, 1, 0):
        s = f"{value:.{prec}f}"
        if len(s) <= width:
            return s.rjust(width)
    return f"{value:.0e}".rjust(width)


def _mib(v: int | None) -> str:
    return "-" if v is None else f"{v / 2**20:.0f}"


def header(doc: dict[str, Any]) -> str:
    cfg = doc["config"]
    lines = [f"# sglwrap bench-comm {doc['version']}: all_reduce sum, backend {cfg['backend']}, "
             f"world size {cfg['world_size']}, dtype {cfg['dtype']}",
             f"# {cfg['modes_text']}; {cfg['budget_s']} s per size and mode, >= {cfg['min_reps']} samples; "
             f"time = median per all-reduce, p90 over samples; busbw = algbw * 2(n-1)/n"]
    if cfg.get("model"):
        m = cfg["model"]
        lines.append(f"# model {m['name']}: hidden {m['hidden_size']}, {m['dtype']}, graph of {m['graph_ops']} "
                     f"all-reduces per decode step ({m['source']})")
    for d in doc.get("devices", []):
        lines.append(f"#  Rank {d['rank']:2d} Pid {d.get('pid') or '-':>7} device {d['rank']:2d} "
                     f"[{'-' if d.get('pci_bus_id') is None else d['pci_bus_id']}] {d.get('device') or 'cpu'}")
    if doc.get("nccl_version"):
        lines.append(f"# NCCL {doc['nccl_version']}, torch {doc.get('torch_version')}")
    return "\n".join(lines) + "\n"


COLS = ("#       size         count      type   mode     time      p90    algbw    busbw  #wrong  label\n"
        "#        (B)    (elements)                      (us)     (us)   (GB/s)   (GB/s)\n")


COLS_REPEAT = ("#       size         count      type   mode     time      p90    algbw    busbw  #wrong    runlo    runhi"
               "    N  label\n"
               "#        (B)    (elements)                      (us)     (us)   (GB/s)   (GB/s)            (us)     (us)\n")


def config_block(conf: dict[str, Any], rows: Sequence[dict[str, Any]], repeat: int = 1) -> str:
    """One configuration: its ``#`` preamble (env, status, memory) and its rows.

    With ``repeat`` > 1, time is the median over the runs of each run's median, p90 the median of the runs'
    p90, and two columns in the manner of nccl-tests' ``-I 1`` extras follow ``#wrong``: runlo/runhi, the
    p10/p90 of the run medians (min/max for 10 runs or fewer), then N, the runs that finished.
    """
    env = " ".join(f"{k}={v}" for k, v in sorted(conf.get("env_set", {}).items())) or "(no variables)"
    out = [f"#\n# {conf['kind']} {conf['name']} ({conf['hash'][:12]}): {env}"]
    if conf.get("not_measured"):
        out.append(f"# not exercised here (SGLang's own communicators and server settings): "
                   f"{', '.join(conf['not_measured'])}; this measures NCCL under the profile's variables only")
    mem = conf.get("nccl_mem_bytes")
    if mem:
        stages = ", ".join(f"{k} {_mib(v)}" for k, v in mem.items())
        out.append(f"# NCCL device memory per GPU, MiB: {stages}")
    if conf["status"] != "ok":
        out.append(f"# {conf['status'].upper()}: {conf['error']}")
        if repeat == 1 or not rows:
            return "\n".join(out) + "\n"
    if repeat > 1:
        order = " ".join(str(r["seq"]) for r in conf.get("runs", []))
        out.append(f"# {repeat} runs in fresh processes, interleaved with the other configurations (run order: "
                   f"{order}); time = median of the run medians, runlo/runhi = p10/p90 of the run medians")
    out.append((COLS if repeat == 1 else COLS_REPEAT).rstrip("\n"))
    for r in rows:
        line = (f"{r['size_bytes']:12d}  {r['count']:12d}  {r['type']:>8}  {r['mode']:>5}  "
                f"{fstr(r['latency_us'])}  {fstr(r['latency_us_p90'])}  {fstr(r['alg_bw'])}  "
                f"{fstr(r['bus_bw'])}  {r['nwrong']:6d}  ")
        if repeat > 1:
            done = sum(x is not None for x in r.get("latency_us_runs", []))
            line += f"{fstr(r.get('latency_us_runs_p10'))}  {fstr(r.get('latency_us_runs_p90'))}  {done:3d}  "
        out.append(line + r["label"])
    return "\n".join(out) + "\n"


def summary(doc: dict[str, Any], sizes: Sequence[int]) -> str:
    """Rows: configuration and mode; columns: median latency per size (us), then NCCL memory (MiB).

    With repeated runs each cell is ``median (lo-hi)``: lo/hi are the p10/p90 of the run medians.
    """
    by: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
    mem: dict[tuple[str, str], int | None] = {}
    for r in doc["results"]:
        key = (r["profile"], r["mode"])
        by.setdefault(key, {})[r["size_bytes"]] = r
        mem[key] = r.get("nccl_mem_bytes")
    repeat = int(doc.get("config", {}).get("repeat", 1))
    cw = 9 if repeat == 1 else 24
    names = [c["name"] for c in doc["configs"]]
    width = max([len(n) for n in names] + [12])
    what = "median us per all-reduce" + ("" if repeat == 1 else
                                         f" over {repeat} interleaved runs (p10-p90 of the run medians)")
    head = f"# {'configuration':<{width}}  mode  " + "".join(f"{human(s):>{cw}}" for s in sizes) + "  NCCL MiB"
    lines = ["#", f"# Summary: {what}", head]
    for c in doc["configs"]:
        modes = sorted({m for (n, m) in by if n == c["name"]}) or ["-"]
        for m in modes:
            vals = by.get((c["name"], m), {})
            cells = "".join(_cell(vals.get(s), cw, repeat) for s in sizes)
            tail = _mib(mem.get((c["name"], m))) if c["status"] == "ok" else c["status"].upper()
            lines.append(f"  {c['name']:<{width}}  {m:>5} {cells}  {tail:>8}")
    w = doc.get("winner")
    if w and int(w.get("repeat", 1)) > 1:
        won = ", ".join(f"{n} {k}/{p}" for n, (k, p) in w.get("pairs_won", {}).items()) or "-"
        lines.append(f"# winner for {', '.join(human(int(s)) for s in w['sizes'])} ({w['mode']}, {w['repeat']} "
                     f"interleaved runs): {w['name']} (geomean {w['score']:.3f} x {w['reference']}). Pairs faster "
                     f"than {w['reference']}: {won}; a candidate needs {w.get('pairs_needed')} and a median "
                     f"improvement above the reference's {w['margin'] * 100:.0f}% across-run spread")
    elif w:
        lines.append(f"# winner for {', '.join(human(int(s)) for s in w['sizes'])} ({w['mode']}): {w['name']} "
                     f"(geomean {w['score']:.3f} x {w['reference']}; equal within the {w['margin'] * 100:.0f}% noise: "
                     f"{', '.join(w['equal_within_noise'])}; the least NCCL memory among them wins)")
    return "\n".join(lines) + "\n"


def _cell(row: dict[str, Any] | None, width: int, repeat: int) -> str:
    if row is None:
        return "-".rjust(width)
    if repeat == 1:
        return fstr(row["latency_us"], width)
    lo, hi = row.get("latency_us_runs_p10"), row.get("latency_us_runs_p90")
    return f"{fstr(row['latency_us'], 7).strip()} ({fstr(lo, 7).strip()}-{fstr(hi, 7).strip()})".rjust(width)


class Progress:
    """A one-line bar on a terminal; on anything else one line per configuration."""

    def __init__(self, total: int, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.total = total
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = enabled and self.stream.isatty()
        self.index = 0
        self.name = ""
        self.t0 = time.monotonic()

    def start(self, index: int, name: str) -> None:
        self.index, self.name = index, name
        if self.enabled and not self.tty:
            self.stream.write(f"# [{index + 1}/{self.total}] {name} ...\n")
            self.stream.flush()
        self._draw(0, 1, "starting ranks")

    def phase(self, msg: dict[str, Any]) -> None:
        self._draw(int(msg.get("step", 0)), int(msg.get("total", 1)),
                   f"{msg.get('mode')} {human(int(msg.get('size_bytes', 0)))}")

    def done(self, status: str, wall_s: float) -> None:
        if self.tty:
            self._draw(1, 1, f"{status} in {wall_s:.1f} s")
            self.stream.write("\n")
        elif self.enabled:
            self.stream.write(f"# [{self.index + 1}/{self.total}] {self.name}: {status} in {wall_s:.1f} s\n")
        self.stream.flush()

    def _draw(self, step: int, steps: int, what: str) -> None:
        if not self.tty:
            return
        frac = (self.index + step / max(steps, 1)) / max(self.total, 1)
        bar = "#" * int(frac * 30)
        el = time.monotonic() - self.t0
        self.stream.write(f"\r[{bar:<30}] {self.index + 1}/{self.total} {self.name[:28]:<28} {what:<18} "
                          f"{el:5.0f}s\x1b[K")
        self.stream.flush()
