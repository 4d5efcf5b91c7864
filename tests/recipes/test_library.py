"""Library recipe files: listing, errors, and the shipped recipes (all must parse and render)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from recipes.document import parse_recipe
from recipes.inputs import input_defaults
from recipes.library import find_library_recipe, library_recipes
from recipes.render import render
from tests.recipes.helpers import doc

LIBRARY = Path(settings.BASE_DIR) / "recipes" / "library"
SHIPPED = {"test-engine", "llamacpp-smollm2", "infinity-minilm", "vllm", "sglang", "ollama"}
FULL_CLUSTER: dict[str, Any] = {
    "cache_dir": "/scratch/obleth",
    "images_dir": "/images",
    "log_dir": "/scratch/logs",
    "setup": "module load cuda || true",
    "images": {"vllm": "vllm.sif", "sglang": "sglang.sif", "ollama": "docker://ollama/ollama"},
}


def test_shipped_recipes_all_parse() -> None:
    found = {r.slug: r for r in library_recipes(LIBRARY)}
    assert set(found) >= SHIPPED
    for slug, item in found.items():
        assert item.error is None, f"{slug}: {item.error}"
        assert item.parsed is not None and item.parsed.warnings == (), slug
        assert item.name == item.parsed.name


def test_default_directory_comes_from_settings(settings: Any, tmp_path: Path) -> None:
    (tmp_path / "a.recipe").write_text(doc())
    settings.OBLETH_RECIPES_DIR = tmp_path
    assert [r.slug for r in library_recipes()] == ["a"]


def test_invalid_files_are_listed_with_their_error(tmp_path: Path) -> None:
    (tmp_path / "good.recipe").write_text(doc())
    (tmp_path / "no-port.recipe").write_text(doc().replace("port: 8000\n", ""))
    (tmp_path / "broken.recipe").write_text("---\nname: [\n---\necho\n")
    (tmp_path / "binary.recipe").write_bytes(b"\xff\xfe\x00bad")
    (tmp_path / "notes.txt").write_text("not a recipe")
    (tmp_path / "dir.recipe").mkdir()
    items = {r.slug: r for r in library_recipes(tmp_path)}
    assert sorted(items) == ["binary", "broken", "good", "no-port"]
    assert items["good"].valid and items["good"].error is None
    assert not items["no-port"].valid and "`port`" in (items["no-port"].error or "")
    # The header still shows what it could read.
    assert items["no-port"].name == "Demo" and items["no-port"].header["engine"] == "vllm"
    assert "Line" in (items["broken"].error or "") and items["broken"].name == "broken"
    assert "cannot be read" in (items["binary"].error or "")


def test_missing_directory_lists_nothing(tmp_path: Path) -> None:
    assert library_recipes(tmp_path / "nope") == []


def test_find_library_recipe(tmp_path: Path) -> None:
    (tmp_path / "a.recipe").write_text(doc())
    found = find_library_recipe("a", tmp_path)
    assert found is not None and found.parsed is not None
    assert find_library_recipe("missing", tmp_path) is None
    assert find_library_recipe("../a", tmp_path) is None
    assert find_library_recipe(".hidden", tmp_path) is None


def _bash_n(script: str, tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.sh"
    path.write_text(script)
    result = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, f"{name}: {result.stderr}"


@pytest.mark.parametrize("slug", sorted(SHIPPED))
@pytest.mark.parametrize("flags", ["off", "on"])
def test_shipped_recipes_render_strict_to_valid_bash(slug: str, flags: str, tmp_path: Path) -> None:
    item = find_library_recipe(slug, LIBRARY)
    assert item is not None and item.parsed is not None
    parsed = item.parsed
    values = input_defaults(parsed, cluster=FULL_CLUSTER)
    for inp in parsed.inputs:
        if inp.type == "flag":
            values[inp.name] = "true" if flags == "on" else "false"
        elif inp.required and not values[inp.name]:
            values[inp.name] = "org/some-model"
    script = render(
        parsed, cluster=FULL_CLUSTER, values=values, api_model_name="served-name", strict=True
    )
    assert "{{" not in script
    assert "$OBLETH_SERVING_PORT" in script
    _bash_n(script, tmp_path, slug)


def test_demo_recipe_header() -> None:
    item = find_library_recipe("test-engine", LIBRARY)
    assert item is not None and item.parsed is not None
    parsed = item.parsed
    assert (parsed.engine, parsed.model_type, parsed.port, parsed.health_path) == (
        "test",
        "chat",
        18000,
        "/health",
    )
    assert parsed.target_replicas == 2
    assert parsed.placement["partition"] == "debug"


def test_demo_recipe_renders_with_no_cluster_defaults(tmp_path: Path) -> None:
    """The demo needs no cluster default: it renders strictly with none set."""
    item = find_library_recipe("test-engine", LIBRARY)
    assert item is not None and item.parsed is not None
    script = render(item.parsed, cluster=None, values={}, api_model_name="demo", strict=True)
    assert f"{settings.OBLETH_ENGINES_DIR}/testengine/server.py" in script
    assert '--model "demo"' in script and "--control" in script
    _bash_n(script, tmp_path, "demo")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_for(predicate: Any, limit: float = 60.0) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def test_demo_script_serves_and_outlives_its_server(tmp_path: Path) -> None:
    """Runs the rendered demo script with bash on this machine (no Slurm: the provisioner's port
    preamble is replaced by setting OBLETH_SERVING_PORT, and the engine is bound to 127.0.0.1 via
    its environment variable). Kills the server and checks the script keeps running."""
    if not Path("/usr/bin/python3").exists() or shutil.which("bash") is None:
        pytest.skip("needs /usr/bin/python3 and bash")
    item = find_library_recipe("test-engine", LIBRARY)
    assert item is not None and item.parsed is not None
    pid_file = tmp_path / "engine.pid"
    script = render(
        item.parsed,
        cluster=None,
        values={"extra": f"--pid-file {pid_file} --quiet"},
        api_model_name="demo-served",
        strict=True,
    )
    path = tmp_path / "job.sh"
    path.write_text(script)
    port = _free_port()
    log = tmp_path / "job.log"
    env = {
        **os.environ,
        "OBLETH_SERVING_PORT": str(port),
        "OBLETH_TESTENGINE_HOST": "127.0.0.1",
    }
    with log.open("w") as out:
        job = subprocess.Popen(
            ["bash", str(path)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:

        def healthy() -> bool:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    return bool(r.status == 200)
            except OSError:
                return False

        assert _wait_for(healthy), log.read_text()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5) as r:
            assert "demo-served" in r.read().decode()
        assert _wait_for(lambda: pid_file.exists() and pid_file.read_text().strip())
        os.kill(int(pid_file.read_text().strip()), signal.SIGKILL)
        assert _wait_for(lambda: "engine exited" in log.read_text()), log.read_text()
        time.sleep(0.5)
        assert job.poll() is None, "the job script must stay running after its server dies"
        assert not healthy()
    finally:
        os.killpg(job.pid, signal.SIGTERM)
        job.wait(timeout=30)


def test_parse_recipe_of_each_file_matches_listing() -> None:
    for path in sorted(LIBRARY.glob("*.recipe")):
        parsed = parse_recipe(path.read_text())
        assert parsed.script.startswith("#!/bin/bash")
