"""``hyperplace calibrate``: refit the cost model to profiles and observed step times.

Examples::

    hyperplace calibrate --profiles ../shared/data/profiles -o calibration.json
    hyperplace calibrate --observations steps.csv -o calibration.json
    hyperplace predict --model-name llama3-8b --gpu H100 --tp 4 --calibration calibration.json

Prints the error before (the calibration given with ``--calibration``, default the bundled
one) and after the refit per (model, GPU type), and writes the file whole or not at all.
"""

from __future__ import annotations

import statistics
import sys
import time

import typer
from rich.table import Table

from hyperplace.costmodel.calibration import load_calibration, write_calibration
from hyperplace.costmodel.fit import fit_profiles, predict_row, read_profile_rows
from hyperplace.costmodel.observations import (
    MAX_LOO_ROWS,
    fit_step_scales,
    held_out_step_errors,
    misfits_and_errors,
    read_observations,
    step_errors,
)
from hyperplace.errors import InputError


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


class _Steps:
    """Where a calibration is, on stderr (the fits take seconds): a spinner on a terminal,
    else one plain line per step with the seconds since the start (a log, a pipe). Steps
    begin once every input is read, so a bad input is still the one line on stderr."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.status = None
        if sys.stderr.isatty():
            from rich.console import Console

            self.status = Console(stderr=True).status("calibrate")
            self.status.start()

    def __call__(self, words: str) -> None:
        if self.status is not None:
            self.status.update(f"calibrate: {words}")
        else:
            print(f"calibrate: {words} (at {time.perf_counter() - self.start:.1f} s)",
                  file=sys.stderr, flush=True)

    def stop(self) -> None:
        if self.status is not None:
            self.status.stop()


def calibrate_command(
    profiles: list[str] = typer.Option([], "--profiles",
                                       help="Sailor-format profile CSV or folder (repeat); "
                                            "default: the bundled Sailor profiles"),
    observations: str | None = typer.Option(None, "--observations",
                                            help="observed step times CSV"),
    calibration: str | None = typer.Option(None, "--calibration",
                                           help="calibration to compare against (default: "
                                                "bundled)"),
    output: str = typer.Option(..., "-o", "--output", help="calibration file to write"),
    fit_set: str = typer.Option("bundled", "--fit-set",
                                help="measured large runs to fit the transformer layer on "
                                     "(CSV as hyperplace/data/fit_set_large_runs.csv), "
                                     "'bundled' or 'none'"),
) -> None:
    """Refit per-layer efficiencies (and step scales) and write a calibration file."""
    step = _Steps()
    try:
        table = _calibrate(profiles, observations, calibration, output, fit_set, step)
    except InputError as exc:
        step.stop()
        typer.echo(f"error: {exc.one_line()}", err=True)
        raise typer.Exit(2) from None
    step.stop()
    from hyperplace.commands.render import console

    console().print(table)
    typer.echo(f"wrote {output}")


def _calibrate(profiles: list[str], observations: str | None, calibration: str | None,
               output: str, fit_set: str, step: _Steps) -> Table:
    """Read every input, fit, write the calibration; the before/after table."""
    # every input is read and checked before the fits run and before any progress line (a
    # bad file fails at once, in one line)
    before = load_calibration(calibration)
    obs = read_observations(observations) if observations else []
    misfits, errors_before = misfits_and_errors(before, obs, observations or "")
    if obs and len(misfits) == len(obs):
        raise InputError(f"no row's configuration fits in its GPUs' memory, so none can be "
                         f"fitted on (first: {misfits[0][1]}); give the runs' zero, "
                         "sequence_parallel and recompute columns", source=observations)
    for _, why in misfits:  # one line each, before the steps: the fit leaves them out
        print(f"warning: {observations}: {why}: left out of the fit (give the run's zero, "
              "sequence_parallel and recompute columns)", file=sys.stderr)
    left_out = {id(o) for o, _ in misfits}
    obs = [o for o in obs if id(o) not in left_out]
    if profiles:
        read_profile_rows(profiles)
    from hyperplace.costmodel.scale_fit import fit_scale, read_fit_set

    large_runs = None if fit_set == "none" else read_fit_set(
        None if fit_set == "bundled" else fit_set)
    step("fitting per-layer efficiencies to the "
         + ("profiles" if profiles else "bundled Sailor profiles"))
    after, rows = fit_profiles(profiles or None)
    report = None
    if large_runs is not None:
        step(f"fitting the transformer layer to {len(large_runs)} measured large runs, "
             "each also left out once")
        report = fit_scale(after, large_runs)
        after = report.calibration
    held_out: dict[tuple[str, str], float] | None = None
    if obs:
        step(f"fitting step scales to {len(obs)} observed step time"
             + ("s" if len(obs) != 1 else ""))
        if len(obs) <= MAX_LOO_ROWS:  # on the same fit as the step scales start from
            held_out = held_out_step_errors(after, obs, observations or "")
        after = fit_step_scales(after, obs, observations or "")
    after.created_by = "hyperplace calibrate" + "".join(
        f" --profiles {p}" for p in profiles) + (
        f" --fit-set {fit_set}" if fit_set != "bundled" else "") + (
        f" --observations {observations}" if observations else "")
    step("comparing the errors before and after")
    table = Table(title="median absolute error per (model, GPU): before -> after")
    for col in ("model", "GPU", "what", "rows", "before", "after"):
        table.add_column(col, justify="right" if col in ("rows", "before", "after")
                         else "left")
    for model, gpu in sorted({(r.model, r.gpu) for r in rows}):
        mine = [r for r in rows if (r.model, r.gpu) == (model, gpu)
                and r.kind == "transformer"]
        if not mine:
            continue
        err_b = statistics.median(abs(predict_row(before, r) / r.time_s - 1) for r in mine)
        err_a = statistics.median(abs(predict_row(after, r) / r.time_s - 1) for r in mine)
        table.add_row(model, gpu, "layer time", str(len(mine)), _pct(err_b), _pct(err_a))
    if report is not None:
        for res in report.results:
            table.add_row(res.row.run, res.row.gpu, "fit-set step (LOO)", "1", "-",
                          _pct(abs(res.loo_error)))
    if obs:
        ea = step_errors(after, obs, observations or "")
        for (model, gpu), err in errors_before.items():
            n = sum(1 for o in obs if (o.model, o.gpu) == (model, gpu))
            # after: on the rows fitted on (in-sample), then each row held out of the fit
            table.add_row(model, gpu, "step time (in-sample)", str(n), _pct(err),
                          _pct(ea.get((model, gpu))))
            loo = "-" if held_out is None or (model, gpu) not in held_out else \
                _pct(held_out[(model, gpu)])
            table.add_row(model, gpu, "step time (LOO)", str(n), _pct(err), loo)
        if held_out is None:
            print(f"note: {len(obs):,} observed steps: the held-out (LOO) errors are computed "
                  f"for at most {MAX_LOO_ROWS}", file=sys.stderr)
    write_calibration(after, output)
    return table


def register(app: typer.Typer) -> None:
    app.command("calibrate")(calibrate_command)
