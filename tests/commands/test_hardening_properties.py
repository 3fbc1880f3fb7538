"""Property: generated malformed documents fed to ``validate`` and ``solve`` (through the
console-script entry point) are answered with exit 0 or with one ``error:`` line and exit 2,
never a traceback."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli_run import run_main

VALID = yaml.safe_load("""\
apiVersion: hyperplace/v1
kind: Instance
metadata: {name: t}
spec:
  clusters:
  - name: c
    nodes:
    - {name: n0, gpuType: H100-80, gpuCount: 8, allocated: {0: run-a}, faulty: [7]}
    - {name: n1, gpuType: A100-80, gpuCount: 8, nvlink: explicit,
       nvlinkPairs: [{a: 0, b: 1, gigabytesPerSecond: 600}]}
    fabric:
      switches: [{name: leaf0}, {name: spine0, tier: 2}]
      links: [{a: n0, b: leaf0, gbps: 400}, {a: n1, b: leaf0, gbps: 400},
              {a: leaf0, b: spine0, gbps: 400, count: 2}]
  jobs:
  - apiVersion: ai.example.com/v1alpha1
    kind: FoundationModelTrainingJob
    metadata: {name: j1}
    spec:
      model: m
      replicaCount: 2
      resourceGroups:
      - name: tp
        type: TensorParallel
        gpusPerGroup: 4
        gpuRequirements: {minMemoryGB: 80, acceleratorType: H100}
        interNodeConnectivity: {maxHopCount: 1}
      - {name: dp, type: DataParallel, gpusPerGroup: 1}
      priority: high
""")

ODD_SCALARS = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([float("inf"), float("-inf"), float("nan"), 1e308, -0.0, 2**31, 2**63]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["", "a\nb", "\x00", "x" * 300, "H100", "Z9000", "n0", "leaf0", "run-a"]),
)
ODD_VALUES = st.recursive(
    ODD_SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=6,
)


def _paths(doc: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*prefix, i))
    return out


@st.composite
def malformed(draw: st.DrawFn) -> Any:
    doc = copy.deepcopy(VALID)
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        action = draw(st.sampled_from(["replace", "delete", "duplicate"]))
        if action == "delete":
            del parent[path[-1]]
        elif action == "duplicate" and isinstance(parent, list):
            parent.append(copy.deepcopy(parent[path[-1]]))
        else:
            parent[path[-1]] = draw(ODD_VALUES)
    return doc


def run(args: list[str]) -> int:
    return run_main(args)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(doc=malformed(), as_json=st.booleans())
def test_malformed_documents_never_raise(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         doc: Any, as_json: bool) -> None:
    import json

    path = tmp_path / ("doc.json" if as_json else "doc.yaml")
    try:
        text = json.dumps(doc) if as_json else yaml.safe_dump(doc, allow_unicode=True)
    except (ValueError, TypeError):  # not representable in that format
        return
    path.write_text(text, encoding="utf-8")
    for args in (["validate", str(path)], ["solve", "-i", str(path), "--budget", "0.3",
                                           "--solver", "greedy", "-f", "json"]):
        code = run(args)  # an exception other than SystemExit fails the test
        _, err = capsys.readouterr()
        assert code in (0, 2), (args, code, err)
        assert "Traceback" not in err
        if code == 2:
            assert err.startswith("error: ") and err.count("\n") == 1, err


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=200))
def test_random_bytes_never_raise(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                  data: bytes) -> None:
    path = tmp_path / "bytes.yaml"
    path.write_bytes(data)
    code = run(["validate", str(path)])
    _, err = capsys.readouterr()
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
