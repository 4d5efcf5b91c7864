"""Where values land in a rendered script (recipes.shell): the lexer's contexts, the
quoted variables, the refusals, and what bash really receives in each context."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from recipes.document import parse_recipe
from recipes.inputs import validate_inputs
from recipes.render import render
from recipes.shell import (
    ARITH,
    BARE,
    DQ,
    OTHER,
    SQ,
    ShellValues,
    is_inert,
    token_contexts,
    value_problem,
)
from recipes.types import _TOKEN_RE, RecipeError
from tests.recipes.helpers import with_header

CONTEXT_TABLE = [
    ("run {{x}}", BARE),
    ('run "{{x}}"', DQ),
    ('run "a {{x}} b"', DQ),
    ("run '{{x}}'", SQ),
    ('run "$(echo "{{x}}")"', DQ),
    ("run $(echo {{x}})", BARE),
    ("run ${X:-{{x}}}", BARE),
    ('run "${X:-{{x}}}"', OTHER),
    ("run $(( {{x}} + 1 ))", ARITH),
    ("(( {{x}} > 1 ))", ARITH),
    ("run `echo {{x}}`", OTHER),
    ("run $'a\\'{{x}}'", OTHER),
    ("# a comment {{x}}", BARE),
    ("echo it\\'s {{x}}", BARE),
    ("echo 'it'\"'\"'s' {{x}}", BARE),
    ('echo "q\\"{{x}}"', DQ),
    ("cat <(echo {{x}})", BARE),
    ("cat <<EOF\n{{x}}\nEOF", OTHER),
    ("cat <<'EOF'\n{{x}}\nEOF", OTHER),
    ("cat <<-EOF\n\t{{x}}\n\tEOF", OTHER),
    ("cat <<EOF\nbody\nEOF\nrun {{x}}", BARE),
    ("X=1 # it's here\nrun '{{x}}'", SQ),
    ("case $a in b) run {{x}};; esac", BARE),
    ("echo $# {{x}}", BARE),
    ("echo ${arr[{{x}}]}", ARITH),
    ('echo "${arr[{{x}}]}"', ARITH),
    ("echo ${arr[1]} {{x}}", BARE),
]


def test_deep_nesting_does_not_recurse() -> None:
    text = "${" * 50_000 + "{{x}}"
    contexts = token_contexts(text, _TOKEN_RE)
    assert list(contexts.values()) == [BARE]


def test_a_path_holds_no_comma_or_leading_dash_or_tilde() -> None:
    parsed = parse_recipe(with_header(HEADER, 'run "{{name}}"\n'))
    for bad, phrase in (("/a,/b", "','"), ("-rf", "'-'"), ("~/m", "'~'")):
        errors = validate_inputs(parsed, {"name": bad})
        assert phrase in errors["name"] and "`name`" in errors["name"]


@pytest.mark.parametrize(("text", "expected"), CONTEXT_TABLE, ids=[r[0] for r in CONTEXT_TABLE])
def test_token_contexts(text: str, expected: str) -> None:
    contexts = token_contexts(text, _TOKEN_RE)
    starts = [m.start() for m in _TOKEN_RE.finditer(text)]
    assert [contexts[s] for s in starts] == [expected]


INERT = [
    "",
    "org/model-7B",
    "Qwen/Qwen2.5-7B-Instruct",
    "/scratch/x_y",
    "qwen2.5:0.5b",
    "a@b%c+d=e,f",
]
NOT_INERT = ["a b", "$x", "`x`", "a;b", "a|b", "a&b", "a>b", "'", '"', "\\", "~", "*", "{a,b}", "é"]


@pytest.mark.parametrize("value", INERT)
def test_inert_values(value: str) -> None:
    assert is_inert(value)
    assert ShellValues().place("V", value, BARE) == value


@pytest.mark.parametrize("value", NOT_INERT)
def test_other_values_become_variables(value: str) -> None:
    shell = ShellValues()
    assert shell.place("V", value, BARE) == '"${V}"'
    assert shell.place("V", value, DQ) == "${V}"
    assert shell.place("V", value, SQ) == "'\"${V}\"'"
    assert shell.place("V", value, OTHER) == "${V}"
    with pytest.raises(ValueError, match="arithmetic"):
        shell.place("V", value, ARITH)
    assert list(shell.assignments) == ["V"]


def test_same_variable_name_for_two_values_gets_a_suffix() -> None:
    shell = ShellValues()
    assert shell.place("V", "a b", DQ) == "${V}"
    assert shell.place("V", "c d", DQ) == "${V_2}"
    assert shell.place("V", "a b", DQ) == "${V}"
    assert shell.place("V", "a b", BARE, words=True) == "a b"  # inert words: as typed
    assert shell.place("V", "a 'b'", BARE, words=True) == '"${V_3[@]}"'


def test_words_of_a_bare_text_value() -> None:
    shell = ShellValues()
    assert shell.place("V", "--a x --b", BARE, words=True) == "--a x --b"
    assert shell.place("V", "--t 'a b'", BARE, words=True) == '"${V[@]}"'
    assert shell.assignments["V"] == "V=(--t 'a b')"
    with pytest.raises(ValueError, match="quote that is not closed"):
        shell.place("W", "it's", BARE, words=True)


PROBLEMS = [
    ("ok value", None),
    ("a\x00b", "NUL"),
    ("a\nb", "line break"),
    ("a\rb", "line break"),
    ("a\x1bb", "control character"),
    ("#SBATCH --qos=x", "#SBATCH"),
    ("x # sbatch --qos=x", "#SBATCH"),
    ("a" * 4097, "at most 4096"),
    ("tab\tinside", None),
]


@pytest.mark.parametrize(("value", "phrase"), PROBLEMS, ids=[repr(p[0][:20]) for p in PROBLEMS])
def test_value_problem(value: str, phrase: str | None) -> None:
    problem = value_problem(value)
    if phrase is None:
        assert problem is None
    else:
        assert problem is not None and phrase in problem


# ----------------------------------------------------------------------------- what bash receives

SCRIPT = """#!/bin/bash
#SBATCH --mem=1G
set -euo pipefail
args() { for a in "$@"; do printf '<%s>' "$a"; done; printf '\\n'; }
args "{{name}}"
args "pre-{{name}}-post"
args '{{name}}'
args 'pre-{{name}}-post'
args {{name}}
args ${UNSET:-{{name}}}
args "${UNSET:-{{name}}}"
cat <<EOF
<{{name}}>
EOF
cat <<'EOF'
<{{name}}>
EOF
X=`printf '%s' "{{name}}"`
args "$X"
args {{flags}}
args "{{flags}}"
"""
HEADER = """\
inputs:
  - name: name
    type: path
  - name: flags
    type: text
"""
HOSTILE = [
    "$(touch CANARY)",
    "`touch CANARY`",
    'x"; touch CANARY; echo "',
    "'; touch CANARY; '",
    "${IFS}x",
    "a b  c",
    "*",
    "x > CANARY",
    "\\",
    "it's",
]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("value", HOSTILE)
def test_bash_receives_the_value_literally(value: str, tmp_path: Path) -> None:
    """Runs the rendered script with real bash (nothing faked) and reads what each context gave
    the ``args`` function."""
    parsed = parse_recipe(with_header(HEADER, SCRIPT))
    flags = "--a 'b c' $(touch CANARY)"
    script = render(
        parsed,
        cluster=None,
        values={"name": value, "flags": flags},
        api_model_name="m",
        strict=True,
    )
    (tmp_path / "job.sh").write_text(script)
    result = subprocess.run(
        ["bash", "job.sh"], cwd=tmp_path, capture_output=True, text=True, check=False, timeout=30
    )
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "CANARY").exists()
    lines = result.stdout.split("\n")
    one = f"<{value}>"
    assert lines[0] == one  # "..."
    assert lines[1] == f"<pre-{value}-post>"
    assert lines[2] == one  # '...'
    assert lines[3] == f"<pre-{value}-post>"
    assert lines[4] == one  # bare: a path is one argument
    assert lines[5] == one  # ${X:-...}, bare
    assert lines[6] == one  # "${X:-...}"
    assert lines[7] == one  # here-document
    assert lines[8] == "<{{name}}>" or lines[8].startswith("<${")  # quoted here-document: text
    assert lines[9] == one  # backticks
    assert lines[10] == "<--a><b c><$(touch><CANARY)>"  # bare text: the typed words
    assert lines[11] == f"<{flags}>"  # quoted text: one argument


def test_typed_tokens_are_text_not_cluster_defaults() -> None:
    parsed = parse_recipe(with_header(HEADER, 'run "{{name}}" {{flags}}\n'))
    cluster: dict[str, Any] = {"cache_dir": "/c"}
    errors = validate_inputs(parsed, {"name": "{{cluster.cache}}/x"}, cluster=cluster)
    assert "is used as typed" in errors["name"] and "`name`" in errors["name"]
    with pytest.raises(RecipeError) as info:
        render(
            parsed,
            cluster=cluster,
            values={"name": "{{cluster.cache}}/x"},
            api_model_name="m",
            strict=True,
        )
    assert "inputs.name" in info.value.errors
    # A token that is not a cluster default is plain text (a Jinja chat template, say).
    out = render(
        parsed,
        cluster=cluster,
        values={"name": "/x", "flags": "--template {{messages}}"},
        api_model_name="m",
        strict=True,
    )
    assert "OBLETH_INPUT_flags=(--template '{{messages}}')" in out


def test_api_model_name_is_checked_even_when_unused() -> None:
    parsed = parse_recipe(with_header("", "#!/bin/bash\necho serve\n"))
    for bad in ("a\x00b", "a\nb", "{{cluster.cache}}"):
        with pytest.raises(RecipeError) as info:
            render(parsed, cluster={"cache_dir": "/c"}, values={}, api_model_name=bad, strict=True)
        assert "api_model_name" in info.value.errors


def test_arithmetic_takes_only_inert_values() -> None:
    parsed = parse_recipe(with_header(HEADER, "echo $(( {{name}} + 1 ))\n"))
    assert "$(( 41 + 1 ))" in render(
        parsed, cluster=None, values={"name": "41"}, api_model_name="m", strict=True
    )
    with pytest.raises(RecipeError) as info:
        render(parsed, cluster=None, values={"name": "a[$(id)]"}, api_model_name="m", strict=True)
    assert "arithmetic" in info.value.errors["inputs.name"]


def test_review_mode_keeps_the_token_of_a_refused_value() -> None:
    parsed = parse_recipe(with_header(HEADER, 'run "{{name}}"\n'))
    out = render(parsed, cluster=None, values={"name": "a\nb"}, api_model_name="m")
    assert 'run "{{name}}"' in out and "a\nb" not in out


def test_stored_hostile_cluster_defaults_are_refused_or_quoted() -> None:
    """A Slurm settings row saved before the validators existed: the mapping bypasses them."""
    parsed = parse_recipe(
        with_header("", 'run "{{cluster.cache}}" {{image.vllm}}\n{{cluster.setup}}\n')
    )
    hostile = {"cache_dir": "/c/$(touch x)", "images": {"vllm": "/i/`id`.sif"}, "setup": "ok"}
    out = render(parsed, cluster=hostile, values={}, api_model_name="m", strict=True)
    assert "OBLETH_CLUSTER_CACHE='/c/$(touch x)'" in out
    assert 'run "${OBLETH_CLUSTER_CACHE}" "${OBLETH_IMAGE_vllm}"' in out
    for bad, key in (
        ({"cache_dir": "/c\nrm -rf /"}, "cluster.cache"),
        ({"cache_dir": "/c", "images": {"vllm": "a\x00"}}, "image.vllm"),
        (
            {"cache_dir": "/c", "images": {"vllm": "/v"}, "setup": "#SBATCH --qos=x"},
            "cluster.setup",
        ),
        ({"cache_dir": "/c", "images": {"vllm": "/v"}, "setup": "a\x00"}, "cluster.setup"),
    ):
        with pytest.raises(RecipeError) as info:
            render(parsed, cluster=bad, values={}, api_model_name="m", strict=True)
        assert key in info.value.errors, (bad, info.value.errors)


def test_a_flag_that_adds_a_directive_is_refused() -> None:
    parsed = parse_recipe(
        with_header(
            'inputs:\n  - name: f\n    type: flag\n    adds: "x\\n#SBATCH --qos=high"\n',
            "#!/bin/bash\n#SBATCH --mem=1G\nrun {{f}}\n",
        )
    )
    with pytest.raises(RecipeError) as info:
        render(parsed, cluster=None, values={"f": "on"}, api_model_name="m", strict=True)
    assert "script" in info.value.errors and "#SBATCH" in info.value.errors["script"]


def test_words_need_bash() -> None:
    parsed = parse_recipe(with_header(HEADER, '#!/bin/sh\nrun {{flags}} "{{name}}"\n'))
    out = render(
        parsed,
        cluster=None,
        values={"flags": "--a b", "name": "a b"},
        api_model_name="m",
        strict=True,
    )
    assert 'run --a b "${OBLETH_INPUT_name}"' in out
    with pytest.raises(RecipeError) as info:
        render(parsed, cluster=None, values={"flags": "--a 'b c'"}, api_model_name="m", strict=True)
    assert "needs bash" in info.value.errors["inputs.flags"]
