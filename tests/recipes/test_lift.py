"""lift_sbatch: #SBATCH directives become spec fields; the rest become warnings."""

from __future__ import annotations

import pytest

from recipes.sbatch import lift_sbatch, lift_sbatch_lines, strip_sbatch

LIFT_TABLE = [
    ("#SBATCH --partition=gpu", {"partition": "gpu"}),
    ("#SBATCH --partition gpu", {"partition": "gpu"}),
    ("#SBATCH -p gpu", {"partition": "gpu"}),
    ("#SBATCH -pgpu", {"partition": "gpu"}),
    ("#SBATCH --gres=gpu:a100:2", {"gres": "gpu:a100:2"}),
    ("#SBATCH --cpus-per-task=8", {"cpus_per_task": 8}),
    ("#SBATCH -c 8", {"cpus_per_task": 8}),
    ("#SBATCH --mem=64G", {"mem": "64G"}),
    ("#SBATCH --mem 0", {"mem": "0"}),
    ("#SBATCH --time=1-00:00:00", {"time_limit": "1-00:00:00"}),
    ("#SBATCH -t 4:00:00", {"time_limit": "4:00:00"}),
    ("#SBATCH --nodes=2", {"nodes": 2}),
    ("#SBATCH -N 3", {"nodes": 3}),
    ("#SBATCH --account=lab", {"account": "lab"}),
    ("#SBATCH -A lab", {"account": "lab"}),
    ("#SBATCH --qos=high", {"qos": "high"}),
    ("#SBATCH -q high", {"qos": "high"}),
    ("#SBATCH --constraint=a100", {"constraints": "a100"}),
    ("#SBATCH -C a100&ib", {"constraints": "a100&ib"}),
    ("#SBATCH --exclude=n[01-02]", {"exclude": "n[01-02]"}),
    ("#SBATCH -x n1", {"exclude": "n1"}),
    ("#SBATCH --output=/scratch/logs/%x-%j.out", {"log_output_dir": "/scratch/logs"}),
    ("#SBATCH -o logs/%j.out", {"log_output_dir": "logs"}),
    ("#SBATCH --error=/var/log/jobs/%j.err", {"log_output_dir": "/var/log/jobs"}),
    ("#SBATCH -e err.txt", {}),
    ("#SBATCH --output=./x.out", {}),
    ("#SBATCH --chdir=/work", {"chdir": "/work"}),
    ("#SBATCH -D /work", {"chdir": "/work"}),
    ("#SBATCH --partition=gpu # the big one", {"partition": "gpu"}),
    ("   #SBATCH --qos=low   ", {"qos": "low"}),
    ("#SBATCH --nodes=1 --cpus-per-task=2", {"nodes": 1, "cpus_per_task": 2}),
    ("#SBATCHX --qos=low", {}),
    ("# SBATCH --qos=low", {}),
    ("echo '#SBATCH --qos=no'", {}),
]


@pytest.mark.parametrize(("line", "expected"), LIFT_TABLE, ids=[row[0] for row in LIFT_TABLE])
def test_lifting_table(line: str, expected: dict[str, object]) -> None:
    fields, warnings = lift_sbatch(f"#!/bin/bash\n{line}\necho hi\n")
    assert fields == expected
    assert warnings == []


WARN_TABLE = [
    ("#SBATCH --job-name=x", "`--job-name` (not applied)"),
    ("#SBATCH --exclusive", "`--exclusive` (not applied)"),
    ("#SBATCH -J name", "`-J` (not applied)"),
    ("#SBATCH --nodes=2-4", "`--nodes=2-4` (not applied: use a whole number)"),
    ("#SBATCH --cpus-per-task=many", "`--cpus-per-task=many` (not applied: use a whole number)"),
    ("#SBATCH --partition", "`--partition` (not applied: it needs a value)"),
]


@pytest.mark.parametrize(("line", "warning"), WARN_TABLE, ids=[row[0] for row in WARN_TABLE])
def test_unsupported_directives_warn(line: str, warning: str) -> None:
    fields, warnings = lift_sbatch(f"#!/bin/bash\n{line}\n")
    assert fields == {}
    assert warnings == [warning]


def test_later_directive_wins_and_output_beats_error() -> None:
    script = (
        "#!/bin/bash\r\n"
        "#SBATCH --partition=a\r\n"
        "#SBATCH --error=/e/%j.err\r\n"
        "#SBATCH --output=/o/%j.out\r\n"
        "#SBATCH -p b\r\n"
        "#SBATCH --time=10 --job-name=x\r\n"
    )
    fields, warnings = lift_sbatch(script)
    assert fields == {"partition": "b", "log_output_dir": "/o", "time_limit": "10"}
    assert warnings == ["`--job-name` (not applied)"]


def test_lines_and_strip() -> None:
    script = "#!/bin/bash\n#SBATCH -p gpu --mem=1G\n#SBATCH --job-name=x\necho hi\n"
    lines = lift_sbatch_lines(script)
    assert [(row.line, row.fields) for row in lines] == [(2, ("partition", "mem")), (3, ())]
    assert strip_sbatch(script) == "#!/bin/bash\necho hi\n"
