"""``sglwrap diagnose``: read SGLang logs of any version and say what happened, with numbers.

``diagnose(paths)`` returns a ``Report``; ``render`` turns it into text or JSON and ``plot`` into a PNG.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import Final

from sglwrap.diagnose.cause import Finding, decide
from sglwrap.diagnose.compare import (
    Imbalance,
    imbalances,
    manifest_disagreements,
    manifest_vs_workers,
    worker_disagreements,
)
from sglwrap.diagnose.patterns import Event, parse_message, split_line
from sglwrap.diagnose.runs import group
from sglwrap.diagnose.sources import Manifest, iter_lines, read_manifest
from sglwrap.diagnose.timeline import NodeLog, RankMemory, TimelineBuilder, WorkerEnv
from sglwrap.errors import EXIT_UNREADABLE, SglwrapError
from sglwrap.record import Record, replace

CACHE_MAX: Final = 8192
CACHE_LINE_MAX: Final = 512
LONG_CACHE_MAX: Final = 16  # long messages (server_args lines, several KB) a restart loop repeats

__all__ = ["Report", "diagnose", "diagnose_lines", "diagnose_runs"]


class Report(Record):
    """Everything ``diagnose`` found, ready to render."""

    finding: Finding
    sglang_version: str | None
    log_format: str | None
    ranks: tuple[RankMemory, ...]
    imbalances: tuple[Imbalance, ...]
    workers: tuple[WorkerEnv, ...]
    manifests: tuple[Manifest, ...]
    env_disagreements: tuple[str, ...]
    max_total: dict[str, object]
    profiled: dict[str, int]
    server_args: dict[str, object]
    attempts: int
    release_span: tuple[str, str] | None = None
    files: tuple[str, ...] = ()
    earlier: tuple[tuple[int, Finding], ...] = ()  # (attempt number, finding) of earlier launches in the same file
    skipped: tuple[tuple[str, str], ...] = ()  # (input, why) of inputs that could not be read, when others could
    label: str = ""  # short name of the run: its files' short labels

    @property
    def exit_code(self) -> int:
        """0 when the server came up, 1 otherwise."""
        return 0 if self.finding.outcome == "ok" else 1


def diagnose_lines(node: str, lines: Iterable[str]) -> NodeLog:
    """Fold one node's log lines into a ``NodeLog``."""
    tl = TimelineBuilder(node)
    cache: dict[tuple[str, str], list[Event]] = {}  # a restart loop prints the same messages again and again
    long: dict[tuple[str, str], list[Event]] = {}
    for line in lines:
        tags, msg, ts = split_line(line)
        key = (tags, msg)
        short = len(msg) <= CACHE_LINE_MAX
        events = cache.get(key) if short else long.get(key)
        if events is None:
            events = parse_message(tags, msg)
            if short:
                if len(cache) >= CACHE_MAX:
                    cache.clear()
                cache[key] = events
            else:
                if len(long) >= LONG_CACHE_MAX:
                    long.clear()
                long[key] = events
        if events and ts:
            tl.stamp(ts)
        for ev in events:
            tl.feed(ev)
    return tl.result()


def short_labels(paths: Sequence[str]) -> list[str]:
    """A short, unique name per input: its file name, with as many parent directories as it takes to tell two
    inputs apart ("stdin" for "-")."""
    parts = [["stdin"] if p == "-" else os.path.normpath(p).split(os.sep) for p in paths]
    depth = [1] * len(paths)
    for _ in range(max((len(x) for x in parts), default=1)):
        labels = ["/".join(x[-d:]) for x, d in zip(parts, depth)]
        dup = {lb for lb in labels if labels.count(lb) > 1}
        if not dup:
            return labels
        depth = [d + 1 if lb in dup and d < len(x) else d for x, d, lb in zip(parts, depth, labels)]
    return list(paths)


def _read(paths: Sequence[str]) -> tuple[list[NodeLog], list[Manifest], list[tuple[str, str]]]:
    """The node logs and manifests of ``paths``; with several inputs, one that cannot be read (missing, empty,
    binary) is skipped with its reason, and ``SglwrapError`` (exit 2) is raised only when none can be read."""
    nodes: list[NodeLog] = []
    manifests: list[Manifest] = []
    skipped: list[tuple[str, str]] = []
    several = len(paths) > 1
    first: SglwrapError | None = None
    for path, label in zip(paths, short_labels(paths)):
        try:
            man = read_manifest(path)
            if man is not None:
                manifests.append(man)
                continue
            node = diagnose_lines(label if several else "", iter_lines(path))
        except SglwrapError as e:
            if not several or e.exit_code != EXIT_UNREADABLE:
                raise
            first = first or e
            skipped.append((path, str(e)))
            continue
        nodes.append(replace(node, path=path))
    if first is not None and not nodes and not manifests:
        raise SglwrapError(f"{first} (and no other input could be read either)", exit_code=EXIT_UNREADABLE)
    return nodes, manifests, skipped


def diagnose(paths: Sequence[str]) -> Report:
    """Read every path (``-`` = stdin; manifests recognised by content) as one run and build its report.

    Raises ``SglwrapError`` (exit 2) when no input can be read.
    """
    nodes, manifests, skipped = _read(paths)
    return replace(build_report(tuple(nodes), tuple(manifests)), skipped=tuple(skipped))


def diagnose_runs(paths: Sequence[str]) -> list[Report]:
    """Read every path, group the files into runs (``runs.group``, in command-line order) and build one report per
    run; inputs that could not be read (when others could) are listed in each report's ``skipped``."""
    nodes, manifests, skipped = _read(paths)
    out = []
    for r in group(nodes, manifests):
        rep = build_report(tuple(r.nodes), tuple(r.manifests))
        label = ", ".join([n.node for n in r.nodes if n.node] + [os.path.basename(m.source) for m in r.manifests])
        out.append(replace(rep, skipped=tuple(skipped), label=label))
    return out


def build_report(nodes: tuple[NodeLog, ...], manifests: tuple[Manifest, ...]) -> Report:
    """Combine per-node logs and manifests into one ``Report``."""
    ranks = tuple(r for n in nodes for r in n.ranks)
    version = next((m.sglang_version for m in manifests if m.sglang_version), None)
    if version is None:
        version = next((v for n in nodes for v in n.versions), None)
    workers = tuple(w for n in nodes for w in n.workers)
    finding = decide(nodes, ranks, version)
    max_total: dict[str, object] = {}
    profiled: dict[str, int] = {}
    args: dict[str, object] = {}
    for n in nodes:
        for k, v in n.max_total.items():
            max_total.setdefault(k, v)
        profiled = profiled or n.profiled
        for k, v in n.server_args.items():
            args.setdefault(k, v)
    return Report(
        finding=finding, sglang_version=version, log_format=_format(nodes), ranks=ranks,
        imbalances=imbalances(ranks), workers=workers, manifests=manifests,
        env_disagreements=manifest_disagreements(manifests) + worker_disagreements(workers)
        + manifest_vs_workers(manifests, workers),
        max_total=max_total, profiled=profiled, server_args=args, attempts=max((n.attempts for n in nodes), default=0),
        release_span=next((n.release_span for n in nodes if n.release_span), None),
        files=tuple(n.path or n.node for n in nodes if n.node) + tuple(m.source for m in manifests),
        earlier=tuple((i, decide((e,), e.ranks, version)) for n in nodes for i, e in n.earlier),
    )


def _format(nodes: tuple[NodeLog, ...]) -> str | None:
    labels = [r.label for n in nodes for r in n.ranks]
    if any(n.new_format for n in nodes):
        return "0.5.23-style"
    if any(lb.startswith("gpu_id=") for lb in labels):
        return "2024 (0.2.x)"
    if labels:
        return "0.3-0.5.9"
    return None
