"""The batch script renderer: assembly rules and the port-window block run by a real bash.

Nothing is faked: the generated scripts are executed with /bin/bash while sockets listen on
127.0.0.1 ports of the window.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import socket
import subprocess
from collections.abc import Iterator

import pytest

from provisioner.script import port_window_block, render_batch_script, shell_quote

BASH = shutil.which("bash")


def render(**overrides: object) -> str:
    kwargs: dict[str, object] = {
        "script_body": "",
        "image": "",
        "preamble": "",
        "launch_command": "serve --port $OBLETH_SERVING_PORT",
        "port_base": 8016,
        "port_span": 8,
    }
    kwargs.update(overrides)
    return render_batch_script(**kwargs)  # type: ignore[arg-type]


def lines_after_block(script: str) -> list[str]:
    """The script's lines with obleth's block (port window, drain) removed, to check the rest."""
    lines = script.split("\n")
    # the closing brace of obleth_warned, the block's last line
    warned = lines.index("obleth_warned() {")
    end = next(i for i in range(warned, len(lines)) if lines[i] == "}")
    block_start = 1 if lines[0].startswith("#!") else 0
    return lines[:block_start] + lines[end + 1 :]


@pytest.mark.parametrize(
    ("name", "overrides", "expected"),
    [
        (
            "apptainer exec line with quoted image",
            {"image": "/shared/img/vllm.sif", "launch_command": "vllm serve m"},
            [
                "#!/bin/bash",
                "set -euo pipefail",
                "apptainer exec --nv '/shared/img/vllm.sif' vllm serve m",
                "",
            ],
        ),
        (
            "image with metacharacters is single-quoted",
            {"image": "/x/it's $(rm -rf) a;b.sif", "launch_command": "run"},
            [
                "#!/bin/bash",
                "set -euo pipefail",
                "apptainer exec --nv '/x/it'\\''s $(rm -rf) a;b.sif' run",
                "",
            ],
        ),
        (
            "blank image runs the command bare",
            {"image": "   ", "launch_command": "ollama serve"},
            ["#!/bin/bash", "set -euo pipefail", "ollama serve", ""],
        ),
        (
            "preamble before the exec line",
            {
                "image": "/i.sif",
                "preamble": "module load cuda\nexport A=1\n",
                "launch_command": "x",
            },
            [
                "#!/bin/bash",
                "set -euo pipefail",
                "module load cuda",
                "export A=1",
                "apptainer exec --nv '/i.sif' x",
                "",
            ],
        ),
        (
            "empty preamble adds nothing",
            {"image": "/i.sif", "preamble": "  \n ", "launch_command": "x"},
            ["#!/bin/bash", "set -euo pipefail", "apptainer exec --nv '/i.sif' x", ""],
        ),
        (
            "CRLF normalized in the legacy path",
            {
                "image": "/i.sif",
                "preamble": "module load a\r\nmodule load b\r\n",
                "launch_command": "x\r\n",
            },
            [
                "#!/bin/bash",
                "set -euo pipefail",
                "module load a",
                "module load b",
                "apptainer exec --nv '/i.sif' x",
                "",
            ],
        ),
        (
            "script body with shebang is verbatim and wins over image/command",
            {
                "script_body": (
                    "#!/bin/bash -l\r\n#SBATCH --gres=gpu:1\r\nset -euo pipefail\r\nvllm serve"
                ),
                "image": "/ignored.sif",
                "launch_command": "ignored",
                "preamble": "ignored too",
            },
            ["#!/bin/bash -l", "#SBATCH --gres=gpu:1", "set -euo pipefail", "vllm serve", ""],
        ),
        (
            "script body without shebang is wrapped",
            {"script_body": "echo hi\n"},
            ["#!/bin/bash", "set -euo pipefail", "echo hi", ""],
        ),
    ],
)
def test_assembly(name: str, overrides: dict[str, object], expected: list[str]) -> None:
    script = render(**overrides)
    assert "\r" not in script
    assert script.startswith(expected[0] + "\n")
    assert lines_after_block(script) == expected
    # the block sits right after the shebang
    assert script.split("\n")[1].startswith("# obleth:")


def test_block_bounds_and_default() -> None:
    block = port_window_block(8016, 8)
    assert "obleth_port = 8016; obleth_port < 8024;" in block
    assert 'export OBLETH_SERVING_PORT="${OBLETH_SERVING_PORT:-8016}"' in block
    assert "export OBLETH_PORT_BASE=8016" in block
    assert "export OBLETH_PORT_SPAN=8" in block
    assert "seq" not in block and "timeout" not in block


@pytest.mark.parametrize(
    ("field", "kwargs"),
    [
        ("launch_command", {"launch_command": "  ", "script_body": ""}),
        ("port_span", {"port_span": 0}),
        ("port_base", {"port_base": 65530, "port_span": 8}),
        ("port_base", {"port_base": 0}),
    ],
)
def test_bad_input_names_the_field(field: str, kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=field):
        render(**kwargs)


def test_shell_quote_round_trips_through_bash() -> None:
    assert BASH is not None
    text = "a b'c\"$HOME`x`;\\"
    out = subprocess.run(
        [BASH, "-c", f"printf %s {shell_quote(text)}"], capture_output=True, text=True, check=True
    )
    assert out.stdout == text


# ------------------------------------------------------------------ running the block for real


def _window_is_free(base: int, span: int) -> bool:
    for port in range(base, base + span):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


def free_window(span: int) -> int:
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20000, 60000 - span)
        if _window_is_free(base, span):
            return base
    pytest.skip("no free port window on 127.0.0.1")
    raise AssertionError("unreachable")


@contextlib.contextmanager
def listening(*ports: int) -> Iterator[None]:
    socks = []
    try:
        for port in ports:
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(("127.0.0.1", port))
            s.listen(16)
            socks.append(s)
        yield
    finally:
        for s in socks:
            s.close()


def run_script(script: str) -> dict[str, str]:
    assert BASH is not None, "bash is needed to run the generated block"
    out = subprocess.run(
        [BASH, "-c", script, "obleth-job"],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "OBLETH_SERVING_PORT": "1"},
    )
    return dict(line.split("=", 1) for line in out.stdout.splitlines() if "=" in line)


ECHO = (
    'echo "PORT=$OBLETH_SERVING_PORT"; echo "BASE=$OBLETH_PORT_BASE"; echo "SPAN=$OBLETH_PORT_SPAN"'
)


@pytest.mark.parametrize(
    ("name", "occupied", "expected_offset"),
    [
        ("nothing listening: the base", [], 0),
        ("base occupied: next port", [0], 1),
        ("first three occupied", [0, 1, 2], 3),
        ("gap is used", [0, 2], 1),
        ("whole window occupied: falls back to the base", [0, 1, 2, 3], 0),
    ],
)
def test_block_skips_occupied_ports(name: str, occupied: list[int], expected_offset: int) -> None:
    span = 4
    base = free_window(span)
    script = render(
        script_body=f"#!/bin/bash\nset -euo pipefail\n{ECHO}\n", port_base=base, port_span=span
    )
    with listening(*(base + i for i in occupied)):
        env = run_script(script)
    assert env == {"PORT": str(base + expected_offset), "BASE": str(base), "SPAN": str(span)}


def test_legacy_script_runs_bare_command_with_port() -> None:
    base = free_window(2)
    script = render(launch_command=ECHO, image="", port_base=base, port_span=2)
    with listening(base):
        env = run_script(script)
    assert env["PORT"] == str(base + 1)


def test_block_survives_strict_shebang_options() -> None:
    """A recipe shebang with -eu must not abort inside the block when a port is busy."""
    base = free_window(2)
    script = render(script_body=f"#!/bin/bash -eu\n{ECHO}\n", port_base=base, port_span=2)
    with listening(base):
        # bash -c ignores the shebang line, so pass the options explicitly
        assert BASH is not None
        out = subprocess.run(
            [BASH, "-eu", "-o", "pipefail", "-c", script],
            capture_output=True,
            text=True,
            check=True,
            env={"PATH": "/usr/bin:/bin"},
        )
    assert f"PORT={base + 1}" in out.stdout.splitlines()
