"""Job traces for replay: Philly, Alibaba 2023, or a CSV of your own.

Built-in traces (copied into the package with their provenance in
``hyperplace/data/PROVENANCE.md``):

* ``philly``: the Microsoft Philly sample (2,000 jobs from 2017-11-01, 2.4 days): columns
  ``submit_time_s``, ``duration_s``, ``num_gpus``. No GPU type.
* ``alibaba-2023``: the Alibaba ``cluster-trace-gpu-v2023`` pod sample: ``creation_time``,
  ``duration_s``, ``num_gpu``, ``gpu_milli``, ``gpu_spec``. Pods asking for no GPU or for a
  fraction of one (``gpu_milli < 1000``: GPU sharing, which a whole-GPU placement engine
  does not model) are skipped and counted; ``gpu_spec`` is the pod's GPU-type constraint.

A CSV ``FILE`` needs the columns ``submit_time_s``, ``duration_s`` and ``num_gpus``; it may
add ``name``, ``gpu_type`` (``|``-separated allowed types) and ``queue`` (the Kueue
ClusterQueue/LocalQueue or Volcano Queue the job is submitted to; the instance's
``spec.queues`` or ``simulate --queues`` must declare it; empty: ``default``) and ``model``
(the job's model, a preset name of :mod:`hyperplace.models.presets` or one of its aliases,
as ElasticFlow-style traces name each job's model; empty: drawn, see
:mod:`hyperplace.sim.workload`). Rows must be in submit order and names (given, or
``job-NNNNN``) unique; a UTF-8 byte-order mark is read. Limits: at most :data:`MAX_ROWS`
rows (refused before any row is parsed) and :data:`MAX_BYTES` bytes.

Bad input (missing columns, a non-numeric, negative or non-finite duration or submit time,
a GPU count that is not a positive integer, rows out of submit order) raises
:class:`~hyperplace.errors.InputError` naming the file, the line and the column.
"""

from __future__ import annotations

import csv
import io
import itertools
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from hyperplace.errors import InputError
from hyperplace.instances.importers.alibaba import map_model
from hyperplace.io import read_text_limited

MAX_ROWS = 1_000_000
MAX_BYTES = 200 * 1024 * 1024
BUILTIN = ("philly", "alibaba-2023")


@dataclass(frozen=True)
class TraceRow:
    name: str
    submit_s: float
    duration_s: float
    gpus: int
    gpu_types: tuple[str, ...] = ()
    line: int = 0
    queue: str = ""
    model: str = ""


@dataclass
class Trace:
    name: str
    source: str
    rows: list[TraceRow]
    skipped: int = 0
    skipped_why: str = ""

    @property
    def span_s(self) -> float:
        return self.rows[-1].submit_s - self.rows[0].submit_s if self.rows else 0.0


def _number(text: str, column: str, line: int, src: str, *, allow_negative: bool = False) -> float:
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise InputError(f"line {line}: {column}: not a number: {text!r}", source=src) from None
    if not math.isfinite(value):
        raise InputError(f"line {line}: {column}: must be finite, got {text.strip()}", source=src)
    if value < 0 and not allow_negative:
        raise InputError(f"line {line}: {column}: must be >= 0, got {text.strip()}", source=src)
    return value


def _count(text: str, column: str, line: int, src: str) -> int:
    value = _number(text, column, line, src)
    if value != int(value):
        raise InputError(f"line {line}: {column}: must be a whole number, got {text.strip()}",
                         source=src)
    return int(value)


def _reader(text: str, src: str, required: tuple[str, ...]) -> csv.DictReader:
    reader = csv.DictReader(io.StringIO(text))
    header = [h.strip() for h in (reader.fieldnames or [])]
    if not header:
        raise InputError("empty file (expected a CSV header)", source=src)
    missing = [c for c in required if c not in header]
    if missing:
        raise InputError(f"line 1: missing column{'s' if len(missing) > 1 else ''} "
                         f"{', '.join(missing)} (have: {', '.join(header)})", source=src)
    reader.fieldnames = header
    return reader


def _check_order(rows: list[TraceRow], src: str) -> None:
    for prev, row in zip(rows, rows[1:]):
        if row.submit_s < prev.submit_s:
            raise InputError(f"line {row.line}: submit time {row.submit_s:g} is earlier than "
                             f"line {prev.line}'s {prev.submit_s:g} (rows must be in submit "
                             "order)", source=src)


def _model(text: str, line: int, src: str) -> str:
    """A trace's ``model`` field as a preset name ('' when empty)."""
    from hyperplace.models.presets import ALIASES, preset_names

    name = text.strip().lower()
    if not name:
        return ""
    name = ALIASES.get(name, name)
    if name not in preset_names():
        raise InputError(f"line {line}: model: unknown model {text.strip()!r} (known: "
                         f"{', '.join(preset_names())})", source=src)
    return name


def _bundled(name: str) -> str:
    ref = resources.files("hyperplace.data").joinpath("traces", name)
    return ref.read_text(encoding="utf-8")


def parse_csv_trace(text: str, src: str) -> Trace:
    """A trace in the generic CSV format (see the module docstring)."""
    text = text.removeprefix("\ufeff")  # a spreadsheet's UTF-8 byte-order mark
    if text.count("\n") > MAX_ROWS + 1 and sum(  # refused before any row is parsed
            1 for _ in itertools.islice(csv.reader(io.StringIO(text)), MAX_ROWS + 2)) \
            > MAX_ROWS + 1:
        raise InputError(f"more than {MAX_ROWS:,} rows (the limit of a trace)", source=src)
    reader = _reader(text, src, ("submit_time_s", "duration_s", "num_gpus"))
    rows: list[TraceRow] = []
    lines: dict[str, int] = {}
    for i, rec in enumerate(reader):
        line = i + 2
        if len(rows) >= MAX_ROWS:
            raise InputError(f"more than {MAX_ROWS:,} rows (the limit of a trace)", source=src)
        if None in rec.values():
            raise InputError(f"line {line}: fewer fields than the header", source=src)
        gpus = _count(rec["num_gpus"], "num_gpus", line, src)
        if gpus < 1:
            raise InputError(f"line {line}: num_gpus: must be >= 1, got {gpus}", source=src)
        types = tuple(t.strip() for t in (rec.get("gpu_type") or "").split("|") if t.strip())
        queue = (rec.get("queue") or "").strip()
        if len(queue) > 253 or any(not ch.isprintable() for ch in queue):
            raise InputError(f"line {line}: queue: a queue name is 1 to 253 printable "
                             "characters", source=src)
        model = _model(rec.get("model") or "", line, src)
        name = (rec.get("name") or "").strip() or f"job-{i:05d}"
        if name in lines:
            raise InputError(f"line {line}: name: {name!r} is line {lines[name]}'s name too "
                             "(a job's name must be unique)", source=src)
        lines[name] = line
        rows.append(TraceRow(name=name,
                             submit_s=_number(rec["submit_time_s"], "submit_time_s", line, src),
                             duration_s=_number(rec["duration_s"], "duration_s", line, src),
                             gpus=gpus, gpu_types=types, line=line, queue=queue, model=model))
    _check_order(rows, src)
    return Trace(name=Path(src).stem, source=src, rows=rows)


def _philly() -> Trace:
    src = "philly_sample.csv"
    reader = _reader(_bundled(src), src, ("job_id", "submit_time_s", "duration_s", "num_gpus"))
    rows = []
    for i, rec in enumerate(reader):
        line = i + 2
        rows.append(TraceRow(name=f"philly-{rec['job_id'].strip()}",
                             submit_s=_number(rec["submit_time_s"], "submit_time_s", line, src),
                             duration_s=_number(rec["duration_s"], "duration_s", line, src),
                             gpus=_count(rec["num_gpus"], "num_gpus", line, src), line=line))
    _check_order(rows, src)
    return Trace(name="philly", source=src, rows=rows)


def _alibaba_2023() -> Trace:
    src = "alibaba_gpu2023_pods_sample.csv"
    reader = _reader(_bundled(src), src, ("name", "num_gpu", "gpu_milli", "gpu_spec",
                                          "creation_time", "duration_s"))
    rows: list[TraceRow] = []
    skipped = 0
    for i, rec in enumerate(reader):
        line = i + 2
        gpus = _count(rec["num_gpu"], "num_gpu", line, src)
        milli = _count(rec["gpu_milli"], "gpu_milli", line, src)
        if gpus < 1 or milli < 1000 or not rec["duration_s"].strip():
            skipped += 1
            continue
        types: list[str] = []
        for token in rec["gpu_spec"].split("|"):
            token = token.strip()
            if token and token.lower() != "nan":
                mapped = map_model(token)
                if mapped is None:
                    raise InputError(f"line {line}: gpu_spec: unknown GPU model {token!r}",
                                     source=src)
                types.append(mapped)
        rows.append(TraceRow(name=rec["name"].strip(),
                             submit_s=_number(rec["creation_time"], "creation_time", line, src),
                             duration_s=_number(rec["duration_s"], "duration_s", line, src),
                             gpus=gpus, gpu_types=tuple(types), line=line))
    _check_order(rows, src)
    return Trace(name="alibaba-2023", source=src, rows=rows, skipped=skipped,
                 skipped_why="pods with no GPU, a fractional GPU or no duration")


#: ``repeat`` at most this many copies; a repeated trace, like a read one, at most
#: :data:`MAX_ROWS` rows (a replay's memory and time grow with its jobs).
MAX_REPEAT = 100


def repeat_rows(rows: list[TraceRow], times: int) -> list[TraceRow]:
    """``rows`` (sorted by submit time) replayed ``times`` times back to back.

    Copy ``c`` (0-based) is the rows with submit times shifted by ``c`` x (the rows' span +
    one mean gap between arrivals), so the arrival pattern repeats with the gap it has
    inside; rows of copies after the first are named ``NAME~c``, so anything drawn per job
    name (the fm workload's model, the prediction error) is drawn anew for each copy."""
    if times <= 1 or not rows:
        return list(rows)
    span = rows[-1].submit_s - rows[0].submit_s
    shift = span + span / max(len(rows) - 1, 1)
    out = list(rows)
    for c in range(1, times):
        out.extend(TraceRow(f"{r.name}~{c}", r.submit_s + c * shift, r.duration_s, r.gpus,
                            r.gpu_types, r.line, r.queue, r.model) for r in rows)
    return out


def load_trace(name_or_path: str, *, start_s: float | None = None, end_s: float | None = None,
               limit: int | None = None, repeat: int = 1) -> Trace:
    """A trace by name (``philly``, ``alibaba-2023``) or CSV path, cut to a time window.

    ``start_s``/``end_s`` are seconds from the trace's first submission; submit times are
    shifted so the window starts at 0. ``limit`` keeps the first jobs of the window.
    ``repeat`` replays what is kept that many times back to back (:func:`repeat_rows`): a
    short sample then offers the same load over a longer window, so a replay's ramp-up
    from an empty cluster weighs less (at most :data:`MAX_REPEAT` copies and
    :data:`MAX_ROWS` rows).
    """
    if isinstance(repeat, bool) or not isinstance(repeat, int) or not 1 <= repeat <= MAX_REPEAT:
        raise InputError(f"must be a whole number from 1 to {MAX_REPEAT}, got {repeat!r}",
                         path="--repeat")
    if name_or_path == "philly":
        trace = _philly()
    elif name_or_path == "alibaba-2023":
        trace = _alibaba_2023()
    else:
        path = Path(name_or_path)
        if not path.exists():
            raise InputError(f"no such trace file (built-in traces: {', '.join(BUILTIN)})",
                             source=name_or_path)
        # the absolute path: a file named ``-`` is a file here, not standard input
        text = read_text_limited(path.absolute(), str(path), limit=MAX_BYTES)
        trace = parse_csv_trace(text, str(path))
    if not trace.rows:
        raise InputError("the trace has no usable jobs", source=trace.source)
    t0 = trace.rows[0].submit_s
    lo = t0 + (start_s or 0.0)
    hi = t0 + end_s if end_s is not None else math.inf
    kept = [r for r in trace.rows if lo <= r.submit_s < hi]
    if limit is not None:
        kept = kept[:limit]
    if not kept:
        raise InputError(f"no jobs submitted in the window [{start_s or 0:g}, "
                         f"{'end' if end_s is None else f'{end_s:g}'}) s", source=trace.source)
    if len(kept) * repeat > MAX_ROWS:
        raise InputError(f"{len(kept):,} jobs x {repeat} copies is more than "
                         f"{MAX_ROWS:,} rows (the limit of a trace); repeat fewer times or "
                         "cut the window",
                         path="--repeat")
    base = kept[0].submit_s
    trace.rows = repeat_rows([TraceRow(r.name, r.submit_s - base, r.duration_s, r.gpus,
                                       r.gpu_types, r.line, r.queue, r.model) for r in kept],
                             repeat)
    if repeat > 1:
        trace.name = f"{trace.name} x{repeat}"
    return trace
