"""Every command's tables at 80 and 200 columns (#26): nothing wider than the width, no cell
cut (no ``…``), every required cell whole, a summary before the long lists, numbers for
people (no exponent notation, no Python reprs), and ``-o FILE`` printing one line only.

"Golden" here means the shape each command promises, not a byte-for-byte copy: plans carry
solve times, so a stored transcript would differ on every run.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

from hyperplace.cli import app
from hyperplace.commands import render
from hyperplace.commands.render import Column

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()
WIDTHS = (80, 200)


def run(args: list[str], width: int) -> str:
    result = runner.invoke(app, args, env={"COLUMNS": str(width)})
    assert result.exit_code == 0, f"{args}: {result.output}"
    return result.stdout


def assert_fits(out: str, width: int, required: list[str]) -> None:
    """No line wider than ``width``, nothing cut, every required value on one line whole."""
    wide = [line for line in out.splitlines() if len(line) > width]
    assert not wide, f"{len(wide)} lines wider than {width}: {wide[:2]}"
    assert "…" not in out, "a cell was cut"
    assert not re.search(r"\d\.\d+e[+-]\d\d", out), "exponent notation in a table"
    assert not re.search(r"\{'[^']*': ", out), "a Python dict repr in human output"
    for value in required:
        assert re.search(rf"(^|[\s│(]){re.escape(value)}($|[\s│),])", out, re.M), (
            f"required cell {value!r} not whole at {width} columns:\n{out}")
    assert not any(line != line.rstrip() for line in out.splitlines()), "trailing spaces"


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("golden")
    shutil.copytree(ROOT / "examples", where / "examples")
    return where


@pytest.mark.parametrize("width", WIDTHS)
def test_solve_summary_first_and_every_admitted_job_whole(width: int, tmp_path: Path) -> None:
    plan_file = tmp_path / "plan.yaml"
    args = ["solve", "--solver", "greedy", "--budget", "5"]
    runner.invoke(app, [*args, "-o", str(plan_file)])
    plan = yaml.safe_load(plan_file.read_text())
    out = run(args, width)
    lines = out.splitlines()
    assert lines[0] == "hyperplace solve: mixed-a100-h100"
    summary = lines[1:lines.index("admitted jobs")]
    assert any(line.split()[:1] == ["admitted"] for line in summary), summary
    assert any(line.split()[:1] == ["pending"] for line in summary), summary
    jobs = [j["job"] for j in plan["jobs"]] + [p["job"] for p in plan["pending"]]
    assert_fits(out, width, jobs)
    assert re.search(r"objective\s+[\d,]+ priority-weighted GPUs", out)
    assert "|" not in out, "a raw GPU selector (h100|a100) in a pending reason"


def test_a_big_round_prints_a_summary_and_a_page_not_thousands_of_lines(tmp_path: Path) -> None:
    big = tmp_path / "big.yaml"
    made = runner.invoke(app, ["instances", "generate", "--gpus", "1024", "--jobs", "600",
                               "--seed", "1", "-o", str(big)])
    assert made.exit_code == 0, made.output
    out = run(["solve", "--instance", str(big), "--solver", "greedy", "--budget", "10"], 80)
    lines = out.splitlines()
    assert len(lines) < 200, len(lines)  # 20 rows per list, each a few lines at most
    head = "\n".join(lines[:16])
    assert re.search(r"pending\s+[\d,]+ jobs: [\d,]+ ", head), head  # counted by reason
    assert re.search(r"\.\.\. and [\d,]+ more (admitted|pending) jobs", out)


def test_solve_caps_long_lists(tmp_path: Path) -> None:
    out = run(["solve", "--solver", "greedy", "--budget", "5", "--top", "2"], 80)
    assert re.search(r"\.\.\. and \d+ more admitted jobs \(--top N", out), out
    assert re.search(r"\.\.\. and \d+ more pending jobs", out), out
    full = run(["solve", "--solver", "greedy", "--budget", "5", "--top", "2", "--all"], 80)
    assert "more admitted" not in full and "more pending" not in full


@pytest.mark.parametrize("width", WIDTHS)
def test_running_moveable_counts_pending_and_migrated_apart(width: int, examples: Path,
                                                            monkeypatch) -> None:
    monkeypatch.chdir(examples)
    out = run(["solve", "--instance", "examples/busy-cluster.yaml", "--running-moveable",
               "--budget", "10"], width)
    table = out.split("admitted jobs", 1)[1].split("migrations", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("│ ") and line[2] != " "]
    migrated = sum("(migrated)" in row for row in rows)
    admitted = int(re.search(r"admitted\s+(\d+) jobs?", out).group(1))
    assert admitted + migrated == len(rows), out
    if migrated:
        assert re.search(rf"migrated\s+{migrated} running jobs?", out), out
    assert_fits(out, width, [])


@pytest.mark.parametrize("width", WIDTHS)
def test_repair_and_check_say_repair(width: int, examples: Path, monkeypatch) -> None:
    monkeypatch.chdir(examples)
    args = ["repair", "--instance", "examples/busy-cluster.yaml", "--failed", "n1:3",
            "--budget", "10"]
    out = run(args, width)
    assert_fits(out, width, ["ft-b"])
    result = runner.invoke(app, [*args, "-o", "repair.yaml"])
    assert result.exit_code == 0 and result.stdout == "", result.output
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("wrote repair.yaml")
    checked = run(["check", "repair.yaml", "--instance", "examples/busy-cluster.yaml",
                   "--failed", "n1:3"], width)
    assert "a repair: 1 running job re-placed" in checked and "pending" not in checked


@pytest.mark.parametrize("width", WIDTHS)
def test_simulate_keeps_policy_names_and_drops_with_a_note(width: int) -> None:
    out = run(["simulate", "--window", "0:3600", "--jobs", "4", "--policy", "engine",
               "--policy", "slurm", "--policy", "volcano-proportion", "--budget", "0.3",
               "--failures", "1", "--no-progress"], width)
    assert_fits(out, width, ["engine", "slurm", "volcano-proportion"])
    if width == 80:
        assert "(not shown at 80 columns:" in out
    else:
        assert "not shown" not in out and "fallbacks" in out
    assert "no failure happened in this run" in out


def test_simulate_fm_header_names_the_workload() -> None:
    out = run(["simulate", "--workload", "fm", "--window", "0:3600", "--jobs", "3",
               "--policy", "slurm", "--budget", "0.3", "--no-progress"], 80)
    first = out.split("\n\n")[0]
    assert "foundation-model-shaped jobs on philly's arrival times" in " ".join(first.split())
    assert "jobs of philly" not in out


@pytest.mark.parametrize("width", WIDTHS)
def test_federate_and_estimate_fit(width: int) -> None:
    out = run(["federate", "--solver", "greedy"], width)
    assert_fits(out, width, ["seed-8layer-pipeline-beijing", "seed-8layer-pipeline-shanghai"])
    assert "replicas per cluster beijing 1, shanghai 1" in " ".join(out.split())
    out = run(["estimate", "--instance", "seed-beijing-shanghai", "--job",
               "seed-8layer-pipeline"], width)
    assert_fits(out, width, ["beijing", "shanghai", "B200", "H100-80"])


@pytest.mark.parametrize("width", WIDTHS)
def test_instances_list_and_show_fit(width: int) -> None:
    from hyperplace.instances import list_instances

    out = run(["instances", "list"], width)
    assert_fits(out, width, [i.name for i in list_instances()])
    if width == 200:  # a wide terminal: one line per instance with a short description
        assert "description" in out.splitlines()[2]
    out = run(["instances", "show", "mixed-a100-h100"], width)
    assert_fits(out, width, [])


@pytest.mark.parametrize("width", WIDTHS)
def test_split_predict_defrag_fit(width: int, examples: Path, monkeypatch) -> None:
    assert_fits(run(["split", "--instance", "seed-beijing-shanghai"], width), width,
                ["B200x8@beijing", "H100-80x8@shanghai"])
    assert_fits(run(["predict", "--model-name", "llama3-8b", "--gpu", "H100", "--tp", "2",
                     "--pp", "2", "--dp", "2", "--global-batch", "16"], width), width, [])
    monkeypatch.chdir(examples)
    out = run(["defrag", "--instance", "examples/busy-cluster.yaml", "--max-moves", "2",
               "--budget", "10"], width)
    assert_fits(out, width, [])


def test_svg_titles_a_spine_domain_by_its_leaves() -> None:
    from hyperplace.draw import draw_svg
    from hyperplace.instances import load_instance

    svg = draw_svg(load_instance("mixed-a100-h100"))
    assert "spine domain over leaf000-leaf003 (4 leaves)" in svg
    assert not re.search(r"spine domain leaf\d", svg)


@pytest.mark.parametrize("width", WIDTHS)
def test_whatif_report_fits(width: int, examples: Path, monkeypatch) -> None:
    monkeypatch.chdir(examples)
    out = run(["whatif", "examples/sweep.yaml", "-o", f"sweep-{width}", "--workers", "1",
               "--no-progress", "--no-charts"], width)
    assert_fits(out, width, ["base", "addNodes=H100-80+2,policy=kueue"])
    assert "|---|" not in out  # a table for people, the markdown stays in report.md


def test_output_file_prints_one_line_only(tmp_path: Path) -> None:
    """``-o FILE``: the file, and one line saying what was written; nothing on stdout."""
    cases = [
        ["solve", "--solver", "greedy", "--budget", "5", "-o", str(tmp_path / "p.yaml")],
        ["split", "--instance", "seed-beijing-shanghai", "-o", str(tmp_path / "s.json")],
        ["split", "--instance", "seed-beijing-shanghai", "--format", "json", "-o",
         str(tmp_path / "s2.json")],
        ["instances", "export", "mixed-a100-h100", "-o", str(tmp_path / "m.yaml")],
    ]
    for args in cases:
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        assert result.stdout == "", f"{args[0]} -o printed {result.stdout[:200]!r}"
        assert len(result.stderr.strip().splitlines()) == 1, (args, result.stderr)
        assert result.stderr.startswith("wrote "), result.stderr
        assert Path(args[-1]).stat().st_size > 0


# ---- the rendering rules themselves --------------------------------------------------------

def _render(columns: list[Column], rows: list[list[str]], width: int) -> str:
    from io import StringIO

    buf = StringIO()
    out = Console(file=buf, width=width, highlight=False)
    render.print_table(out, columns, rows, "t")
    return buf.getvalue()


def test_required_cells_are_never_cut_and_optional_columns_drop_with_a_note() -> None:
    name = "a-very-long-job-name-that-must-stay-whole-0001"
    cols = [Column("job"), Column("GPUs", justify="right"), Column("extra one", "optional"),
            Column("extra two", "optional"), Column("why", "text")]
    rows = [[name, "1,024", "x" * 30, "y" * 30, "word " * 40]]
    out = _render(cols, rows, 80)
    assert name in out and "1,024" in out and "…" not in out
    assert "(not shown at 80 columns: extra one, extra two;" in " ".join(out.split())
    assert max(len(line) for line in out.splitlines()) <= 80
    wide = _render(cols, rows, 200)
    assert "extra two" in wide and "not shown" not in wide
    # a required cell wider than the terminal widens the output instead of being cut
    huge = "n" * 120
    out = _render([Column("job"), Column("why", "text")], [[huge, "because"]], 80)
    assert huge in out and "…" not in out


def test_numbers_for_people() -> None:
    assert render.num(34094300000.0) == "34,094,300,000"
    assert render.num(0.125) == "0.12" and render.num(None) == "-"
    assert render.count(15446) == "15,446"
    assert render.seconds(0.25) == "0.25 s" and render.seconds(5400) == "1.5 h"
    assert render.pairs({"beijing": 1, "shanghai": 1}) == "beijing 1, shanghai 1"
    assert render.plural(1, "job") == "1 job" and render.plural(2, "job") == "2 jobs"
    assert render.more_line(1, "pending job").startswith("... and 1 more pending job (")


def test_width_follows_columns_else_pipe(monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "123")
    assert render.width_for() == 123
    monkeypatch.delenv("COLUMNS")
    import io

    assert render.width_for(io.StringIO()) == render.PIPE_WIDTH


def test_readme_quick_start_says_how_to_get_hyperplace_on_the_path() -> None:
    """A fresh shell has no ``hyperplace`` until the venv is activated: the Quick start says
    so, keeps its two commands as its first block (.ci/run runs the second verbatim) and
    shows the summary a round prints."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    quick = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    first = quick.split("```", 2)[1].strip().splitlines()
    assert len(first) == 2 and first[1].endswith(".venv/bin/python -m pytest -q")
    assert "source .venv/bin/activate" in quick and "--install-completion" in quick
    assert re.search(r"pending\s+\d+ jobs: ", quick) and "priority-weighted GPUs" in quick
