"""Cost-model fidelity: leave-one-out on Sailor's measured profiles, splits priced with the
measured times, predict latency (large published runs, held out of the fit: bench_fidelity.py).

    .venv/bin/python bench/bench_fidelity_profiles.py  # writes bench/results/fidelity_profiles.md

1. Leave one (model, GPU type) pair out of the fit, predict it: median absolute error of the
   per-layer forward+backward time (transformer layers, LM head, embedding) and of the
   iteration (one micro-batch through every layer), over the pair's (micro-batch, TP)
   configurations; the in-sample error (fit on everything) beside it.
2. Leave a whole GPU type out: its layers priced from the nearest measured type's
   efficiencies, scaled to its peak FLOPs and memory bandwidth.
3. Splits: for every heterogeneous mix of 2-4 stages of the profiled GPU types and every
   profiled model, the split chosen from the predictions (measurements stripped; the model's
   own profiles held out of the fit) is priced with the measured times and compared with
   the measured optimum; the symmetric and proportional splits beside it.
4. Large published runs (Megatron-LM, Megatron-Core, Llama 3), each predicted with the run
   held out of the fit, are bench/bench_fidelity.py's; observed step times of a user's runs,
   with their held-out error, are ``hyperplace calibrate --observations``'s table.
5. ``predict`` latency on the 126-layer llama3-405b.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hyperplace.costmodel.calibration import Calibration  # noqa: E402
from hyperplace.costmodel.fit import Row, fit_profiles, predict_row  # noqa: E402
from hyperplace.costmodel.predict import predict  # noqa: E402
from hyperplace.formulations.layer_split import build_split_data, evaluate_split  # noqa: E402
from hyperplace.models.gpu import default_catalog  # noqa: E402
from hyperplace.models.presets import model_preset  # noqa: E402
from hyperplace.models.profiles import (  # noqa: E402
    PROFILE_TRANSFORMER_LAYERS,
    layer_kind,
    layer_rows,
    llm_info,
    load_profile_model,
)
from hyperplace.models.split import SplitProblem, Stage  # noqa: E402
from hyperplace.solvers.split.baselines import proportional_cuts, symmetric_cuts  # noqa: E402
from hyperplace.solvers.split.dp import solve_dp  # noqa: E402
from benchlib import machine  # noqa: E402

OUT = Path(__file__).parent / "results" / "fidelity_profiles.md"
SAILOR_TO_CATALOG = {"V100-16": "V100-16", "A100-40": "A100-40", "A100-80": "A100-80",
                     "GH-96": "H100-80"}

def pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def median_abs(pairs: list[tuple[float, float]]) -> float | None:
    if not pairs:
        return None
    return statistics.median(abs(p / m - 1) for p, m in pairs)


def measured_iterations() -> dict[tuple[str, str, int, int], tuple[float, dict[str, int]]]:
    """Sum of fwd+bwd over every layer of each profile configuration, and layer counts."""
    out: dict[tuple[str, str, int, int], list[tuple[str, float]]] = defaultdict(list)
    for r in layer_rows():
        gpu = SAILOR_TO_CATALOG.get(r["gpu_type"])
        if gpu is None:
            continue
        n = len(llm_info()[r["model"]]["1"])
        kind = layer_kind(r["model"], int(r["layer"]), n)
        out[(r["model"], gpu, int(r["micro_batch_size"]), int(r["tensor_parallel"]))].append(
            (kind, float(r["fwd_s"]) + float(r["bwd_s"])))
    result = {}
    for key, values in out.items():
        counts: dict[str, int] = defaultdict(int)
        for kind, _ in values:
            counts[kind] += 1
        result[key] = (sum(t for _, t in values), dict(counts))
    return result


def predicted_iteration(cal: Calibration, rows: list[Row], key, counts: dict[str, int]
                        ) -> float | None:
    by_kind = {r.kind: r for r in rows if (r.model, r.gpu, r.micro_batch, r.tp) == key}
    total = 0.0
    for kind, count in counts.items():
        if kind not in by_kind:
            return None
        total += count * predict_row(cal, by_kind[kind])
    return total


def scores(cal: Calibration, rows: list[Row], pair: tuple[str, str], iters) -> dict[str, float | None]:
    mine = [r for r in rows if (r.model, r.gpu) == pair]
    out: dict[str, float | None] = {}
    for kind in ("transformer", "head", "embedding"):
        out[kind] = median_abs([(predict_row(cal, r), r.time_s) for r in mine if r.kind == kind])
    it = []
    for key, (measured, counts) in iters.items():
        if (key[0], key[1]) != pair:
            continue
        pred = predicted_iteration(cal, rows, key, counts)
        if pred is not None:
            it.append((pred, measured))
    out["iteration"] = median_abs(it)
    return out


def leave_one_out(lines: list[str]) -> dict[str, float]:
    full, rows = fit_profiles()
    iters = measured_iterations()
    pairs = sorted({(r.model, r.gpu) for r in rows})
    lines += ["## 1. Leave one (model, GPU) pair out", "",
              "Median absolute error over the pair's (micro-batch, TP) configurations; "
              "in-sample (fit on every pair) in brackets. Target for held-out pairs: "
              "layer and iteration <= 15 %.", "",
              "| model | GPU | configs | transformer layer | LM head | embedding | iteration |",
              "|---|---|---|---|---|---|---|"]
    held_layer, held_iter = [], []
    for pair in pairs:
        cal, _ = fit_profiles(exclude={pair})
        held = scores(cal, rows, pair, iters)
        ins = scores(full, rows, pair, iters)
        n = len({(r.micro_batch, r.tp) for r in rows if (r.model, r.gpu) == pair})
        cells = [f"{pct(held[k])} ({pct(ins[k])})" for k in
                 ("transformer", "head", "embedding", "iteration")]
        lines.append(f"| {pair[0]} | {pair[1]} | {n} | " + " | ".join(cells) + " |")
        held_layer.append(held["transformer"])
        held_iter.append(held["iteration"])
    ok_layer = sum(1 for x in held_layer if x is not None and x <= 0.15)
    ok_iter = sum(1 for x in held_iter if x is not None and x <= 0.15)
    lines += ["", f"Held-out pairs within 15 %: layer {ok_layer}/{len(pairs)}, iteration "
              f"{ok_iter}/{len(pairs)}. Median over pairs: layer "
              f"{pct(statistics.median(x for x in held_layer if x is not None))}, iteration "
              f"{pct(statistics.median(x for x in held_iter if x is not None))}.", ""]
    lines += ["Fit notes: " + "; ".join(full.notes), ""]
    return {"pairs_layer_ok": ok_layer, "pairs_iter_ok": ok_iter, "pairs": len(pairs)}


def leave_type_out(lines: list[str]) -> None:
    full, rows = fit_profiles()
    iters = measured_iterations()
    catalog = default_catalog()
    lines += ["## 2. Leave a whole GPU type out", "",
              "The held-out type is priced with the nearest measured type's efficiencies, "
              "scaled to its own peak FLOPs and memory bandwidth. Target <= 30 %.", "",
              "| held-out GPU | priced from | model | transformer layer | LM head | iteration |",
              "|---|---|---|---|---|---|"]
    for gpu in sorted({r.gpu for r in rows}):
        cal, _ = fit_profiles(exclude_gpus={gpu})
        _, note = cal.fit_for(catalog.get(gpu))
        near = note.split("nearest measured type ")[1].split(",")[0] if "nearest" in note else gpu
        for model in sorted({r.model for r in rows if r.gpu == gpu}):
            s = scores(cal, rows, (model, gpu), iters)
            lines.append(f"| {gpu} | {near} | {model} | {pct(s['transformer'])} | "
                         f"{pct(s['head'])} | {pct(s['iteration'])} |")
    lines.append("")


def strip_measurements(model):
    layers = [layer.model_copy(update={"measured": []}) for layer in model.layers]
    return model.model_copy(update={"layers": layers})


def split_fidelity(lines: list[str]) -> None:
    """Splits chosen from predictions, priced with measurements."""
    lines += ["## 3. Splits priced with the measured times", "",
              "Every mix of 2-4 pipeline stages (one TP group each) of the profiled GPU types "
              "with at least two types, fixed order as listed, for each profiled model at "
              "micro-batch 1 and the TP each type was measured at, each stage at its "
              "profile's precision. The split is chosen from the predictions (measurements "
              "stripped) of the fit on every profile (in-sample) and of a fit that holds the "
              "model's own profiles out; all splits are priced with the measured times. "
              "Ratio = bottleneck / measured optimum bottleneck. Target: chosen within 5 %.",
              "",
              "| model | mixes | chosen, in-sample fit: median / worst (within 5 %) | chosen, "
              "model held out: median / worst (within 5 %) | symmetric: median / worst | "
              "proportional (model held out): median / worst |", "|---|---|---|---|---|---|"]
    full, _ = fit_profiles()
    catalog = default_catalog()
    for model_name in ("OPT-350", "GPT-Neo-2.7", "LLAMA-3-8", "OPT-30"):
        measured_model = load_profile_model(f"{model_name}:mb=1")
        held, _ = fit_profiles(exclude={(model_name, g) for g in
                                        ("V100-16", "A100-40", "A100-80", "H100-80")})
        # TP per type: the smallest measured at mb=1 on every layer
        tp_of: dict[str, int] = {}
        for gpu in ("V100-16", "A100-40", "A100-80", "H100-80"):
            tps = sorted({m.tp for m in measured_model.layers[1].measured if m.gpu_type == gpu})
            if tps:
                tp_of[gpu] = tps[0]
        types = sorted(tp_of)
        chosen_r, insample_r, sym_r, prop_r = [], [], [], []
        for size in (2, 3, 4):
            for mix in itertools.combinations_with_replacement(types, size):
                if len(set(mix)) < 2:
                    continue
                # each stage at the precision its profile ran at (Sailor's V100 and some
                # A100-40 profiles are FP32, see the fit notes)
                stages = [Stage(name=f"s{i}", cluster="c", gpu_type=g, gpu_count=tp_of[g],
                                tp=tp_of[g],
                                precision=held.precision.get(f"{model_name}|{g}", "bf16"))
                          for i, g in enumerate(mix)]
                prob_m = SplitProblem(model=measured_model, stages=stages, microbatches=8,
                                      fixed_order=True, runtime_overhead_gb=0.0)
                prob_p = prob_m.model_copy(update={"model": strip_measurements(measured_model)})
                data_m = build_split_data(prob_m, catalog=catalog)
                data_p = build_split_data(prob_p, catalog=catalog, calibration=held)
                data_i = build_split_data(prob_p, catalog=catalog, calibration=full)
                # memory is not what is tested here: compare on time only
                for data in (data_m, data_p, data_i):
                    data.mem_cap[:] = float("inf")
                opt = solve_dp(data_m)
                pick = solve_dp(data_p)
                pick_i = solve_dp(data_i)
                if opt.cuts is None or pick.cuts is None or pick_i.cuts is None:
                    continue
                best = evaluate_split(data_m, opt.cuts).bottleneck_s
                chosen_r.append(evaluate_split(data_m, pick.cuts).bottleneck_s / best)
                insample_r.append(evaluate_split(data_m, pick_i.cuts).bottleneck_s / best)
                sym_r.append(evaluate_split(data_m, symmetric_cuts(data_m)).bottleneck_s / best)
                prop = proportional_cuts(data_p)
                if prop:
                    prop_r.append(evaluate_split(data_m, prop).bottleneck_s / best)

        def mw(xs: list[float]) -> str:
            return f"{statistics.median(xs):.3f} / {max(xs):.3f}" if xs else "-"

        def within(xs: list[float]) -> str:
            return f"{sum(1 for x in xs if x <= 1.05)}/{len(xs)}"

        lines.append(f"| {model_name} | {len(chosen_r)} | {mw(insample_r)} "
                     f"({within(insample_r)}) | {mw(chosen_r)} ({within(chosen_r)}) | "
                     f"{mw(sym_r)} | {mw(prop_r)} |")
    lines.append("")


def predict_latency(lines: list[str]) -> None:
    model = model_preset("llama3-405b")
    predict(model, "H100", tp=8, pp=16, dp=64, global_batch=2048, zero=1,
            sequence_parallel=True)
    times = []
    for _ in range(20):
        start = time.perf_counter()
        predict(model, "H100", tp=8, pp=16, dp=64, global_batch=2048, zero=1,
                sequence_parallel=True)
        times.append(time.perf_counter() - start)
    lines += ["## 5. predict latency", "",
              f"llama3-405b (126 layers), TP8 PP16 DP64, library call after the first: median "
              f"{1e3 * statistics.median(times):.1f} ms, max {1e3 * max(times):.1f} ms over 20 "
              "calls (target < 50 ms).", ""]




def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    start = time.perf_counter()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=Path(__file__).parent).stdout.strip()
    lines = ["# Cost-model fidelity on the small-shape set (Sailor profiles)", "",
             f"- date: {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, commit {commit}",
             f"- machine: {machine()} (shared by up to 8 engineers: timings are noisy)",
             "- command: `.venv/bin/python bench/bench_fidelity_profiles.py` (the fit set at scale: "
             "bench/bench_fidelity.py)",
             "- data: Sailor's measured per-layer profiles (bundled; GH-96 = GH200, priced as "
             "H100-80), transformer layers per model: "
             + ", ".join(f"{m} {n}" for m, n in PROFILE_TRANSFORMER_LAYERS.items()), ""]
    leave_one_out(lines)
    leave_type_out(lines)
    split_fidelity(lines)
    predict_latency(lines)
    lines.append(f"Bench wall time: {time.perf_counter() - start:.0f} s.")
    text = "\n".join(lines) + "\n"
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
