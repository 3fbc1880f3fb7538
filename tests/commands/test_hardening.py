"""Operator-proof edges (issue 10): every bad input is one line and exit 2, never a traceback,
a hang or a lost file; documented limits are refused at once with the limit named."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from cli_run import run_main
from hyperplace.io import MAX_ALIASES, load_documents, write_atomic
from hyperplace.models.limits import MAX_GPUS, MAX_JOBS

ROOT = Path(__file__).resolve().parents[2]

NODE = "{name: n0, gpuType: H100-80, gpuCount: 8}"


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``hyperplace ARGS`` through the console-script entry point, in this process."""
    code = run_main(args)
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(code: int, err: str, *needles: str) -> None:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], (n, lines[0])


def instance(nodes: str = NODE, jobs: str = "[]", extra_spec: str = "") -> str:
    return (f"apiVersion: hyperplace/v1\nkind: Instance\nmetadata: {{name: t}}\nspec:\n"
            f"{extra_spec}  clusters:\n  - name: c\n    nodes: [{nodes}]\n"
            f"    fabric:\n      switches: [{{name: leaf0}}]\n"
            f"      links: [{{a: n0, b: leaf0, gbps: 400}}]\n  jobs: {jobs}\n")


def job(name: str = "j", accel: str = "H100", gpus: int = 8) -> str:
    return (f"{{apiVersion: ai.example.com/v1alpha1, kind: FoundationModelTrainingJob, "
            f"metadata: {{name: {name}}}, spec: {{model: m, resourceGroups: [{{name: tp, "
            f"type: TensorParallel, gpusPerGroup: {gpus}, gpuRequirements: "
            f"{{acceleratorType: {accel}}}}}]}}}}")


# ---- input files ---------------------------------------------------------------------------

BAD_FILES = [
    ("dup-key.yaml", "a: 1\nb: 2\na: 3\n", ["duplicate key 'a'", "line 3"]),
    ("dup-key.json", '{"kind": "Instance", "kind": "Cluster"}', ["duplicate key 'kind'"]),
    ("nan.json", '{"kind": NaN}', ["NaN"]),
    ("bad-utf8.yaml", b"kind: Instance\nmetadata: {name: \xff\xfe}\n", ["not UTF-8", "line 2"]),
    ("inf-cost.yaml", instance(extra_spec="  gpuTypes: [{name: X1, family: X1, bf16Tflops: 1, "
     "hbmGb: 80, hbmTbS: 2, nvlinkGigabytesPerSecond: 900, nicGbps: 400, costPerHour: .inf}]\n"),
     ["spec.gpuTypes[0].costPerHour", "finite"]),
    ("huge-cost.yaml", instance(extra_spec="  gpuTypes: [{name: X1, family: X1, bf16Tflops: 1, "
     "hbmGb: 80, hbmTbS: 2, nvlinkGigabytesPerSecond: 900, nicGbps: 400, costPerHour: 1e308}]\n"),
     ["spec.gpuTypes[0].costPerHour", "less than or equal"]),
    ("inf-tflops.yaml", instance(extra_spec="  gpuTypes: [{name: X1, family: X1, "
     "bf16Tflops: .inf, hbmGb: 80, hbmTbS: 2, nvlinkGigabytesPerSecond: 900, nicGbps: 400}]\n"),
     ["bf16Tflops", "finite"]),
    ("faulty-and-allocated.yaml",
     instance("{name: n0, gpuType: H100-80, gpuCount: 8, allocated: {0: r}, faulty: [0]}"),
     ["nodes[0]", "faulty: GPU 0 is also allocated"]),
    # a typo'd key is told at its own path, with the closest field, not as the field it
    # should have been being missing (new user: "gpuType: required field is missing")
    ("key-typo.yaml", instance("{name: n0, gpuTyp: H100-80, gpuCount: 8}"),
     ["spec.clusters[0].nodes[0].gpuTyp: unknown field 'gpuTyp' (did you mean 'gpuType'?)"]),
    ("optional-key-typo.yaml", instance("{name: n0, gpuType: H100-80, gpuCount: 8, "
                                        "allocted: {0: r}}"),
     ["spec.clusters[0].nodes[0].allocted: unknown field 'allocted' (did you mean "
      "'allocated'?)"]),
    ("job-key-typo.yaml", instance(jobs="[" + job("j").replace("gpusPerGroup", "gpusPerGrop")
                                   + "]"),
     ["spec.jobs[0].spec.resourceGroups[0].gpusPerGrop: unknown field 'gpusPerGrop' (did you "
      "mean 'gpusPerGroup'?)"]),
    ("faulty-twice.yaml", instance("{name: n0, gpuType: H100-80, gpuCount: 8, faulty: [1, 1]}"),
     ["GPU 1 is listed twice"]),
    ("pairs-twice.yaml", instance("{name: n0, gpuType: H100-80, gpuCount: 8, nvlink: explicit, "
                                  "nvlinkPairs: [{a: 0, b: 1, gigabytesPerSecond: 1}, {a: 1, b: 0, gigabytesPerSecond: 1}]}"),
     ["nvlinkPairs[1]", "listed twice"]),
    ("newline-name.yaml", instance('{name: "n0\\nx", gpuType: H100-80, gpuCount: 8}'),
     ["nodes[0].name", "should match pattern"]),
    ("long-name.yaml", instance("{name: " + "n" * 300 + ", gpuType: H100-80, gpuCount: 8}"),
     ["nodes[0].name", "at most 253"]),
    ("running-name.yaml",
     instance("{name: n0, gpuType: H100-80, gpuCount: 8, allocated: {0: busy}}",
              "[" + job("busy", gpus=1) + "]"),
     ["spec.jobs[0].metadata.name", "'busy' is already running"]),
    ("accel-typo.yaml", instance(jobs="[" + job("j", "Z9000") + "]"),
     ["acceleratorType", "unknown GPU type 'Z9000'", "H100"]),
    ("toleration-typo.yaml", instance(jobs="[" + job("j", "H100").replace(
        "{acceleratorType: H100}", "{}").replace(
        "resourceGroups:", "tolerations: [{key: gpu-type, operator: Equal, value: h100|a1OO}], "
        "resourceGroups:") + "]"),
     ["spec.jobs[0].spec.tolerations[0].value", "unknown GPU type 'a1OO'"]),
    ("self-link.yaml", instance().replace("links: [{a: n0, b: leaf0, gbps: 400}]",
                                          "links: [{a: leaf0, b: leaf0, gbps: 400}]"),
     ["both ends are 'leaf0'"]),
    ("nic-gpu.yaml", instance("{name: n0, gpuType: H100-80, gpuCount: 8, "
                              "nics: [{name: ib0, gbps: 400, gpus: [9]}]}"),
     ["nics[0].gpus", "GPU index 9 outside 0..7"]),
    ("types-twice.yaml", instance(extra_spec="  gpuTypes: [{name: X1, family: X1, bf16Tflops: 1, "
     "hbmGb: 80, hbmTbS: 2, nvlinkGigabytesPerSecond: 900, nicGbps: 400}, {name: X1, family: X1, "
     "bf16Tflops: 2, hbmGb: 80, hbmTbS: 2, nvlinkGigabytesPerSecond: 900, nicGbps: 400}]\n"),
     ["spec.gpuTypes[1].name", "declared twice"]),
    ("links-twice.yaml", instance(extra_spec="  interClusterLinks: [{a: c, b: d, gbps: 100}, "
     "{a: d, b: c, gbps: 400}]\n").replace(
         "  jobs: []", "  - name: d\n    nodes: []\n  jobs: []"),
     ["interClusterLinks[1]", "already linked"]),
    ("replicas.yaml", "apiVersion: training.volcano.sh/v1alpha1\nkind: HyperJob\nmetadata: "
     "{name: h}\nspec:\n  replicatedJobs: [{name: r, replicas: 2147483647, templateSpec: {}}]\n",
     ["spec.replicatedJobs[0].replicas", "16384"]),
]


@pytest.mark.parametrize("name,text,needles", BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_bad_file_is_one_line_for_validate_and_solve(tmp_path: Path, capsys, name: str,
                                                     text: str | bytes,
                                                     needles: list[str]) -> None:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    code, _, err = run(["validate", str(path)], capsys)
    one_line_error(code, err, str(path), *needles)
    if "HyperJob" not in str(text):
        code, _, err = run(["solve", "--instance", str(path), "--budget", "1"], capsys)
        one_line_error(code, err, str(path), *needles)


def test_known_type_a_cluster_lacks_is_accepted_and_pending(tmp_path: Path, capsys) -> None:
    path = tmp_path / "mi300x.yaml"
    path.write_text(instance(jobs="[" + job("j", "MI300X") + "]"))
    code, out, err = run(["validate", str(path)], capsys)
    assert code == 0, err
    code, out, err = run(["solve", "-i", str(path), "--budget", "1", "-f", "json"], capsys)
    assert code == 0, err
    assert json.loads(out)["pending"][0]["job"] == "j"


def test_accelerator_typo_in_a_job_file_alone(tmp_path: Path, capsys) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(yaml.safe_load(job("j", "H1OO"))))
    code, _, err = run(["validate", str(path)], capsys)
    one_line_error(code, err, "spec.resourceGroups[0].gpuRequirements.acceleratorType",
                   "'H1OO'", "known:")


def test_dev_zero_is_refused_at_once(capsys) -> None:
    start = time.monotonic()
    code, _, err = run(["validate", "/dev/zero"], capsys)
    one_line_error(code, err, "/dev/zero", "input limit")
    assert time.monotonic() - start < 20


def test_alias_references_past_the_limit(tmp_path: Path, capsys) -> None:
    path = tmp_path / "aliases.yaml"
    refs = "\n".join(["        - *p"] * (MAX_ALIASES + 1))
    path.write_text("apiVersion: hyperplace/v1\nkind: Instance\nmetadata: {name: t}\nspec:\n"
                    "  clusters:\n  - name: c\n    nodes:\n    - name: n0\n      gpuType: H100\n"
                    "      gpuCount: 8\n      nvlink: explicit\n      anchor: &p {a: 0, b: 1, "
                    f"gbps: 1}}\n      nvlinkPairs:\n{refs}\n")
    code, _, err = run(["validate", str(path)], capsys)
    one_line_error(code, err, f"more than {MAX_ALIASES:,} YAML alias references")


def test_alias_bomb_is_refused_without_expanding(tmp_path: Path, capsys) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\n")
    code, _, err = run(["validate", str(path)], capsys)
    one_line_error(code, err, "aliases expand to more than")


def test_few_aliases_still_load(tmp_path: Path) -> None:
    path = tmp_path / "ok.yaml"
    path.write_text("x: &r {a: 1}\ny: *r\n")
    assert load_documents(path) == [{"x": {"a": 1}, "y": {"a": 1}}]


def test_model_with_too_many_layers(tmp_path: Path, capsys) -> None:
    path = tmp_path / "model.yaml"
    path.write_text("name: huge\nnumLayers: 100000000\nhiddenSize: 4096\nnumHeads: 32\n"
                    "seqLength: 2048\n")
    code, _, err = run(["split", "--model", str(path), "--stage", "H100x8@a"], capsys)
    one_line_error(code, err, "numLayers", "10000")


# ---- options ----------------------------------------------------------------------------------

@pytest.mark.parametrize("args,needles", [
    (["solve", "--seed", "2147483648"], ["--seed", "2147483647"]),
    (["solve", "--budget", "inf"], ["--budget", "finite"]),
    (["solve", "--budget", "nan"], ["--budget: not a number"]),
    (["why", "--budget", "nan", "j"], ["--budget: not a number"]),
    (["solve", "--budget", "0.01"], ["--budget: must be at least 0.05 s, got 0.01"]),
    (["instances", "generate", "--gpus", "10000000", "--jobs", "1", "-o", "x.yaml"],
     ["--gpus", f"{MAX_GPUS:,}"]),
    (["instances", "generate", "--gpus", "64", "--jobs", "10000000", "-o", "x.yaml"],
     ["--jobs", f"{MAX_JOBS:,}"]),
    (["instances", "generate", "--gpus", "64", "--jobs", "5", "--size-scale", "1000000",
      "-o", "x.yaml"], ["--size-scale", "1024"]),
    (["instances", "generate", "--gpus", "64", "--jobs", "5", "--faulty", "1000", "-o",
      "x.yaml"], ["--faulty", "0..64"]),
    (["instances", "generate", "--gpus", "64", "--jobs", "5", "-o", "x.json", "--format",
      "yaml"], ["--format", "does not match"]),
    (["split", "--model-name", "seed-8layer", "--stage", "B200x8@beijing", "--stage",
      "H100x8@shanghai", "--link", "beijing-beijing=100Gbps"], ["--link", "both ends"]),
    (["solve", "--draw", "plan.png"], ["--draw", ".svg"]),
], ids=["seed", "budget", "budget-nan", "why-budget-nan", "budget-min", "gpus", "jobs", "size-scale", "faulty", "format", "self-link", "draw"])
def test_bad_options_are_one_line(tmp_path: Path, capsys, monkeypatch, args: list[str],
                                  needles: list[str]) -> None:
    monkeypatch.chdir(tmp_path)
    start = time.monotonic()
    code, _, err = run(args, capsys)
    one_line_error(code, err, *needles)
    assert time.monotonic() - start < 20
    assert not (tmp_path / "x.yaml").exists() and not (tmp_path / "x.json").exists()


def test_help_and_version(capsys) -> None:
    code, out, _ = run(["-h"], capsys)
    assert code == 0 and "Exit codes" in out and "130 interrupted" in out
    code, out, _ = run(["--version"], capsys)
    assert code == 0 and out.startswith("hyperplace ")
    for group in (["solve"], ["check"], ["split"], ["instances"], ["instances", "import"],
                  ["validate"]):
        code, out, _ = run([*group, "-h"], capsys)
        assert code == 0 and "Usage" in out, group


# ---- plans that name an instance --------------------------------------------------------------

def test_check_never_opens_a_path_a_plan_names(tmp_path: Path, capsys) -> None:
    plan = tmp_path / "plan.yaml"
    code, _, err = run(["solve", "-i", "seed-beijing-shanghai", "--budget", "2", "-o",
                        str(plan), "-f", "yaml"], capsys)
    assert code == 0, err
    doc = yaml.safe_load(plan.read_text())
    doc["metadata"]["instance"] = "/dev/zero"
    plan.write_text(yaml.safe_dump(doc))
    code, _, err = run(["check", str(plan)], capsys)
    one_line_error(code, err, "metadata.instance", "not a bundled instance", "--instance FILE")


def test_check_uses_a_bundled_name_and_an_explicit_file(tmp_path: Path, capsys) -> None:
    inst = tmp_path / "inst.yaml"
    run(["instances", "export", "seed-beijing-shanghai", "-o", str(inst)], capsys)
    plan = tmp_path / "plan.json"
    code, _, err = run(["solve", "-i", str(inst), "--budget", "2", "-o", str(plan)], capsys)
    assert code == 0, err
    code, _, err = run(["check", str(plan)], capsys)  # names a file: not read on its own
    one_line_error(code, err, "not a bundled instance")
    code, out, err = run(["check", str(plan), "--instance", str(inst)], capsys)
    assert code == 0 and "no violations" in out, err


# ---- files written whole or not at all --------------------------------------------------------

def test_write_atomic_keeps_the_old_file_on_failure(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "plan.yaml"
    target.write_text("old: plan\n")

    def broken_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(Exception, match="No space left"):
        write_atomic(target, "new: plan\n")
    assert target.read_text() == "old: plan\n"
    assert [p.name for p in tmp_path.iterdir()] == ["plan.yaml"]  # no temporary left


@pytest.mark.parametrize("args", [
    ["solve", "-i", "seed-beijing-shanghai", "--budget", "1", "-o", "{out}"],
    ["instances", "export", "seed-beijing-shanghai", "-o", "{out}"],
    ["instances", "generate", "--gpus", "64", "--jobs", "3", "-o", "{out}"],
], ids=["solve", "export", "generate"])
def test_writers_keep_the_old_file_on_a_full_disk(tmp_path: Path, capsys, monkeypatch,
                                                   args: list[str]) -> None:
    target = tmp_path / "out.yaml"
    target.write_text("old: file\n")
    real_fsync = os.fsync

    def full_disk(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    code, _, err = run([a.replace("{out}", str(target)) for a in args], capsys)
    monkeypatch.setattr(os, "fsync", real_fsync)
    one_line_error(code, err, str(target), "No space left on device")
    assert target.read_text() == "old: file\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.yaml"]


def test_interrupted_solve_writes_nothing_and_exits_130(tmp_path: Path, capsys,
                                                        monkeypatch) -> None:
    import hyperplace.solvers.driver as driver

    target = tmp_path / "plan.yaml"
    target.write_text("old: plan\n")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(driver, "solve_placement", interrupted)
    code, _, _ = run(["solve", "-o", str(target), "--budget", "1"], capsys)
    assert code == 130
    assert target.read_text() == "old: plan\n"


def test_ctrl_c_in_a_real_process(tmp_path: Path) -> None:
    """SIGINT while a real solve runs: exit 130, the previous plan intact."""
    gen = tmp_path / "g.yaml"
    subprocess.run([sys.executable, "-m", "hyperplace.cli", "instances", "generate", "--gpus",
                    "4096", "--jobs", "400", "--seed", "1", "-o", str(gen)], check=True,
                   capture_output=True, cwd=ROOT)
    target = tmp_path / "plan.yaml"
    target.write_text("old: plan\n")
    # signal once the command runs (Ctrl-C during Python's own start-up is Python's to report)
    starter = ("import sys; import hyperplace.cli as c; print('ready', file=sys.stderr, "
               "flush=True); sys.argv = ['hyperplace'] + sys.argv[1:]; c.main()")
    proc = subprocess.Popen([sys.executable, "-c", starter, "solve", "-i", str(gen),
                             "--budget", "30", "-o", str(target)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None and proc.stderr.readline().strip() == "ready"
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode in (130, 0), err  # 0 only if it had finished before the signal
    assert "Traceback" not in err
    if proc.returncode == 130:
        assert target.read_text() == "old: plan\n"


# ---- every command that reads a file, with each kind of bad file ------------------------------

BAD_KINDS = {
    "malformed": b"kind: Instance\nspec: [unclosed\n",
    "duplicate-key": b"kind: Instance\nkind: Cluster\n",
    "not-utf8": b"kind: \xff\xfe\n",
    "empty": b"  \n",
    "a-list": b"- 1\n- 2\n",
}

READERS = [
    ["validate", "{f}"],
    ["solve", "-i", "{f}", "--budget", "1"],
    ["solve", "--cluster", "{f}", "--jobs", str(ROOT / "examples" / "queue"), "--budget", "1"],
    ["solve", "--cluster", str(ROOT / "examples" / "my-cluster.yaml"), "--jobs", "{f}",
     "--budget", "1"],
    ["check", "{f}", "--instance", "mixed-a100-h100"],
    ["instances", "show", "{f}"],
    ["instances", "export", "{f}"],
    ["instances", "import", "--from", "nvidia-smi", "{f}"],
    ["instances", "import", "--from", "hypernode", "{f}", "--gpu-type", "H100"],
    ["instances", "import", "--from", "alibaba", "{f}"],
    ["split", "--model", "{f}", "--stage", "H100x8@a"],
    ["split", "--instance", "{f}", "--model-name", "seed-8layer"],
]


@pytest.mark.parametrize("kind", sorted(BAD_KINDS))
@pytest.mark.parametrize("args", READERS, ids=[" ".join(a[:3]) for a in READERS])
def test_every_reader_answers_bad_files_in_one_line(tmp_path: Path, capsys, kind: str,
                                                    args: list[str]) -> None:
    path = tmp_path / f"{kind}.yaml"
    path.write_bytes(BAD_KINDS[kind])
    code, _, err = run([a.replace("{f}", str(path)) for a in args], capsys)
    one_line_error(code, err, str(path))


@pytest.mark.parametrize("args", READERS, ids=[" ".join(a[:3]) for a in READERS])
def test_every_reader_answers_a_missing_file_and_dev_zero(tmp_path: Path, capsys,
                                                          args: list[str]) -> None:
    for path in (tmp_path / "missing.yaml", Path("/dev/zero"), tmp_path):
        code, _, err = run([a.replace("{f}", str(path)) for a in args], capsys)
        one_line_error(code, err, str(path))


def test_hypernode_file_as_a_cluster_says_how_to_import_it(capsys) -> None:
    code, _, err = run(["solve", "-i", str(ROOT / "examples" / "hypernodes.yaml")], capsys)
    one_line_error(code, err, "instances import --from hypernode")


def test_imported_hypernode_cluster_is_solvable(tmp_path: Path, capsys) -> None:
    out = tmp_path / "hn.yaml"
    code, _, err = run(["instances", "import", "--from", "hypernode",
                        str(ROOT / "examples" / "hypernodes.yaml"), "--gpu-type", "H100",
                        "-o", str(out)], capsys)
    assert code == 0, err
    plan = tmp_path / "plan.json"
    code, _, err = run(["solve", "--cluster", str(out), "--jobs",
                        str(ROOT / "examples" / "queue" / "llama3-70b-pretrain.yaml"),
                        "--budget", "10", "-o", str(plan)], capsys)
    assert code == 0, err
    code, out_text, err = run(["check", str(plan), "--cluster", str(out), "--jobs",
                               str(ROOT / "examples" / "queue" / "llama3-70b-pretrain.yaml")],
                              capsys)
    assert code == 0 and "no violations" in out_text, err
    assert json.loads(plan.read_text())["jobs"][0]["job"] == "llama3-70b-pretrain"


def test_split_states_its_link_assumption_and_the_stages_used(capsys) -> None:
    code, out, err = run(["split", "--model-name", "seed-8layer", "--stage", "B200x8@beijing",
                          "--stage", "H100x8@shanghai"], capsys)
    assert code == 0, err
    assert "no --link between beijing and shanghai: assumed" in " ".join(out.split())
    code, out, err = run(["split", "--instance", "seed-beijing-shanghai", "--stage",
                          "B200x8@beijing", "--stage", "H100x8@shanghai"], capsys)
    assert code == 0, err
    assert "the 2 given with --stage, not the instance's" in " ".join(out.split())


def test_solve_table_fits_80_columns_with_gpu_indices(capsys) -> None:
    code, out, err = run(["solve", "--budget", "10", "--explain"], capsys)
    assert code == 0, err
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "]" in out and "[0-" in out  # node[GPU indices]
    assert "communication:" in out and "fragmentation:" in out  # the legend


def test_drawings_are_svg_for_32_and_2048_nodes(tmp_path: Path, capsys) -> None:
    from xml.etree import ElementTree

    from hyperplace.draw import draw_svg
    from hyperplace.instances import generate, load_instance
    from hyperplace.solvers.driver import solve_placement

    small = load_instance("mixed-a100-h100")
    plan = solve_placement(small, solver="greedy", budget_s=10)
    svg = draw_svg(small, plan)
    placed = sum(len(p.gpus) for p in plan.placements)
    assert svg.count("(this plan)</title>") == placed > 0  # every placed GPU, in its job's colour
    running = sum(len(n.allocated) for c in small.clusters for n in c.nodes)
    assert svg.count(": running ") == running
    root = ElementTree.fromstring(svg)
    cells = [e for e in root.iter("{http://www.w3.org/2000/svg}rect")
             if e.get("width") == e.get("height") == "11.0"]
    assert len(cells) >= 256  # every GPU of the 32 nodes, plus the legend's swatches
    assert "pending (" in svg and "faulty" in svg
    big = generate(16384, 20, seed=1)
    svg = draw_svg(big)
    ElementTree.fromstring(svg)
    assert "one bar per leaf domain" in svg and len(svg) < 2_000_000
    out = tmp_path / "cluster.svg"
    code, _, err = run(["instances", "show", "mixed-a100-h100", "--draw", str(out)], capsys)
    assert code == 0 and out.read_text().startswith("<svg"), err


@pytest.mark.parametrize("fabric,needles", [
    ("switches: [{name: leaf0}, {name: leaf0}]\n      links: [{a: n0, b: leaf0, gbps: 400}]",
     ["fabric.switches[1].name", "duplicate switch"]),
    ("switches: [{name: n0}]\n      links: []", ["is also a node's name"]),
    ("generator: {type: fat-tree-2}\n      switches: [{name: leaf000}]",
     ["fabric.switches[0].name", "the generator makes"]),
])
def test_fabric_name_clashes(tmp_path: Path, capsys, fabric: str, needles: list[str]) -> None:
    """Found by the property test: a repeated switch name escaped as a traceback."""
    path = tmp_path / "fabric.yaml"
    path.write_text("apiVersion: hyperplace/v1\nkind: Instance\nmetadata: {name: t}\nspec:\n"
                    f"  clusters:\n  - name: c\n    nodes: [{NODE}]\n    fabric:\n      {fabric}\n")
    for args in (["validate", str(path)], ["solve", "-i", str(path), "--budget", "1"]):
        code, _, err = run(args, capsys)
        one_line_error(code, err, *needles)


@pytest.mark.parametrize("args", [
    ["split", "--instance", "seed-beijing-shanghai"],
    ["split", "--model-name", "llama3-70b", "--stage", "B200x8@beijing", "--stage",
     "H100-80x8@shanghai", "--link", "beijing-shanghai=100Gbps,20ms"],
    ["instances", "list"],
    ["instances", "show", "mixed-a100-h100"],
], ids=["split-instance", "split-stages", "list", "show"])
def test_tables_fit_80_columns(capsys, args: list[str]) -> None:
    code, out, err = run(args, capsys)
    assert code == 0, err
    assert max(len(line) for line in out.splitlines()) <= 80


def test_generators_and_gangs_past_the_limits_are_refused_at_once(tmp_path: Path,
                                                                  capsys) -> None:
    """Found after the issue: a fabric generator asking for 10^8 spines passed validate and
    hung `instances show`; a job of 16,384 replicas x 300 groups hung validate."""
    spines = tmp_path / "spines.yaml"
    spines.write_text(instance().replace(
        "fabric:\n      switches: [{name: leaf0}]\n      links: [{a: n0, b: leaf0, gbps: 400}]",
        "fabric: {generator: {type: fat-tree-2, spines: 100000000}}"))
    groups = "".join(f"  - {{name: g{i}, type: TensorParallel, gpusPerGroup: 8}}\n"
                     for i in range(300))
    gangs = tmp_path / "gangs.yaml"
    gangs.write_text("apiVersion: ai.example.com/v1alpha1\nkind: FoundationModelTrainingJob\n"
                     "metadata: {name: huge}\nspec:\n  model: m\n  replicaCount: 16384\n"
                     "  resourceGroups:\n" + groups)
    for path, needles in ((spines, ["fabric.generator", "65,536"]),
                          (gangs, ["spec.resourceGroups", "65,536 per job"])):
        start = time.monotonic()
        code, _, err = run(["validate", str(path)], capsys)
        one_line_error(code, err, *needles)
        assert time.monotonic() - start < 20


def test_interrupt_during_a_native_import_exits_130(monkeypatch) -> None:
    """Ctrl-C while OR-Tools' extension initialises arrives as an ImportError caused by the
    interrupt: still exit 130 and no traceback (seen once in the real-process test)."""
    import hyperplace.cli as cli

    def interrupted_import(**_: object) -> None:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise ImportError("initialization failed") from exc

    monkeypatch.setattr(cli, "_command", lambda: interrupted_import)  # the command tree
    # main() declares the process a command (budgets from process start): undo that after
    monkeypatch.setattr(cli.deadline, "_AS_COMMAND", False)
    with pytest.raises(SystemExit) as exit_info:
        cli.main()
    assert exit_info.value.code == 130


# ---- standard input ----------------------------------------------------------------------

def _stdin_stream(text: str):
    import io

    return io.TextIOWrapper(io.BytesIO(text.encode()))


def test_stdin_is_read_once_and_a_new_stream_is_read_anew(monkeypatch: pytest.MonkeyPatch):
    """Several readers of ``-`` in one command see the same text; a new ``sys.stdin`` (a
    test, a notebook) is read anew even when it takes the freed one's id, as CPython may
    give it: forced here by one id for every object, as the cache once keyed the stream by
    ``id(sys.stdin)`` (an earlier test's bytes were returned: results depending on what the
    process had read before)."""
    import hyperplace.io as hio

    monkeypatch.setattr(hio, "id", lambda obj: 0, raising=False)
    monkeypatch.setattr(sys, "stdin", _stdin_stream("first"))
    assert hio.read_text_limited("-") == "first"
    assert hio.read_text_limited("-") == "first"  # read once: the stream is spent
    monkeypatch.setattr(sys, "stdin", _stdin_stream("second"))
    assert hio.read_text_limited("-") == "second"


def test_a_reader_with_its_own_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``read_text_limited(limit=)`` (the traces' larger limit): a regular file over it is
    refused by its size, unread; standard input read under a smaller limit first is read
    on by a reader allowing more."""
    import hyperplace.io as hio
    from hyperplace.errors import InputError

    f = tmp_path / "t.csv"
    f.write_text("x" * 10)
    assert hio.read_text_limited(f, limit=10) == "x" * 10
    with pytest.raises(InputError, match=r"file is 10 bytes, larger than the input limit "
                                         r"of 9 bytes"):
        hio.read_text_limited(f, limit=9)
    monkeypatch.setattr(hio, "_stdin_data", None)
    monkeypatch.setattr(sys, "stdin", _stdin_stream("y" * 12))
    with pytest.raises(InputError, match="larger than the input limit of 5 bytes"):
        hio.read_text_limited("-", limit=5)
    assert hio.read_text_limited("-", limit=12) == "y" * 12
    assert hio.read_text_limited("-", limit=100) == "y" * 12


YAML_CASES = [
    "a: 1\nb: [x, 2.5, ~, yes, No, 'on', \"7\"]\nc: {d: 010, e: 0x1F, f: 1_000, g: 1:30}\n",
    "1: x\n\"1\": y\n2.5: z\nnull: n\ntrue: t\n",
    "f: [.inf, -.Inf, .nan, 1e3, 6.8523015e+5, 190:20:30.15, 80.0]\nn: [0, 00, 09, 0o17, -12, +5]\n",
    "base: {x: 1}\nd: {<<: {x: 1}, z: 2}\n",
    "b: !!binary aGVsbG8=\nt: 2001-12-14t21:59:43.10-05:00\nd: 2002-12-14\ns: !!str 3\ni: !!int \"4\"\n",
    "---\na: 1\n---\n---\nb: [1, {c: [2, {d: 3}]}]\ne: {}\nf: []\n",
    "true: x\n1: y\n",  # one Python key from two YAML keys: the loader's own rule decides
]


@pytest.mark.parametrize("text", YAML_CASES)
def test_yaml_plain_documents_are_what_the_safe_constructor_builds(text):
    """Reading YAML builds plain documents without the generic constructor (#25); each is
    what the strict safe loader builds, value for value and type for type."""
    from hyperplace.io import _load_yaml, _Loader

    def typed(x):
        if isinstance(x, dict):
            return [(typed(k), typed(v)) for k, v in x.items()]
        if isinstance(x, list):
            return [typed(v) for v in x]
        return type(x).__name__, repr(x)

    fast, _ = _load_yaml(text, plain=True)
    assert typed(fast) == typed(list(yaml.load_all(text, Loader=_Loader)))


@pytest.mark.parametrize("text, line", [("a: 1\nb: 2\na: 3\n", 3), ("a: {b: 1, b: 2}\n", 1)])
def test_yaml_repeated_key_still_named_with_its_line(tmp_path, text, line):
    from hyperplace.errors import InputError

    path = tmp_path / "dup.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match=f"line {line}, .*duplicate key"):
        load_documents(path)


# ---- short lines ---------------------------------------------------------------------------

def test_unknown_names_get_a_short_line_with_the_closest_known(tmp_path: Path, capsys) -> None:
    """An unknown GPU type or model preset names the closest known ones and how many there
    are, not the whole list (those lines were 200-300 columns wide)."""
    path = tmp_path / "i.yaml"
    path.write_text(instance(nodes="{name: n0, gpuType: H900, gpuCount: 8}"))
    code, _, err = run(["solve", "-i", str(path)], capsys)
    one_line_error(code, err, str(path), "spec.clusters[0].nodes[0].gpuType",
                   "unknown GPU type 'H900'", "closest: H800", "declare others under spec.gpuTypes")
    assert len(err.strip()) - len(str(path)) < 150, err  # the whole list: 224
    code, _, err = run(["predict", "--model-name", "llama3-7b", "--gpu", "H100"], capsys)
    one_line_error(code, err, "--model-name", "unknown model preset 'llama3-7b'",
                   "closest: llama3-70b, llama3-8b")
    assert len(err.strip()) < 130, err


def test_an_old_gigabyte_key_is_one_warning_line_and_read(tmp_path: Path, capsys) -> None:
    """``nvlinkPairs[].gbps`` was GB/s while fabric links' ``gbps`` is Gb/s: files written
    before the rename still read, with one line saying the key to write now."""
    old = tmp_path / "old.yaml"
    old.write_text(instance("{name: n0, gpuType: H100-80, gpuCount: 8, nvlink: explicit, "
                            "nvlinkPairs: [{a: 0, b: 1, gbps: 450}]}"))
    code, out, err = run(["validate", str(old)], capsys)
    assert code == 0 and "ok" in out, err
    assert err.strip().splitlines() == [
        f"warning: {old}: spec.clusters[0].nodes[0].nvlinkPairs[0].gbps: 'gbps' is deprecated: "
        "NVLink figures are GB/s (bytes), not the Gb/s of links; write 'gigabytesPerSecond' "
        "(read as it this time)"]
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(instance("{name: n0, gpuType: H100-80, gpuCount: 8, nvlinkGbps: 900}, "
                              "{name: n1, gpuType: H100-80, gpuCount: 8, nvlinkGbps: 900}"))
    code, _, err = run(["validate", str(nodes)], capsys)
    assert code == 0 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"warning: {nodes}: spec.clusters[0].nodes[0].nvlinkGbps (and 1 "
                          "more): 'nvlinkGbps' is deprecated"), err
    both = tmp_path / "both.yaml"
    both.write_text(instance("{name: n0, gpuType: H100-80, gpuCount: 8, nvlink: explicit, "
                             "nvlinkPairs: [{a: 0, b: 1, gbps: 450, gigabytesPerSecond: 450}]}"))
    code, _, err = run(["validate", str(both)], capsys)
    one_line_error(code, err, "spec.clusters[0].nodes[0].nvlinkPairs[0].gbps: the old spelling "
                   "of gigabytesPerSecond; give gigabytesPerSecond only")


@pytest.mark.parametrize("text, what", [("hello\n", "a string"), ("42\n", "a number"),
                                        ("- a\n- b\n", "a list")])
def test_a_document_that_is_not_a_mapping_is_said_in_yaml_words(tmp_path: Path, capsys,
                                                                 text: str, what: str) -> None:
    """It said "document 1 is a int" (Python's type name)."""
    f = tmp_path / "doc.yaml"
    f.write_text(text)
    code, _, err = run(["validate", str(f)], capsys)
    one_line_error(code, err, f"{f}: document 1 is {what}, expected a mapping")
