"""Where a job's stdout/stderr files are, and reading their tail when obleth can.

Paths: Slurm's filename patterns (``%j``, ``%x``, ``%u``, ``%N``, ``%A``, ``%%``...) resolved with
the real job id; a job submitted without a log folder writes ``slurm-<job id>.out`` in its
working directory (stdout and stderr in the same file), so that is where we look.

Reading: only when ``OBLETH_JOB_LOGS_READABLE`` names the folder (a shared file system mounted
where obleth runs): ``/same/path`` or ``/cluster/path=/local/mount``. A file is opened only if,
after resolving symlinks, it lies inside one of those folders, so a spec's log folder cannot
point obleth at /etc. What is sent is the tail (at most ``OBLETH_JOB_LOGS_MAX_KIB``), with
secrets masked by :func:`obleth.logging.redact` and NUL bytes dropped.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import posixpath
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from django.conf import settings

from obleth.logging import redact

STREAMS = ("stdout", "stderr")
DEFAULT_OUTPUT = "slurm-%j.out"  # sbatch's default, in the job's working directory
_PATTERN = re.compile(r"%(\d*)([%AajJNnstux])")


def resolve_pattern(
    pattern: str,
    *,
    job_id: str,
    job_name: str = "",
    user: str = "",
    node: str = "",
    workdir: str = "",
) -> str:
    """A Slurm ``--output`` pattern with the job's values (``%4j`` pads to 4 digits).

    Without a job id the pattern is returned unchanged (still a pattern). A relative path is
    taken from ``workdir``, as Slurm does.
    """
    if not pattern or not job_id:
        return pattern

    def value(match: re.Match[str]) -> str:
        width, letter = match.group(1), match.group(2)
        found = {
            "%": "%",
            "j": job_id,
            "J": job_id,  # the batch step of job id
            "A": job_id,  # not an array job: the array master is the job itself
            "a": "4294967294",  # Slurm's NO_VAL for a non-array task id
            "x": job_name,
            "u": user,
            "N": node.split(".")[0] if node else "",
            "n": "0",
            "s": "batch",
            "t": "0",
        }[letter]
        if letter == "%":
            return "%"
        return found.zfill(int(width)) if width and found.isdigit() else found

    text = _PATTERN.sub(value, pattern)
    if workdir and not text.startswith("/"):
        text = posixpath.join(workdir, text)
    return text


def launch_paths(launch: Any) -> dict[str, str]:
    """``{"stdout": path, "stderr": path}`` of a launch (a ``Launch`` row or its values), the
    patterns resolved when its job id is known. Blank stored paths mean sbatch's default."""
    submission = _mapping(getattr(launch, "submission", None))
    workdir = str(submission.get("current_working_directory") or "")
    job_id = str(getattr(launch, "job_id", "") or "")
    nodes = str(getattr(launch, "nodes", "") or "")
    common = {
        "job_id": job_id,
        "job_name": str(getattr(launch, "job_name", "") or ""),
        "node": nodes.split(",")[0].strip(),
        "workdir": workdir,
    }
    stdout = str(getattr(launch, "stdout_path", "") or "") or DEFAULT_OUTPUT
    stderr = str(getattr(launch, "stderr_path", "") or "") or stdout  # sbatch: same file
    return {
        "stdout": resolve_pattern(stdout, **common),
        "stderr": resolve_pattern(stderr, **common),
    }


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


# ---------------------------------------------------------------------------------- readability


@dataclasses.dataclass(frozen=True, slots=True)
class Mount:
    cluster: str  # the folder as jobs see it
    local: str  # the same folder where obleth runs


def parse_mounts(entries: Sequence[str]) -> list[Mount]:
    """``["/logs", "/cluster/logs=/mnt/logs"]`` -> mounts. Relative folders are ignored."""
    mounts = []
    for entry in entries:
        cluster, sep, local = entry.partition("=")
        cluster, local = cluster.strip(), (local.strip() if sep else cluster.strip())
        if not cluster.startswith("/") or not local.startswith("/"):
            continue
        mounts.append(Mount(posixpath.normpath(cluster), posixpath.normpath(local)))
    return mounts


def configured_mounts() -> list[Mount]:
    return parse_mounts(list(getattr(settings, "OBLETH_JOB_LOGS_READABLE", []) or []))


@dataclasses.dataclass(frozen=True, slots=True)
class Located:
    """Where a cluster path is here, or why it cannot be read."""

    local: Path | None
    why: str = ""


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def locate(cluster_path: str, mounts: Sequence[Mount] | None = None) -> Located:
    """The local file for a job's log path, only when it is inside a readable folder."""
    mounts = configured_mounts() if mounts is None else list(mounts)
    if not cluster_path or "%" in cluster_path or "\x00" in cluster_path:
        return Located(None, "the path is not known yet (the job has no id yet)")
    if not cluster_path.startswith("/"):
        return Located(None, "the path is relative: the job's working directory is not known")
    if not mounts:
        return Located(
            None,
            "obleth is not configured to read job logs: set OBLETH_JOB_LOGS_READABLE to the log "
            "folder as mounted where obleth runs (a shared file system)",
        )
    wanted = posixpath.normpath(cluster_path)
    for mount in mounts:
        if not _inside(wanted, mount.cluster):
            continue
        local = posixpath.join(mount.local, posixpath.relpath(wanted, mount.cluster))
        real = os.path.realpath(local)
        if not _inside(real, os.path.realpath(mount.local)):
            return Located(None, "the file leads outside the readable log folder (a symlink)")
        return Located(Path(real))
    folders = ", ".join(m.cluster for m in mounts)
    return Located(
        None,
        f"it is outside the folders obleth can read ({folders}); set the log folder of the "
        "managed spec or the Slurm settings to one of them, or add its mount to "
        "OBLETH_JOB_LOGS_READABLE",
    )


# ---------------------------------------------------------------------------------------- reading


@dataclasses.dataclass(frozen=True, slots=True)
class LogTail:
    stream: str
    path: str  # as the job sees it
    readable: bool
    why: str = ""  # why it cannot be shown
    text: str = ""
    size: int | None = None
    truncated: bool = False  # only the tail was sent
    modified_at: dt.datetime | None = None

    def as_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["modified_at"] = self.modified_at.isoformat() if self.modified_at else None
        return data


def max_bytes() -> int:
    return int(getattr(settings, "OBLETH_JOB_LOGS_MAX_KIB", 256)) * 1024


def clean(text: str) -> str:
    return redact(text.replace("\x00", ""))


def tail_file(path: Path, lines: int, limit: int) -> tuple[str, int, bool]:
    """The last ``lines`` lines of ``path`` (at most ``limit`` bytes): text, size, truncated."""
    with path.open("rb") as handle:
        handle.seek(0, os.SEEK_END)
        size = handle.tell()
        start = max(0, size - limit)
        handle.seek(start)
        data = handle.read(limit)
    text = data.decode("utf-8", errors="replace")
    if start > 0 and "\n" in text:
        text = text.split("\n", 1)[1]  # drop the partial first line
    parts = text.splitlines()
    truncated = start > 0 or len(parts) > lines
    return "\n".join(parts[-lines:]) if lines > 0 else "", size, truncated


def read_tail(launch: Any, stream: str, lines: int = 200) -> LogTail:
    """The tail of one stream of a launch, or where it is and why it cannot be shown."""
    if stream not in STREAMS:
        raise ValueError(f"stream must be one of {', '.join(STREAMS)}")
    path = launch_paths(launch)[stream]
    located = locate(path)
    if located.local is None:
        return LogTail(stream=stream, path=path, readable=False, why=located.why)
    try:
        text, size, truncated = tail_file(located.local, max(0, lines), max_bytes())
        modified = dt.datetime.fromtimestamp(located.local.stat().st_mtime, tz=dt.UTC)
    except FileNotFoundError:
        return LogTail(
            stream=stream,
            path=path,
            readable=False,
            why="the file does not exist (yet): the job has not started, or wrote elsewhere",
        )
    except (PermissionError, IsADirectoryError, OSError) as exc:
        return LogTail(
            stream=stream,
            path=path,
            readable=False,
            why=f"obleth cannot read it here: {exc.strerror or type(exc).__name__}",
        )
    return LogTail(
        stream=stream,
        path=path,
        readable=True,
        text=clean(text),
        size=size,
        truncated=truncated,
        modified_at=modified,
    )


def stream_file(launch: Any, stream: str) -> tuple[Iterator[bytes], str] | LogTail:
    """The whole file, line by line and redacted (a download), or why it cannot be read."""
    if stream not in STREAMS:
        raise ValueError(f"stream must be one of {', '.join(STREAMS)}")
    path = launch_paths(launch)[stream]
    located = locate(path)
    if located.local is None:
        return LogTail(stream=stream, path=path, readable=False, why=located.why)
    local = located.local
    try:
        handle = local.open("rb")
    except OSError as exc:
        return LogTail(
            stream=stream,
            path=path,
            readable=False,
            why=f"obleth cannot read it here: {exc.strerror or type(exc).__name__}",
        )

    def lines() -> Iterator[bytes]:
        with handle:
            for raw in handle:
                yield clean(raw.decode("utf-8", errors="replace")).encode()

    return lines(), posixpath.basename(path) or f"{stream}.log"
