"""Bundled instances, the seeded generator, summaries and the Cluster + jobs loader."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from hyperplace.errors import InputError
from hyperplace.instances import (
    BUNDLED,
    DEFAULT_INSTANCE,
    generate,
    list_instances,
    load_cluster_and_jobs,
    load_instance,
    summarize,
    validate_file,
)
from hyperplace.instances.bundled import BUILDERS, data_dir, render, seed_job
from hyperplace.instances.generator import job_of_size, philly_gpu_counts
from hyperplace.instances.registry import bundled_names, render_instance
from hyperplace.instances.summary import fragmentation, largest_free_nvlink_set
from hyperplace.io import load_documents
from hyperplace.models import GPUCatalog, Instance, Node, TrainingJob

PRESENT = bundled_names()


def _all_nodes(instance: Instance) -> list[Node]:
    return [n for c in instance.clusters for n in c.nodes]


# ---- bundled files -----------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_committed_file_is_what_the_builder_makes(name: str) -> None:
    committed = (data_dir() / f"{name}.yaml").read_text()
    assert committed == render(name), f"run: python -m hyperplace.instances.bundled {name}"


@pytest.mark.parametrize("name", PRESENT)
@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_bundled_instance_round_trips_through_export(tmp_path: Path, name: str,
                                                     fmt: str) -> None:
    path = tmp_path / f"{name}.{fmt}"
    path.write_text(render_instance(load_instance(name), fmt))
    assert load_instance(str(path)) == load_instance(name)


@pytest.mark.parametrize("name", PRESENT)
def test_bundled_instance_validates(name: str) -> None:
    assert validate_file(data_dir() / f"{name}.yaml").startswith(f"Instance {name}")


def test_list_instances_agrees_with_the_files() -> None:
    infos = {i.name: i for i in list_instances()}
    assert list(infos) == PRESENT and DEFAULT_INSTANCE in infos
    assert PRESENT[:len(BUNDLED)] == list(BUNDLED)  # the catalogue first, in order
    for name, info in infos.items():
        nodes = _all_nodes(load_instance(name))
        assert info.gpus == sum(n.gpu_count for n in nodes)
        assert info.free_gpus == sum(n.free_count for n in nodes)
        assert info.description and info.source


def test_seed_federation() -> None:
    inst = load_instance("seed-beijing-shanghai")
    assert [c.name for c in inst.clusters] == ["beijing", "shanghai"]
    assert {n.gpu_type for n in inst.clusters[0].nodes} == {"B200"}
    assert {n.gpu_type for n in inst.clusters[1].nodes} == {"H100-80"}
    (wan,) = inst.spec.inter_cluster_links
    assert (wan.gbps, wan.latency_ms) == (100, 20)
    assert inst.spec.model == "seed-8layer"
    assert len(inst.jobs) == 1 and inst.jobs[0].spec.model == "seed-8layer"
    assert "assum" in inst.metadata.annotations["hyperplace.io/assumptions"]


def test_mixed_holds_the_verbatim_seed_and_a_copy_that_can_fit(seed_job_path: Path) -> None:
    inst = load_instance("mixed-a100-h100")
    (doc,) = load_documents(seed_job_path)
    jobs = {j.name: j for j in inst.jobs}
    assert jobs["llama-3-120b-finetune"] == TrainingJob.model_validate(doc) == seed_job()
    small = jobs["llama-3-120b-finetune-small"]
    assert small.spec.replica_count == 4 and small.total_gpus == 32
    nodes = _all_nodes(inst)
    h100 = sum(n.gpu_count for n in nodes if n.gpu_type == "H100-80")
    assert h100 < jobs["llama-3-120b-finetune"].total_gpus  # the verbatim seed stays pending
    free_h100_nodes = sum(1 for n in nodes if n.gpu_type == "H100-80" and n.free_count == 8)
    assert free_h100_nodes >= 4  # ... but the small copy fits
    assert 1 <= sum(len(n.faulty) for n in nodes) <= 2
    assert any(0 < n.free_count < n.gpu_count for n in nodes)
    assert {j.spec.priority for j in inst.jobs} >= {"low", "normal", "high"}
    assert any(0 < j.total_gpus <= 4 for j in inst.jobs)
    impossible = jobs["tp16-single-node"].units()[0]
    assert impossible.gpus == 16 and impossible.max_hop_count == 0
    assert jobs["mi300x-finetune"].units()[0].gpu_types == "MI300X"
    assert not any(inst.catalog.get(n.gpu_type).matches("MI300X") for n in nodes)
    assert any(j.between_replicas.max_hop_count == 1 for j in inst.jobs)


def test_superpod_is_half_busy_and_scattered() -> None:
    inst = load_instance("superpod-h100-4su")
    nodes = _all_nodes(inst)
    assert len(nodes) == 128 and sum(n.gpu_count for n in nodes) == 1024
    busy = sum(len(n.allocated) for n in nodes) / 1024
    assert 0.4 <= busy <= 0.6
    summary = summarize(inst)
    tiers = summary.clusters[0].tiers
    assert summary.clusters[0].fabric == "superpod-rail"
    assert [t.domain_count for t in tiers] == [4, 1]
    assert all(d.free_gpus < d.gpus for d in tiers[0].domains)  # every SU is touched
    assert 25 <= len(inst.jobs) <= 35
    assert len({j.total_gpus for j in inst.jobs}) >= 5


def test_dgx1_has_free_gpus_that_are_not_an_nvlink_clique() -> None:
    nodes = _all_nodes(load_instance("dgx1-v100"))
    assert {n.nvlink for n in nodes} == {"hybrid_cube_mesh"}
    assert any(n.free_count >= 4 and largest_free_nvlink_set(n) < 4 for n in nodes)
    assert any(largest_free_nvlink_set(n) == 4 for n in nodes)
    jobs = load_instance("dgx1-v100").jobs
    sizes = {u.gpus for j in jobs for u in j.units() if u.min_nvlink_gbps > 0}
    assert {4, 8} <= sizes


def test_alibaba_is_the_whole_real_gpu_fleet() -> None:
    import csv

    from hyperplace.instances.bundled import ALIBABA_QUEUE_CAP

    with (data_dir() / "traces" / "alibaba_gpu2023_nodes.csv").open() as fh:
        rows = [r for r in csv.DictReader(fh) if int(r["gpu"]) > 0]
    inst = load_instance("alibaba-2023")
    nodes = _all_nodes(inst)
    assert {n.name for n in nodes} == {r["sn"] for r in rows}
    assert sum(n.gpu_count for n in nodes) == sum(int(r["gpu"]) for r in rows)
    assert len(inst.jobs) == ALIBABA_QUEUE_CAP
    declared = {t.name for t in inst.spec.gpu_types}
    assert {"G2", "P100"} <= declared and "T4" not in declared  # T4: the catalog's row
    assert {n.gpu_type for n in nodes} >= {"T4", "A10"}
    for job in inst.jobs:
        selector = job.allowed_types(job.spec.resource_groups[0])
        assert selector is None or all(part in inst.catalog for part in selector.split("|"))


# ---- summary -------------------------------------------------------------------------------

def test_fragmentation_and_nvlink_sets_by_hand() -> None:
    whole = Node(name="a", gpu_type="H100-80", gpu_count=8)
    half = Node(name="b", gpu_type="H100-80", gpu_count=8, allocated={0: "x", 1: "x", 2: "y"},
                faulty=[3])
    assert fragmentation([whole, half]) == pytest.approx(1 - 8 / 12)
    assert fragmentation([half]) == 1.0
    assert fragmentation([]) == 0.0
    assert largest_free_nvlink_set(half) == 4
    # free {2,3,6,7} on a DGX-1: a 4-cycle of NVLinks, so no NVLink triangle
    mesh = Node(name="c", gpu_type="V100-32", gpu_count=8, nvlink="hybrid_cube_mesh",
                allocated={0: "x", 1: "x", 4: "x", 5: "x"})
    assert largest_free_nvlink_set(mesh) == 2
    pcie = Node(name="d", gpu_type="V100-32", gpu_count=8, nvlink="pcie")
    assert largest_free_nvlink_set(pcie) == 1


def test_summary_counts_every_gpu_once() -> None:
    inst = load_instance("mixed-a100-h100")
    summary = summarize(inst)
    for row in summary.gpus_by_type:
        assert row.total == row.free + row.allocated + row.faulty
    assert sum(r.total for r in summary.gpus_by_type) == 256
    (cluster,) = summary.clusters
    assert [t.radius for t in cluster.tiers] == [1, 3]
    assert sum(d.gpus for d in cluster.tiers[0].domains) == 256
    assert summary.running_jobs == len(inst.running_jobs())


# ---- generator ---------------------------------------------------------------------------

def test_generator_is_deterministic() -> None:
    a = render_instance(generate(256, 40, seed=7))
    assert a == render_instance(generate(256, 40, seed=7))
    assert a != render_instance(generate(256, 40, seed=8))
    # the cluster state does not depend on the queue length
    assert generate(256, 40, seed=7).clusters == generate(256, 3, seed=7).clusters


@pytest.mark.parametrize("share", [0.0, 0.3, 0.8, 1.0])
def test_generator_fragmentation_is_the_busy_share(share: float) -> None:
    nodes = _all_nodes(generate(512, 0, fragmentation=share, seed=1))
    assert sum(len(n.allocated) for n in nodes) == round(share * 512)


def test_generator_shapes() -> None:
    inst = generate(256, 600, gpu_types=["H100", "A100-80", "B200"], seed=3)
    assert inst.clusters[0].network.kind == "fat-tree-2"
    assert {n.gpu_type for n in _all_nodes(inst)} == {"H100-80", "A100-80", "B200"}
    philly = set(philly_gpu_counts())
    for job in inst.jobs:
        units = job.units()
        assert job.total_gpus in philly
        if job.total_gpus < 8:
            assert len(units) == 1 and units[0].group_type == "DataParallel"
        else:
            assert {u.gpus for u in units} == {8}
    assert {j.spec.priority for j in inst.jobs} == {"low", "normal", "high"}
    assert {j.allowed_types(j.spec.resource_groups[0]) for j in inst.jobs} == {
        "H100", "A100", "B200", "a100|b200|h100"}


def test_large_jobs_get_pipeline_stages_and_hop_limits() -> None:
    types = [GPUCatalog().get("H100-80")]
    rng = random.Random(0)
    jobs = [job_of_size(f"j{i}", 64, types, rng) for i in range(200)]
    assert {j.total_gpus for j in jobs} == {64}
    stages = {sum(g.type != "DataParallel" for g in j.spec.resource_groups) for j in jobs}
    assert stages == {1, 2, 4}
    hops = [j.between_replicas.max_hop_count for j in jobs]
    assert 0.15 < hops.count(1) / len(hops) < 0.45 and None in hops


def test_generator_picks_the_fabric_by_size() -> None:
    assert generate(504, 0).clusters[0].network.kind == "fat-tree-2"
    assert generate(512, 0).clusters[0].network.kind == "superpod-rail"
    assert generate(64, 0, fabric="fat-tree-3").clusters[0].network.kind == "fat-tree-3"


@pytest.mark.parametrize(("kwargs", "path"), [
    ({"gpus": 0, "jobs": 1}, "gpus"),
    ({"gpus": 64, "jobs": -1}, "jobs"),
    ({"gpus": 64, "jobs": 1, "fragmentation": 1.5}, "fragmentation"),
    ({"gpus": 64, "jobs": 1, "gpu_types": ["H100", "Z80"]}, "gpu_types[1]"),
    ({"gpus": 64, "jobs": 1, "fabric": "torus"}, "fabric"),
])
def test_generator_rejects_bad_arguments(kwargs: dict, path: str) -> None:
    with pytest.raises(InputError) as err:
        generate(**kwargs)
    assert err.value.path == path


def test_generator_scale_16k_gpus_5k_jobs() -> None:
    # how long it takes is measured in bench/, not asserted here
    inst = generate(16384, 5000, seed=0)
    text = render_instance(inst)
    assert len(_all_nodes(inst)) == 2048 and len(inst.jobs) == 5000
    assert inst.clusters[0].network.radii == [1, 3, 5]
    assert len(text) > 1_000_000


# ---- Cluster + jobs files ------------------------------------------------------------------

CLUSTER = """\
apiVersion: hyperplace/v1
kind: Cluster
metadata: {name: lab}
spec:
  region: eu-west
  nodes:
    - {name: lab-0, gpuType: H100-80, gpuCount: 8}
    - {name: lab-1, gpuType: H100-80, gpuCount: 8, allocated: {0: old-job}}
  fabric:
    switches: [{name: leaf0}]
    links:
      - {a: lab-0, b: leaf0, gbps: 400}
      - {a: lab-1, b: leaf0, gbps: 400}
"""


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_cluster_and_jobs_file(tmp_path: Path, seed_job_path: Path) -> None:
    cluster = _write(tmp_path / "cluster.yaml", CLUSTER)
    inst = load_cluster_and_jobs(cluster, seed_job_path)
    assert inst.name == "lab" and inst.clusters[0].region == "eu-west"
    assert [j.name for j in inst.jobs] == ["llama-3-120b-finetune"]
    assert inst.clusters[0].network.hop_count("lab-0", "lab-1") == 1
    assert inst.running_jobs() == {"old-job": 1}


def test_jobs_from_a_directory_and_an_instance_as_cluster(tmp_path: Path,
                                                          seed_job_path: Path) -> None:
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    text = seed_job_path.read_text()
    _write(jobs / "a.yaml", text)
    _write(jobs / "b.yml", text.replace("name: llama-3-120b-finetune", "name: other"))
    _write(jobs / "notes.txt", "not a job")
    inst = load_cluster_and_jobs(data_dir() / "dgx1-v100.yaml", jobs)
    assert [j.name for j in inst.jobs] == ["llama-3-120b-finetune", "other"]
    assert inst.clusters == load_instance("dgx1-v100").clusters


def test_job_error_names_file_document_and_field(tmp_path: Path, seed_job_path: Path) -> None:
    cluster = _write(tmp_path / "cluster.yaml", CLUSTER)
    bad = seed_job_path.read_text().replace("gpusPerGroup: 8", "gpusPerGroup: 0")
    bad = bad.replace("name: llama-3-120b-finetune", "name: second")
    jobs = _write(tmp_path / "jobs.yaml", seed_job_path.read_text() + "---\n" + bad)
    with pytest.raises(InputError) as err:
        load_cluster_and_jobs(cluster, jobs)
    assert err.value.one_line() == (
        f"{jobs}: document 2: spec.resourceGroups[0].gpusPerGroup: "
        "Input should be greater than 0")


def test_duplicate_job_across_files(tmp_path: Path, seed_job_path: Path) -> None:
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    _write(jobs / "a.yaml", seed_job_path.read_text())
    _write(jobs / "b.yaml", seed_job_path.read_text())
    with pytest.raises(InputError, match="already defined in"):
        load_cluster_and_jobs(_write(tmp_path / "c.yaml", CLUSTER), jobs)


def test_cluster_document_errors(tmp_path: Path, seed_job_path: Path) -> None:
    bad = _write(tmp_path / "c.yaml", CLUSTER.replace("b: leaf0, gbps: 400}\n      - {a: lab-1",
                                                      "b: leaf7, gbps: 400}\n      - {a: lab-1"))
    with pytest.raises(InputError) as err:
        load_cluster_and_jobs(bad, seed_job_path)
    assert err.value.one_line().startswith(f"{bad}: spec.fabric.links[0].b: 'leaf7'")
    bad = _write(tmp_path / "d.yaml", CLUSTER.replace("gpuType: H100-80, gpuCount: 8}",
                                                      "gpuType: H900, gpuCount: 8}"))
    with pytest.raises(InputError) as err:
        load_cluster_and_jobs(bad, seed_job_path)
    assert err.value.one_line().startswith(f"{bad}: spec.nodes[0].gpuType: unknown GPU type")


def test_unknown_instance_name() -> None:
    with pytest.raises(InputError, match="not a bundled instance"):
        load_instance("no-such-instance")


def test_generator_size_scale_reads_philly_in_nodes() -> None:
    from hyperplace.errors import InputError
    from hyperplace.instances.generator import generate

    inst = generate(512, 30, seed=3, size_scale=8)
    assert inst.jobs and all(j.total_gpus % 8 == 0 for j in inst.jobs)
    assert max(j.total_gpus for j in inst.jobs) >= 16
    with pytest.raises(InputError, match="size_scale"):
        generate(64, 1, size_scale=0)
