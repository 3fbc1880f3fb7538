"""Observed step times (what a cluster's monitoring exports) and the feedback they give.

A CSV with one row per observed job configuration::

    job,model,gpu_type,tp,pp,dp,micro_batch,global_batch,seq,step_time_s[,precision]
        [,zero][,sequence_parallel][,recompute]

``model`` is a preset name (``hyperplace split --help`` lists them). The optional columns say
how the run saved memory, as ``predict`` takes it: ``zero`` (ZeRO stage 0-3, default 0),
``sequence_parallel`` (true/false, default: ``predict``'s, on with TP > 1) and ``recompute``
(none, selective or full; default none). Rows are read whole or refused with one line naming
the file, row and column. A row whose configuration does not fit in its GPUs' memory (as
``predict`` computes it) ran some other way than the row says, so it is left out of the fit
(:func:`memory_misfits`; ``calibrate`` names each one, and refuses when none is left). The feedback is a multiplicative
step-time scale per (model, GPU type), and per GPU type over all its models, fitted as the
geometric mean of measured / predicted and applied to the layer times, so ``split``,
``predict`` and ``solve`` all see it.
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from hyperplace.costmodel.calibration import Calibration
from hyperplace.costmodel.predict import predict
from hyperplace.errors import InputError
from hyperplace.models.gpu import default_catalog
from hyperplace.models.presets import model_preset

COLUMNS = ("job", "model", "gpu_type", "tp", "pp", "dp", "micro_batch", "global_batch", "seq",
           "step_time_s")
MAX_ROWS = 100_000
ROUNDS = 3  # re-predict after scaling: the scale acts on layer times, not on the whole step


@dataclass(frozen=True)
class Observation:
    job: str
    model: str
    gpu: str
    tp: int
    pp: int
    dp: int
    micro_batch: int
    global_batch: int
    seq: int
    step_time_s: float
    precision: str = "bf16"
    zero: int = 0
    sequence_parallel: bool | None = None
    recompute: str = "none"
    line: int = 0

    def settings(self) -> dict:
        """The row's memory settings as :func:`~hyperplace.costmodel.predict.predict`'s
        keywords."""
        return {"zero": self.zero, "sequence_parallel": self.sequence_parallel,
                "recompute": self.recompute == "full",
                "selective_recompute": self.recompute == "selective"}


def read_observations(path: str | Path) -> list[Observation]:
    """Rows of an observations CSV; InputError naming the file, row and column."""
    source = str(path)
    from hyperplace.io import read_text_limited

    # the file's text whole (size limit, valid UTF-8: a binary file was a traceback)
    fh = io.StringIO(read_text_limited(path, source), newline="")
    catalog = default_catalog()
    out: list[Observation] = []
    with fh:
        reader = csv.DictReader(fh)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise InputError(f"missing columns: {', '.join(missing)}", source=source,
                             path="header")
        for line, row in enumerate(reader, start=2):
            if len(out) >= MAX_ROWS:
                raise InputError(f"more than {MAX_ROWS:,} rows", source=source)
            where = f"row {line}"
            ints = {}
            for col in ("tp", "pp", "dp", "micro_batch", "global_batch", "seq"):
                text = (row.get(col) or "").strip()
                if not text.isdigit() or int(text) <= 0:
                    raise InputError(f"{col}: expected a positive integer, got {text!r}",
                                     source=source, path=where)
                ints[col] = int(text)
            try:
                step = float(row.get("step_time_s") or "")
            except ValueError:
                raise InputError(f"step_time_s: expected a number, got "
                                 f"{row.get('step_time_s')!r}", source=source,
                                 path=where) from None
            if not math.isfinite(step) or step <= 0:
                raise InputError(f"step_time_s: expected a positive, finite time, got {step}",
                                 source=source, path=where)
            gpu = catalog.find((row.get("gpu_type") or "").strip())
            if gpu is None:
                raise InputError(f"gpu_type: unknown GPU type {row.get('gpu_type')!r}",
                                 source=source, path=where)
            try:
                model = model_preset(row.get("model") or "").name
            except InputError as exc:
                raise InputError(f"model: {exc.message}", source=source, path=where) from None
            precision = (row.get("precision") or "bf16").strip() or "bf16"
            if precision not in ("bf16", "fp16", "fp32"):
                raise InputError(f"precision: expected bf16, fp16 or fp32, got {precision!r}",
                                 source=source, path=where)
            zero = (row.get("zero") or "0").strip() or "0"
            if zero not in ("0", "1", "2", "3"):
                raise InputError(f"zero: expected 0, 1, 2 or 3, got {zero!r}", source=source,
                                 path=where)
            sp_text = (row.get("sequence_parallel") or "").strip().lower()
            if sp_text not in ("", "true", "false"):
                raise InputError(f"sequence_parallel: expected true or false, got {sp_text!r}",
                                 source=source, path=where)
            recompute = (row.get("recompute") or "none").strip().lower() or "none"
            if recompute not in ("none", "selective", "full"):
                raise InputError(f"recompute: expected none, selective or full, got "
                                 f"{recompute!r}", source=source, path=where)
            out.append(Observation(job=(row.get("job") or "").strip(), model=model,
                                   gpu=gpu.name, step_time_s=step, precision=precision,
                                   zero=int(zero), recompute=recompute, line=line,
                                   sequence_parallel=None if not sp_text else sp_text == "true",
                                   **ints))
    if not out:
        raise InputError("no observations", source=source)
    return out


def _predicted(calibration: Calibration, obs: Observation, source: str = ""):
    try:
        return predict(model_preset(obs.model), obs.gpu, tp=obs.tp, pp=obs.pp, dp=obs.dp,
                       micro_batch=obs.micro_batch, global_batch=obs.global_batch, seq=obs.seq,
                       precision=obs.precision, calibration=calibration, detail=False,
                       **obs.settings())
    except InputError as exc:
        raise InputError(f"row {obs.line}: job {obs.job!r}: {exc.one_line()}",
                         source=source or None) from None


def predicted_step(calibration: Calibration, obs: Observation, source: str = "") -> float:
    return _predicted(calibration, obs, source).step_time_s


def memory_misfits(calibration: Calibration, observations: list[Observation],
                   source: str = "") -> list[tuple[Observation, str]]:
    """The rows whose configuration does not fit in its GPUs' memory, each with one line
    saying so (``row N: job: needs X GB per GPU of the type's Y``): a fit on them would
    learn the step time of a run that cannot happen as written."""
    return misfits_and_errors(calibration, observations, source)[0]


def misfits_and_errors(calibration: Calibration, observations: list[Observation],
                       source: str = "") -> tuple[list[tuple[Observation, str]],
                                                  dict[tuple[str, str], float]]:
    """:func:`memory_misfits` and the :func:`step_errors` of the rows that fit, each row
    predicted once (``calibrate`` reads both before its fits; it predicted every row twice)."""
    misfits: list[tuple[Observation, str]] = []
    steps: list[tuple[Observation, float]] = []
    for obs in observations:
        pred = _predicted(calibration, obs, source)
        if pred.fits:
            steps.append((obs, pred.step_time_s))
        else:
            misfits.append((obs, f"row {obs.line}: job {obs.job!r}: {obs.model} at TP "
                            f"{obs.tp} x PP {obs.pp} x DP {obs.dp} needs "
                            f"{pred.memory_per_gpu_gb:.1f} GB per GPU, more than {obs.gpu}'s "
                            f"{pred.memory_capacity_gb:g} GB (zero {obs.zero}, recompute "
                            f"{obs.recompute})"))
    return misfits, _median_errors(steps)


def _median_errors(steps: list[tuple[Observation, float]]) -> dict[tuple[str, str], float]:
    """Median absolute relative error of predicted step times per (model, GPU type)."""
    errors: dict[tuple[str, str], list[float]] = {}
    for obs, pred in steps:
        errors.setdefault((obs.model, obs.gpu), []).append(abs(pred / obs.step_time_s - 1))
    return {k: statistics.median(v) for k, v in sorted(errors.items())}


def fit_step_scales(calibration: Calibration, observations: list[Observation],
                    source: str = "") -> Calibration:
    """A copy of ``calibration`` with step scales fitted to the observations."""
    scales: dict[str, float] = {}
    for _ in range(ROUNDS):
        current = Calibration(**{**calibration.__dict__, "step_scale": dict(scales)})
        ratios: dict[str, list[float]] = {}
        for obs in observations:
            ratio = obs.step_time_s / predicted_step(current, obs, source)
            ratios.setdefault(f"{obs.model}|{obs.gpu}", []).append(math.log(ratio))
            ratios.setdefault(f"*|{obs.gpu}", []).append(math.log(ratio))
        for key, logs in ratios.items():
            scales[key] = scales.get(key, 1.0) * math.exp(statistics.fmean(logs))
    return Calibration(**{**calibration.__dict__, "step_scale": scales,
                          "fitted_on": [*calibration.fitted_on, f"observations {source}"]})


def step_errors(calibration: Calibration, observations: list[Observation],
                source: str = "") -> dict[tuple[str, str], float]:
    """Median absolute relative step-time error per (model, GPU type)."""
    return _median_errors([(obs, predicted_step(calibration, obs, source))
                           for obs in observations])


#: Most observations the leave-one-out errors are computed for (one step-scale fit per row:
#: quadratic in the rows); above it the calibrate table says so instead.
MAX_LOO_ROWS = 200


def held_out_step_errors(calibration: Calibration, observations: list[Observation],
                         source: str = "") -> dict[tuple[str, str], float]:
    """Median absolute relative step-time error per (model, GPU type), each row predicted by
    step scales fitted on the other rows only (leave one out): the fit's error on data held
    out of it. A row that is the only one has no other to fit on and is not counted."""
    steps: list[tuple[Observation, float]] = []
    for i, held in enumerate(observations):
        rest = observations[:i] + observations[i + 1:]
        if rest:
            tuned = fit_step_scales(calibration, rest, source)
            steps.append((held, predicted_step(tuned, held, source)))
    return _median_errors(steps)

