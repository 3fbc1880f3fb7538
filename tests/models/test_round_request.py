"""One request type for a round (models/request.RoundRequest): limits and rules validated
once in the library; the CLI names the flag of the field, the service the field itself."""

from __future__ import annotations

import pytest
from cli_run import run_main

from hyperplace.errors import InputError
from hyperplace.models.request import MAX_HOT_SPARES, MAX_MOVES, MAX_SEED, RoundRequest


@pytest.mark.parametrize("fields, path", [
    ({"hot_spares": -1}, "hotSpares"),
    ({"hot_spares": MAX_HOT_SPARES + 1}, "hotSpares"),
    ({"seed": MAX_SEED + 1}, "seed"),
    ({"budget_s": 0}, "budgetS"),
    ({"budget_s": float("nan")}, "budgetS"),
    ({"solver": "magic"}, "solver"),
    ({"policy": "fastest"}, "policy"),
    ({"running_moveable": True, "max_moves": MAX_MOVES + 1}, "maxMoves"),
    ({"max_moves": 2}, "maxMoves"),
    ({"running_moveable": True, "preemption": "lower-priority"}, "runningMoveable"),
])
def test_a_bad_request_names_its_field(fields, path):
    with pytest.raises(InputError) as err:
        RoundRequest.of(**fields)
    assert err.value.path == path


def test_the_request_gives_the_solve_its_arguments():
    req = RoundRequest.of(solver="greedy", running_moveable=True, max_moves=3, hot_spares=1)
    kw = req.solve_kwargs()
    assert kw["solver"] == "greedy" and kw["hot_spares"] == 1
    assert kw["migration"] is not None and kw["migration"].max_moves == 3
    assert RoundRequest.of().solve_kwargs()["migration"] is None
    # the documents' camelCase works too, as the service sends it
    assert RoundRequest.model_validate({"hotSpares": 2, "budgetS": 1.5}).hot_spares == 2


@pytest.mark.parametrize("args, flag", [
    (["--hot-spares", "2000"], "--hot-spares"),
    (["--hot-spares", "-1"], "--hot-spares"),
    (["--running-moveable", "--preemption", "lower-priority"], "--running-moveable"),
])
def test_the_cli_names_the_flag(args, flag, capsys):
    assert run_main(["solve", "--instance", "mixed-a100-h100", "--budget", "1", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {flag}:"), err
