"""The obleth test engine: an OpenAI-compatible server that is NOT a model.

``server.py`` and the modules next to it (:data:`ENGINE_FILES`) use the Python standard library
only, so a Slurm job can run it with any ``python3`` and no packages:
``python3 <SERVER_PATH> --port 8000``. Inside the project it also runs as
``python -m provisioner.testengine``. See ``server.py`` (or ``--help``) for the routes, the fault
switches and the multi-port mode.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Final

__all__ = [
    "ENGINE_FILES",
    "ENGINE_HEADER",
    "LISTENING_MARK",
    "SERVER_PATH",
    "engine_command",
    "install_copy",
]

SERVER_PATH: Final = Path(__file__).resolve().with_name("server.py")
# The files the engine runs from, side by side; server.py (the entry point) last.
ENGINE_FILES: Final = (
    "engine_config.py",
    "engine_openai.py",
    "engine_http.py",
    "engine_core.py",
    "server.py",
)
# Every answer carries this header, so a probe can tell the test engine from a real one.
ENGINE_HEADER: Final = "X-Obleth-Test-Engine"
# The engine writes a line containing this to stderr once it accepts connections.
LISTENING_MARK: Final = "obleth test engine (not a model) listening on"


def engine_command(*flags: str, python: str = "/usr/bin/python3") -> list[str]:
    """The argv that starts the engine with the given flags, e.g. ``("--port", "8000")``."""
    extra: Sequence[str] = flags
    return [python, str(SERVER_PATH), *extra]


def install_copy(engines_dir: Path) -> Path:
    """Copy the engine (:data:`ENGINE_FILES`) to ``<engines_dir>/testengine/``, readable by
    everyone, and return the copy of ``server.py``.

    Slurm jobs run as an unprivileged user who may not be able to read the checkout (a clone under
    /root, say); the copy is what recipes and tests run. Idempotent: a file is rewritten only
    when it differs; ``server.py``, which imports the others, is written last. If
    ``engines_dir`` cannot be written, a folder under /tmp is used instead.
    """
    import os
    import tempfile

    sources = {name: SERVER_PATH.with_name(name).read_bytes() for name in ENGINE_FILES}
    for base in (engines_dir, Path(tempfile.gettempdir()) / "obleth-engines"):
        try:
            for name, source in sources.items():
                target = base / "testengine" / name
                if not target.is_file() or target.read_bytes() != source:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    for folder in (base, target.parent):
                        os.chmod(folder, 0o755)
                    staging = target.with_suffix(f".{os.getpid()}.tmp")
                    staging.write_bytes(source)
                    os.chmod(staging, 0o644)
                    os.replace(staging, target)
            return base / "testengine" / "server.py"
        except OSError:
            continue
    raise OSError(f"cannot install the test engine under {engines_dir} or the temp folder")
