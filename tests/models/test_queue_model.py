"""Queues: Kueue and Volcano documents mapped onto one internal model, and their bad inputs."""

from __future__ import annotations

import math

import pytest
import yaml

from hyperplace.models.queue import ANY_TYPE, DEFAULT_QUEUE, QueueError, parse_queues

KUEUE = """
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: h100}
spec: {nodeLabels: {gpu-type: H100}}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: a100-80}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: research}
spec:
  cohort: org
  fairSharing: {weight: 2}
  preemption: {reclaimWithinCohort: Any, withinClusterQueue: LowerPriority}
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: h100
      resources: [{name: nvidia.com/gpu, nominalQuota: 64, borrowingLimit: 32, lendingLimit: 16}]
    - name: a100-80
      resources: [{name: nvidia.com/gpu, nominalQuota: "8"}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: prod}
spec:
  cohort: org
  resourceGroups:
  - coveredResources: [nvidia.com/gpu]
    flavors:
    - name: h100
      resources: [{name: nvidia.com/gpu, nominalQuota: 128}]
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: team-a, namespace: research}
spec: {clusterQueue: research}
"""

VOLCANO = """
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: batch}
spec:
  weight: 3
  guarantee: {resource: {nvidia.com/gpu: 16}}
  capability: {nvidia.com/gpu: 48}
---
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: dev}
spec: {weight: 1, deserved: {nvidia.com/gpu: 8}, reclaimable: false}
"""


def _docs(text: str) -> list[tuple[str, dict]]:
    return [(f"q.yaml: document {i + 1}", d) for i, d in enumerate(yaml.safe_load_all(text))]


def test_kueue_cluster_queues_map_to_quotas_per_gpu_type() -> None:
    qs = parse_queues(_docs(KUEUE), known_types=["H100", "A100-80"])
    research = qs.queues["research"]
    assert research.quotas["H100"].nominal == 64
    assert research.quotas["H100"].cap == 96
    assert research.quotas["H100"].lendable == 16
    assert research.quotas["A100-80"].nominal == 8
    assert math.isinf(research.quotas["A100-80"].borrowing_limit)
    assert research.weight == 2 and research.cohort == "org"
    assert research.preemption == "reclaim-within-cohort"
    assert qs.queues["prod"].preemption == "never"
    assert [q.name for q in qs.cohort_members("org")] == ["research", "prod"]


def test_jobs_reach_queues_through_local_queue_label_or_volcano_keys() -> None:
    qs = parse_queues(_docs(KUEUE + "---" + VOLCANO))
    assert qs.queue_of({"kueue.x-k8s.io/queue-name": "team-a"}) == "research"
    assert qs.queue_of({"volcano.sh/queue-name": "batch"}) == "batch"
    assert qs.queue_of({}, {"scheduling.volcano.sh/queue-name": "dev"}) == "dev"
    assert qs.queue_of({}) == DEFAULT_QUEUE


def test_volcano_queues_share_the_cluster_by_weight() -> None:
    qs = parse_queues(_docs(VOLCANO))
    batch, dev = qs.queues["batch"], qs.queues["dev"]
    assert batch.quota_for("H100") is batch.quotas[ANY_TYPE]
    assert batch.quotas[ANY_TYPE].nominal == 16 and batch.quotas[ANY_TYPE].cap == 48
    assert dev.quotas[ANY_TYPE].nominal == 8 and math.isinf(dev.quotas[ANY_TYPE].cap)
    assert batch.weight == 3 and batch.cohort == dev.cohort
    assert dev.preemption == "never" and batch.preemption == "reclaim-within-cohort"


def test_nested_cohorts_share_within_their_root() -> None:
    text = KUEUE + """---
apiVersion: kueue.x-k8s.io/v1alpha1
kind: Cohort
metadata: {name: org}
spec: {parent: company}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: infra}
spec: {cohort: company}
"""
    qs = parse_queues(_docs(text))
    assert {q.name for q in qs.cohort_members("org")} == {"research", "prod", "infra"}


@pytest.mark.parametrize(
    ("text", "path", "words"),
    [
        ("kind: ClusterQueue\nmetadata: {name: q}\nspec:\n  resourceGroups:\n  - flavors:\n"
         "    - name: h100\n      resources: [{name: nvidia.com/gpu, nominalQuota: -4}]\n",
         "spec.resourceGroups[0].flavors[0].resources[0].nominalQuota", "non-negative"),
        ("kind: ResourceFlavor\nmetadata: {name: a100}\n---\nkind: ClusterQueue\nmetadata: {name: q}\n"
         "spec:\n  resourceGroups:\n  - flavors:\n    - name: h100\n      resources: []\n",
         "spec.resourceGroups[0].flavors[0].name", "unknown ResourceFlavor 'h100'"),
        ("kind: LocalQueue\nmetadata: {name: l}\nspec: {clusterQueue: nope}\n",
         "spec.clusterQueue", "unknown ClusterQueue 'nope'"),
        ("kind: Cohort\nmetadata: {name: a}\nspec: {parent: b}\n---\n"
         "kind: Cohort\nmetadata: {name: b}\nspec: {parent: a}\n",
         "spec.parent", "cycle: a -> b -> a"),
        ("apiVersion: scheduling.volcano.sh/v1beta1\nkind: Queue\nmetadata: {name: v}\n"
         "spec: {guarantee: {resource: {nvidia.com/gpu: 8}}, capability: {nvidia.com/gpu: 4}}\n",
         "spec.capability.nvidia.com/gpu", "below the guaranteed"),
        ("kind: ClusterQueue\nmetadata: {name: q}\nspec:\n  resourceGroups:\n  - flavors:\n"
         "    - name: tpu\n      resources: [{name: nvidia.com/gpu, nominalQuota: 4}]\n",
         "flavors[0].name", "does not have"),
        ("kind: ClusterQueue\nmetadata: {name: q}\n---\nkind: ClusterQueue\nmetadata: {name: q}\n",
         "metadata.name", "declared twice"),
        ("kind: Deployment\nmetadata: {name: q}\n", "kind", "expected ClusterQueue"),
    ],
)
def test_bad_queue_documents_name_the_field(text: str, path: str, words: str) -> None:
    with pytest.raises(QueueError) as err:
        parse_queues(_docs(text), known_types=["H100", "A100-80"])
    assert path in str(err.value)
    assert words in str(err.value)
