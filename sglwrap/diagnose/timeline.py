"""Per-rank memory timeline: folds ``Event``s into one ``RankMemory`` per (node, rank) and the run's facts.

Stages follow SGLang's startup order (research-memory §a.1): init → weight_load → kv_pool → cuda_graph →
warmup → serving. A new launch in the same file (``server_args=`` or ``Init torch distributed begin`` after
memory lines) starts over, so an appended log describes its last attempt.
"""

from __future__ import annotations

import json
from collections import deque
from typing import Final

from sglwrap.diagnose.catalogue import VersionRange
from sglwrap.diagnose.patterns import Event, rank_number
from sglwrap.record import Record, field, replace

STAGES: Final = ("init", "weight_load", "kv_pool", "cuda_graph", "warmup", "serving")
MAX_WORKERS: Final = 4096


class Point(Record):
    """One free-memory reading of one rank: the stage it belongs to and what SGLang called it."""

    stage: str
    label: str
    avail_gib: float


class RankMemory(Record):
    """What one rank's log lines say about its memory; None where the log does not say."""

    node: str
    label: str
    rank: int
    stage: str
    init_mem_gib: float | None = None
    avail_before_weights_gib: float | None = None
    weight_mem_gib: float | None = None
    avail_after_weights_gib: float | None = None
    kv_tokens: int | None = None
    k_size_gib: float | None = None
    v_size_gib: float | None = None
    kv_size_gib: float | None = None
    avail_after_kv_pool_gib: float | None = None
    avail_before_cuda_graph_gib: float | None = None
    cuda_graph_mem_gib: float | None = None
    cuda_graph_bs_count: int | None = None
    avail_final_gib: float | None = None
    mamba_state_gib: float | None = None
    points: tuple[Point, ...] = ()
    draft: RankMemory | None = None


class WorkerEnv(Record):
    """One ``{"sglwrap": "worker-env", …}`` line from the injector."""

    node: str
    pid: int | None
    ppid: int | None
    role: str | None
    profile: str | None
    hash: str | None
    env: dict[str, str]


class Failure(Record):
    """A fatal-looking error line with the stage its rank was in."""

    node: str
    label: str
    kind: str
    text: str
    stage: str
    after_up: bool
    values: dict[str, object] = field(default_factory=dict)


class NodeLog(Record):
    """Everything read from one log file."""

    node: str
    ranks: tuple[RankMemory, ...]
    failures: tuple[Failure, ...]
    came_up: bool
    saw_sglang: bool
    server_args: dict[str, object]
    versions: tuple[str, ...]
    max_total: dict[str, object]
    profiled: dict[str, int]
    workers: tuple[WorkerEnv, ...]
    new_format: bool
    attempts: int
    bench: bool = False
    release_span: tuple[str, str] | None = None
    first_ts: str | None = None
    last_ts: str | None = None
    traceback_stage: str | None = None  # the step named by SGLang frames of a traceback no error line followed
    model_types: tuple[str, ...] = ()  # the model classes its "Load weight end. type=…" lines name
    path: str = ""  # the input as given on the command line ("-" for stdin); ``node`` is its short label
    earlier: tuple[tuple[int, NodeLog], ...] = ()  # (attempt number, summary) of the last earlier attempts in the file


MAX_EARLIER: Final = 8
MAX_FRAMES: Final = 32


class _Rank:
    def __init__(self, node: str, label: str) -> None:
        self.node, self.label = node, label
        self.stage = "init"
        self.v: dict[str, float | int | None] = {}
        self.points: list[Point] = []
        self.graph_mem = 0.0
        self.graph_seen = False
        self.pool_total_seen = False
        self.draft: _Rank | None = None  # the speculative-decoding draft worker of the same rank
        self.in_draft = False  # between the draft's "Load weight begin" and its "Load weight end"

    def point(self, label: str, avail: object) -> None:
        if isinstance(avail, float) and len(self.points) < 256:
            self.points.append(Point(self.stage, label, avail))

    def freeze(self) -> RankMemory:
        v = self.v
        return RankMemory(
            node=self.node, label=self.label or "-", rank=rank_number(self.label), stage=self.stage,
            points=tuple(self.points), cuda_graph_mem_gib=round(self.graph_mem, 2) if self.graph_seen else None,
            draft=None if self.draft is None else self.draft.freeze(),
            **{k: v.get(k) for k in _FIELDS},  # type: ignore[arg-type]
        )


_FIELDS: Final = (
    "init_mem_gib", "avail_before_weights_gib", "weight_mem_gib", "avail_after_weights_gib", "kv_tokens",
    "k_size_gib", "v_size_gib", "kv_size_gib", "avail_after_kv_pool_gib", "avail_before_cuda_graph_gib",
    "cuda_graph_bs_count", "avail_final_gib", "mamba_state_gib",
)
# A draft worker loads its weights in the process that holds the target's: its free memory before loading is at
# most the target's free memory after loading (plus this much for allocator noise). More free memory than that
# means a fresh process: a relaunch.
DRAFT_SLACK_GIB: Final = 1.0


_NOT_CATALOGUED: Final = frozenset({"server_args", "version", "worker_env", "tqdm", "crash", "served", "http_up",
                                    "sglwrap_launch"})


class TimelineBuilder:
    """Consumes the events of one file in order; ``result()`` returns the frozen ``NodeLog``."""

    def __init__(self, node: str) -> None:
        self.node = node
        self._reset()
        self.came_up = False
        self.failures: list[Failure] = []
        self.server_args: dict[str, object] = {}
        self.versions: list[str] = []
        self.workers: dict[tuple[int | None, str], WorkerEnv] = {}
        self.saw_sglang = False
        self.new_format = False
        self.attempts = 0
        self.bench = False
        self._tqdm_total: int | None = None
        self._last_crash_label = ""
        self.releases = VersionRange()
        self.first_ts: str | None = None
        self.last_ts: str | None = None
        self._tb_stage: str | None = None  # the latest step named by the traceback frames being read
        self._tb_start = 0  # failures from this index on belong to the traceback being read
        self._tb_frames: list[str] = []  # SGLang frames ("module.function") of the traceback being read
        self.cut_stage: str | None = None  # step of SGLang frames that no failure line claimed
        self.model_types: list[str] = []
        self._seen_worker_json: set[str] = set()
        self.earlier: deque[tuple[int, NodeLog]] = deque(maxlen=MAX_EARLIER)

    def _reset(self) -> None:
        self.ranks: dict[str, _Rank] = {}
        self.max_total: dict[str, object] = {}
        self.profiled: dict[str, int] = {}

    def _rank(self, label: str) -> _Rank:
        r = self.ranks.get(label)
        if r is None:
            r = self.ranks[label] = _Rank(self.node, label)
        return r

    def _new_attempt(self) -> None:
        if self.ranks or self.failures or self.came_up:
            # the launch before this one ended (failed, or came up and was restarted): keep its summary
            self.attempts = max(self.attempts, 1)
            self.earlier.append((self.attempts, self.result(with_earlier=False)))  # the most recent ones are kept
            self._reset()
            self.came_up = False
            self.failures = []
            self.cut_stage = None
        self.attempts += 1

    def feed(self, ev: Event) -> None:
        """Apply one event."""
        if ev.kind not in _NOT_CATALOGUED:
            self.releases.feed(str(ev.values.get("kind", "")) if ev.kind == "error" else ev.kind, ev.text)
        if ev.kind not in _TRACEBACK_KINDS:  # any other line ends the traceback being read
            self._tb_stage, self._tb_start = None, len(self.failures)
            self._tb_frames = []
            self.cut_stage = None
        handler = getattr(self, f"_on_{ev.kind}", None)
        if handler is not None:
            handler(ev)

    # --- launch context ---
    def stamp(self, ts: str) -> None:
        """Record the timestamp of a line that carried a fact."""
        if self.first_ts is None:
            self.first_ts = ts
        self.last_ts = ts

    def _on_server_args(self, ev: Event) -> None:
        self._new_attempt()
        self.saw_sglang = True
        self.server_args = dict(ev.values)

    def _spec_possible(self) -> bool:
        """Speculative decoding is on, or the log does not show the server args (an excerpt)."""
        return not self.server_args or "speculative_algorithm" in self.server_args

    def _may_be_draft(self, r: _Rank) -> bool:
        return (self._spec_possible() and not self.came_up and not self.failures
                and r.v.get("avail_after_weights_gib") is not None)

    def _mem(self, label: str, ev: Event, pool_key: str | None = None) -> _Rank:
        """The worker (target or draft) of rank ``label`` that a memory line belongs to."""
        r = self._rank(label)
        if "draft" in ev.text[:80].lower() or "draft" in str(ev.values.get("name") or ""):
            if r.draft is None:
                r.draft = _Rank(self.node, label)
            return r.draft
        if r.draft is None:
            if (pool_key is not None and r.v.get(pool_key) is not None and self._spec_possible()
                    and not self.came_up and not self.failures):
                # a second pool after this rank's pool was complete: the draft worker's (0.5.x sizes it later)
                r.draft = _Rank(self.node, label)
                r.draft.stage = "kv_pool"
                return r.draft
            return r
        if r.in_draft:
            return r.draft
        if pool_key is not None and r.v.get(pool_key) is not None:
            return r.draft
        return r

    def _on_init_begin(self, ev: Event) -> None:
        r = self.ranks.get(ev.tags)
        if r is not None and self._may_be_draft(r) and r.draft is None:
            pass  # 0.4.x: the draft's ModelRunner prints "Init torch distributed begin." too
        elif any(r.stage != "init" for r in self.ranks.values()):
            self._new_attempt()
        self.saw_sglang = True
        self._rank(ev.tags)

    def _on_version(self, ev: Event) -> None:
        ver = str(ev.values["version"])
        if ver not in self.versions and len(self.versions) < 16:
            self.versions.append(ver)

    def _on_sglwrap_launch(self, ev: Event) -> None:
        """sglwrap's ``launch.exec`` line: what it exec'd on which node, for grouping files into runs when SGLang's
        own server_args line is not in the file (the launch's values never override SGLang's)."""
        try:
            obj = json.loads(str(ev.values["json"]))
        except ValueError:
            return
        if not isinstance(obj, dict):
            return
        argv = [str(a) for a in obj.get("argv") or [] if isinstance(a, (str, int, float))]
        for flag, key in (("--model-path", "model_path"), ("--dist-init-addr", "dist_init_addr")):
            if flag in argv[:-1]:
                self.server_args.setdefault(key, argv[argv.index(flag) + 1])
        for key in ("node_rank", "nnodes"):
            if isinstance(obj.get(key), int):
                self.server_args.setdefault(key, obj[key])

    def _on_worker_env(self, ev: Event) -> None:
        raw = str(ev.values["json"])
        if raw in self._seen_worker_json:  # a restart loop repeats the injector's lines: each parsed once
            return
        if len(self._seen_worker_json) < MAX_WORKERS:
            self._seen_worker_json.add(raw)
        try:
            obj = json.loads(raw)
        except ValueError:
            return
        if not isinstance(obj, dict) or len(self.workers) >= MAX_WORKERS:
            return
        env = obj.get("env") if isinstance(obj.get("env"), dict) else {}
        w = WorkerEnv(
            node=self.node, pid=_int(obj.get("pid")), ppid=_int(obj.get("ppid")), role=_str(obj.get("role")),
            profile=_str(obj.get("profile")), hash=_str(obj.get("hash")),
            env={str(k): str(v) for k, v in (env or {}).items()},
        )
        self.workers[(w.pid, w.role or "")] = w

    # --- memory ---
    def _on_init_end(self, ev: Event) -> None:
        self.saw_sglang = True
        if "Memory baseline" in ev.text:
            self.new_format = True
        self._rank(ev.tags).v["init_mem_gib"] = ev.values["usage"]  # type: ignore[assignment]

    def _on_load_begin(self, ev: Event) -> None:
        self.saw_sglang = True
        r = self._rank(ev.tags)
        after = r.v.get("avail_after_weights_gib")
        if after is not None:
            avail = ev.values["avail"]
            # With speculative decoding in the server args, a second weight load of the same launch is the draft's
            # (a shared GPU may have freed memory meanwhile); without server args, only a load that starts with no
            # more free memory than the target left is one.
            spec_known = "speculative_algorithm" in self.server_args
            if (r.draft is None and self._may_be_draft(r) and isinstance(avail, float)
                    and (spec_known or avail <= float(after) + DRAFT_SLACK_GIB)):
                r.draft = _Rank(self.node, r.label)
                r.in_draft = True
            elif not r.in_draft:
                self._new_attempt()
                r = self._rank(ev.tags)
        if r.in_draft and r.draft is not None:
            r = r.draft
        r.stage = "weight_load"
        r.v["avail_before_weights_gib"] = ev.values["avail"]  # type: ignore[assignment]
        r.point("before weights", ev.values["avail"])

    def _on_load_end(self, ev: Event) -> None:
        self.saw_sglang = True
        owner = self._rank(ev.tags)
        r = owner.draft if owner.in_draft and owner.draft is not None else owner
        owner.in_draft = False
        r.stage = "weight_load"
        r.point("after weights", ev.values["avail"])
        r.stage = "kv_pool"
        r.v["avail_after_weights_gib"] = ev.values["avail"]  # type: ignore[assignment]
        r.v["weight_mem_gib"] = ev.values["usage"]  # type: ignore[assignment]
        kind = ev.values.get("type")
        if isinstance(kind, str) and kind not in self.model_types and len(self.model_types) < 8:
            self.model_types.append(kind)

    def _on_kv_alloc(self, ev: Event) -> None:
        r = self._mem(ev.tags, ev, "avail_after_kv_pool_gib")
        r.stage = "kv_pool"
        vals = ev.values
        if r.pool_total_seen:
            return
        first = r.v.get("kv_size_gib") is None
        r.v["kv_size_gib"] = round((r.v.get("kv_size_gib") or 0.0) + float(vals["size"]), 2)  # type: ignore[arg-type, operator]
        if first:
            r.v["k_size_gib"], r.v["v_size_gib"] = vals["k"], vals["v"]  # type: ignore[assignment]
            r.v["kv_tokens"] = vals["tokens"]  # type: ignore[assignment]

    def _on_kv_post_capture(self, ev: Event) -> None:
        r = self._mem(ev.tags, ev)
        r.v["kv_tokens"], r.v["kv_size_gib"] = ev.values["tokens"], ev.values["kv"]  # type: ignore[assignment]
        r.v["avail_final_gib"] = ev.values["avail"]  # type: ignore[assignment]
        r.point("post-capture KV", ev.values["avail"])

    def _on_pool_total(self, ev: Event) -> None:
        # "SWAKVPool mem usage: X GB" follows the sub-pools' own "KV Cache is allocated" lines: X is the pool's total
        r = self._mem(ev.tags, ev, "avail_after_kv_pool_gib")
        r.stage = "kv_pool"
        r.v["kv_size_gib"] = ev.values["size"]  # type: ignore[assignment]
        r.pool_total_seen = True

    def _on_mamba_alloc(self, ev: Event) -> None:
        r = self._mem(ev.tags, ev, "avail_after_kv_pool_gib")
        r.stage = "kv_pool"
        r.v["mamba_state_gib"] = ev.values["size"]  # type: ignore[assignment]

    def _on_pool_end(self, ev: Event) -> None:
        r = self._mem(ev.tags, ev, "avail_after_kv_pool_gib")
        r.stage = "kv_pool"
        r.v["avail_after_kv_pool_gib"] = ev.values["avail"]  # type: ignore[assignment]
        r.point("after KV pool", ev.values["avail"])
        r.stage = "warmup" if self.server_args.get("disable_cuda_graph") is True else "cuda_graph"

    def _on_swa(self, ev: Event) -> None:
        self.max_total.setdefault("swa_full_tokens", ev.values["tokens"])

    def _on_capture_begin(self, ev: Event) -> None:
        r = self._mem(ev.tags, ev)
        r.stage = "cuda_graph"
        if "backend=" in ev.text or "CUDA graph begin" in ev.text:
            self.new_format = self.new_format or "backend=" in ev.text
        if r.v.get("avail_before_cuda_graph_gib") is None:
            r.v["avail_before_cuda_graph_gib"] = ev.values["avail"]  # type: ignore[assignment]
        r.point(f"before {ev.values['name'] or 'cuda'} graph", ev.values["avail"])

    def _on_capture_end(self, ev: Event) -> None:
        r = self._mem(ev.tags, ev)
        vals = ev.values
        if self._tqdm_total is not None and r.v.get("cuda_graph_bs_count") is None and vals["bs_count"] is None:
            r.v["cuda_graph_bs_count"] = self._tqdm_total
        if vals["usage"] is not None:
            r.graph_mem += float(vals["usage"])  # type: ignore[arg-type]
            r.graph_seen = True
        if vals["avail"] is not None:
            r.v["avail_final_gib"] = vals["avail"]  # type: ignore[assignment]
            r.point("after graphs", vals["avail"])
        if vals["bs_count"] is not None:
            r.v["cuda_graph_bs_count"] = (r.v.get("cuda_graph_bs_count") or 0) + int(vals["bs_count"])  # type: ignore[operator, call-overload]
        r.stage = "warmup"

    def _on_capture_bs(self, ev: Event) -> None:
        self._rank(ev.tags).v["cuda_graph_bs_count"] = ev.values["count"]  # type: ignore[assignment]

    def _on_tqdm(self, ev: Event) -> None:
        if ev.values["done"] != ev.values["total"]:
            return
        capturing = [r for r in self.ranks.values() if r.stage == "cuda_graph" and r.draft is None]
        for r in capturing:
            if r.v.get("cuda_graph_bs_count") is None:
                r.v["cuda_graph_bs_count"] = ev.values["total"]  # type: ignore[assignment]
        if not capturing and "Capturing batches" in ev.text:
            self._tqdm_total = int(ev.values["total"])  # type: ignore[call-overload]  # the capture_end that follows

    def _on_profiled(self, ev: Event) -> None:
        self._rank(ev.tags).stage = "kv_pool"
        self.profiled = {"requested": int(ev.values["requested"]),  # type: ignore[call-overload]
                         "profiled": int(ev.values["profiled"])}  # type: ignore[call-overload]

    def _on_max_total(self, ev: Event) -> None:
        self.max_total.update(ev.values)
        r = self._rank(ev.tags)
        if r.v.get("kv_tokens") is None:
            r.v["kv_tokens"] = ev.values["tokens"]  # type: ignore[assignment]
        if "available_gpu_mem" in ev.values:
            r.v["avail_final_gib"] = ev.values["available_gpu_mem"]  # type: ignore[assignment]
        for rk in self.ranks.values():
            if rk.stage in ("kv_pool", "cuda_graph") and rk.v.get("kv_size_gib") is not None or rk is r:
                rk.stage = "warmup"

    # --- outcome ---
    def _on_up(self, ev: Event) -> None:
        self.came_up = True
        self.saw_sglang = True
        for r in self.ranks.values():
            r.stage = "serving"

    def _on_http_up(self, ev: Event) -> None:
        # Uvicorn listening: the server is up (as the shared real-log dataset reads it, sglang-logs/22); a warmup
        # failure after it is still reported, as a failure after the server came up.
        self._on_up(ev)

    def _on_served(self, ev: Event) -> None:
        if not self.came_up:
            self._on_up(ev)

    def _on_bench_done(self, ev: Event) -> None:
        self.bench = True
        self._on_up(ev)

    def _on_error(self, ev: Event) -> None:
        label = ev.tags or self._last_crash_label
        self._fail(Failure(self.node, label, str(ev.values.get("kind")), ev.text,
                           self._stage_of(label, ev), self.came_up, dict(ev.values)))

    def _on_crash(self, ev: Event) -> None:
        if ev.tags:
            self._last_crash_label = ev.tags
        self._fail(Failure(self.node, ev.tags, "crash", ev.text, self._stage_of(ev.tags, ev),
                           self.came_up, dict(ev.values)))

    def _fail(self, f: Failure) -> None:
        if self._tb_stage is not None:  # frames printed before the error line (a headerless traceback)
            f = replace(f, stage=_later(f.stage, self._tb_stage))
        if self._tb_frames:
            f.values["frames"] = self._tb_frames  # a new traceback starts a new list (``feed``)
            self.cut_stage = None  # the traceback's error line arrived
        self.failures.append(f)
        if len(self.failures) > 64:
            self._tb_start = max(0, self._tb_start - (len(self.failures) - 64))
            del self.failures[:-64]

    def _on_frame(self, ev: Event) -> None:
        """A traceback frame naming a step: the failures of this traceback happened there (never moved back).

        SGLang may print the exception line before its "Scheduler hit an exception: Traceback …" report, so every
        failure since the last non-traceback line belongs to the same traceback.
        """
        self.saw_sglang = True
        where = ev.values.get("frame")
        if isinstance(where, str) and len(self._tb_frames) < MAX_FRAMES:
            self._tb_frames.append(where)
        mine = range(min(self._tb_start, len(self.failures)), len(self.failures))
        for i in mine:  # the traceback's failures share its list of SGLang frames (innermost last)
            self.failures[i].values["frames"] = self._tb_frames
        if ev.values.get("stage") is None:
            return
        stage = str(ev.values["stage"])
        self._tb_stage = stage if self._tb_stage is None else _later(self._tb_stage, stage)
        if not mine and "frame" in ev.values:  # a traceback with no error line (yet): if none follows, it was cut
            self.cut_stage = stage if self.cut_stage is None else _later(self.cut_stage, stage)
        for i in mine:
            f = self.failures[i]
            later = _later(f.stage, stage)
            if later != f.stage:
                self.failures[i] = replace(f, stage=later)

    def _stage_of(self, label: str, ev: Event) -> str:
        if ev.values.get("warmup"):
            return "warmup"
        if label in self.ranks:
            return _current_stage(self.ranks[label])
        if not self.ranks:
            return "init"
        drafting = [r for r in self.ranks.values() if r.in_draft]
        return max((_current_stage(r) for r in drafting or self.ranks.values()), key=STAGES.index)

    def result(self, with_earlier: bool = True) -> NodeLog:
        """The frozen summary of everything fed so far (with the file's earlier launch attempts)."""
        return NodeLog(
            node=self.node, ranks=tuple(r.freeze() for r in sorted(self.ranks.values(), key=_label_order)),
            failures=tuple(self.failures), came_up=self.came_up,
            saw_sglang=self.saw_sglang or bool(self.ranks) or bool(self.failures),
            server_args=dict(self.server_args), versions=tuple(self.versions), max_total=dict(self.max_total),
            profiled=dict(self.profiled), workers=tuple(self.workers.values()), new_format=self.new_format,
            attempts=max(self.attempts, 1), bench=self.bench, release_span=self.releases.span(),
            first_ts=self.first_ts, last_ts=self.last_ts, traceback_stage=self.cut_stage,
            model_types=tuple(self.model_types),
            earlier=tuple(self.earlier) if with_earlier else (),
        )


_TRACEBACK_KINDS: Final = frozenset({"frame", "error", "crash"})


def _later(stage: str, hint: str) -> str:
    """``hint`` when it is a later startup step than ``stage``; a warmup failure stays a warmup failure."""
    if stage == "warmup" or STAGES.index(hint) <= STAGES.index(stage):
        return stage
    return hint


def _current_stage(r: _Rank) -> str:
    """The stage of the worker of rank ``r`` that is running: its draft while the draft loads."""
    return r.draft.stage if r.in_draft and r.draft is not None else r.stage


def _int(x: object) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def _str(x: object) -> str | None:
    return None if x is None else str(x)


def _label_order(r: _Rank) -> tuple[object, ...]:
    """Ranks in numeric order (TP0, TP1, ..., TP10; DP0 TP1 before DP1 TP0), not in the order the log named them."""
    import re

    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", r.label))
