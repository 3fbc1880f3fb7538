"""The service takes the documents the CLI reads (#23): a Kubernetes Node List as the
``instance``, a Volcano Job among ``jobs``, Kueue's sample queues; bad fields are 422s with
the path."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import yaml

from hyperplace.check import check
from hyperplace.instances.registry import load_cluster_and_jobs
from hyperplace.models.plan import PlacementPlan
from hyperplace.service.launch import LocalServer

K8S = Path(__file__).parents[1] / "data" / "k8s"


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory):
    db = tmp_path_factory.mktemp("svc") / "service.sqlite"
    with LocalServer(db=db, workers=1) as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        yield c


def _docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]


def test_node_list_and_volcano_job(http: httpx.Client):
    nodes = json.loads((K8S / "nodes-kueue-tas-h100.json").read_text())
    (vjob,) = _docs("volcano-mindspore-gpu.yaml")
    body = {"instance": nodes, "jobs": [vjob], "queues": _docs("kueue-sample-gpu-queues.yaml"),
            "budgetS": 5}
    r = http.post("/v1/placement", json=body)
    assert r.status_code == 200, r.text
    plan = PlacementPlan.model_validate(r.json()["plan"] if "plan" in r.json() else r.json())
    assert [j.job for j in plan.jobs] == ["mindspore-gpu"]
    inst = load_cluster_and_jobs(K8S / "nodes-kueue-tas-h100.json",
                                 K8S / "volcano-mindspore-gpu.yaml")
    assert check(plan, inst) == []


def test_bad_node_is_422_with_the_path(http: httpx.Client):
    nodes = json.loads((K8S / "nodes-kueue-tas-h100.json").read_text())
    nodes["items"][3]["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-Nope"
    r = http.post("/v1/placement", json={"instance": nodes, "budgetS": 2})
    assert r.status_code == 422, r.text
    assert r.json()["path"] == "instance.items[3].metadata.labels.nvidia.com/gpu.product"
