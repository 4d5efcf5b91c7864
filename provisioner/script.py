"""The batch script a replica's job runs (reference section 4.1-4.2).

Pure text: no I/O. ``render_batch_script`` either takes a recipe's script verbatim or assembles
``apptainer exec --nv '<image>' <launch_command>`` (or the bare command), then puts the port-window
block right after the shebang so the server can listen on ``$OBLETH_SERVING_PORT``, and the
definition of ``obleth_serve`` (:func:`drain_block`), which recipes use in place of ``exec`` so
their server drains on Slurm's SIGTERM.
"""

from __future__ import annotations

__all__ = [
    "DRAIN_SECS_DEFAULT",
    "SHEBANG",
    "drain_block",
    "port_window_block",
    "render_batch_script",
    "shell_quote",
]

SHEBANG = "#!/bin/bash"
_STRICT = "set -euo pipefail"
_MAX_PORT = 65535


def shell_quote(text: str) -> str:
    """POSIX single quotes; an embedded ``'`` becomes ``'\\''``."""
    return "'" + text.replace("'", "'\\''") + "'"


def _lf(text: str) -> str:
    # A "\r" left after the shebang or "set -e" breaks bash options.
    return text.replace("\r\n", "\n")


def _check_window(port_base: int, port_span: int) -> None:
    if port_span < 1:
        raise ValueError(f"port_span must be at least 1 (got {port_span}); set a positive span")
    if port_base < 1 or port_base + port_span - 1 > _MAX_PORT:
        raise ValueError(
            f"port_base {port_base} with port_span {port_span} leaves 1..{_MAX_PORT}; "
            "choose a lower serving_port or a smaller span"
        )


def port_window_block(port_base: int, port_span: int) -> str:
    """Bash lines that export the first free port of ``port_base .. port_base+span-1``.

    A port counts as taken when a TCP connection to 127.0.0.1 on it succeeds (pure bash
    ``/dev/tcp``, in a subshell, stderr silenced; no ``seq`` or ``timeout``). When every port
    answers, ``OBLETH_SERVING_PORT`` falls back to ``port_base``. ``OBLETH_PORT_BASE`` and
    ``OBLETH_PORT_SPAN`` are exported too.
    """
    _check_window(port_base, port_span)
    end = port_base + port_span  # exclusive
    return "\n".join(
        [
            f"# obleth: serve on the first free port of this replica's window "
            f"{port_base}-{end - 1}",
            f"export OBLETH_PORT_BASE={port_base}",
            f"export OBLETH_PORT_SPAN={port_span}",
            "unset OBLETH_SERVING_PORT",
            f"for ((obleth_port = {port_base}; obleth_port < {end}; obleth_port++)); do",
            '  if ! (exec 3<>"/dev/tcp/127.0.0.1/${obleth_port}") 2>/dev/null; then',
            '    export OBLETH_SERVING_PORT="${obleth_port}"',
            "    break",
            "  fi",
            "done",
            "unset obleth_port",
            f'export OBLETH_SERVING_PORT="${{OBLETH_SERVING_PORT:-{port_base}}}"',
        ]
    )


DRAIN_SECS_DEFAULT = 10

# Python is only the exec shim: block SIGTERM (a blocked signal stays blocked across exec, and a
# handler the server installs does not unblock it), give SIGINT back its default (bash starts
# background commands with SIGINT ignored), then become the server.
_SHIM = (
    "import os, signal, sys; "
    "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGUSR1}); "
    "signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execvp(sys.argv[1], sys.argv[1:])"
)


# Reports Slurm's warning signal to obleth: POST $OBLETH_SIGNAL_URL with the replica's key (from
# the environment, never on a command line), three tries. Prints the outcome, never the key.
_NOTIFY = (
    "import os, time, urllib.request as u\n"
    "url = os.environ['OBLETH_SIGNAL_URL']\n"
    "key = os.environ.get('OBLETH_REPLICA_API_KEY', '')\n"
    "for attempt in range(3):\n"
    "    try:\n"
    "        req = u.Request(url, data=b'{}', method='POST', headers={\n"
    "            'Authorization': 'Bearer ' + key, 'Content-Type': 'application/json'})\n"
    "        with u.urlopen(req, timeout=10) as answer:\n"
    "            print('obleth: warning signal reported, HTTP', answer.status, flush=True)\n"
    "            break\n"
    "    except Exception as exc:\n"
    "        print('obleth: warning signal not reported:', type(exc).__name__, flush=True)\n"
    "        time.sleep(2)\n"
)


def drain_block() -> str:
    """Bash lines that define ``obleth_serve``: run a server that drains on Slurm's SIGTERM.

    Slurm sends SIGTERM to every process of a job on ``scancel``, on preemption and at the time
    limit, and SIGKILL after ``KillWait`` (or the preemption ``GraceTime``). obleth stops routing to
    a replica as soon as its job leaves RUNNING, but the requests the server is answering at that
    moment would die with it. ``obleth_serve <server> <args...>`` (in place of ``exec``) runs the
    server with SIGTERM blocked, so only the batch script sees it; the script then lets the server
    finish what it has for up to ``OBLETH_DRAIN_SECS`` seconds (default
    :data:`DRAIN_SECS_DEFAULT`; 0 stops at once) and stops it with SIGINT. A server that exits on
    its own ends the job as before. Without ``python3`` on the node, the server runs as with
    ``exec``, and the job log says so.

    Slurm's warning signal (``--signal=B:USR1@secs``, sent before the job's end and, where
    ``PreemptParameters=send_user_signal``, at preemption) is reported to obleth at
    ``$OBLETH_SIGNAL_URL`` with the replica's key, so a successor starts while this one serves.
    """
    return "\n".join(
        [
            "# obleth: `obleth_serve <server> <args>` drains on Slurm's SIGTERM (scancel,",
            "# preemption, time limit): the server keeps answering what it has for",
            "# $OBLETH_DRAIN_SECS s, then gets SIGINT.",
            f'OBLETH_DRAIN_SECS="${{OBLETH_DRAIN_SECS:-{DRAIN_SECS_DEFAULT}}}"',
            'case "$OBLETH_DRAIN_SECS" in',
            "  ''|*[!0-9]*)",
            '    echo "obleth: OBLETH_DRAIN_SECS must be whole seconds (got'
            + "'$OBLETH_DRAIN_SECS'"
            + f'); using {DRAIN_SECS_DEFAULT}" >&2',
            f"    OBLETH_DRAIN_SECS={DRAIN_SECS_DEFAULT} ;;",
            "esac",
            "obleth_serve() {",
            "  if ! command -v python3 >/dev/null 2>&1; then",
            '    echo "obleth: no python3 on $(hostname): the server stops at once on SIGTERM" >&2',
            '    exec "$@"',
            "  fi",
            f'  python3 -c {shell_quote(_SHIM)} "$@" &',
            "  obleth_server_pid=$!",
            "  trap obleth_drain TERM",
            "  trap obleth_warned USR1",
            "  local rc=0",
            "  while :; do",
            '    rc=0; wait "$obleth_server_pid" || rc=$?',
            '    kill -0 "$obleth_server_pid" 2>/dev/null || break',
            "  done",
            '  return "$rc"',
            "}",
            "obleth_drain() {",
            "  trap '' TERM",
            '  echo "obleth: SIGTERM: the server drains for up to ${OBLETH_DRAIN_SECS} s" >&2',
            "  local waited=0",
            '  while [ "$waited" -lt "$OBLETH_DRAIN_SECS" ]; do',
            '    kill -0 "$obleth_server_pid" 2>/dev/null || return 0',
            "    sleep 1; waited=$((waited + 1))",
            "  done",
            '  kill -INT "$obleth_server_pid" 2>/dev/null || true',
            "}",
            "obleth_warned() {",
            '  echo "obleth: Slurm\'s warning signal (its end or a preemption is near)" >&2',
            '  if [ -n "${OBLETH_SIGNAL_URL:-}" ] && command -v python3 >/dev/null 2>&1; then',
            f"    python3 -c {shell_quote(_NOTIFY)} >&2 &",
            "  fi",
            "}",
        ]
    )


def _with_newline(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"


def _assemble(*, script_body: str, image: str, preamble: str, launch_command: str) -> str:
    body = _lf(script_body)
    if body.strip():
        stripped = body.lstrip()
        if stripped.startswith("#!"):
            # Verbatim; only whitespace before the shebang goes (the kernel needs it first).
            return _with_newline(stripped)
        return _with_newline(f"{SHEBANG}\n{_STRICT}\n{body}")
    command = _lf(launch_command).strip()
    if not command:
        raise ValueError(
            "launch_command is empty and there is no script_body; "
            "give the spec a launch command or a script"
        )
    lines = [SHEBANG, _STRICT]
    pre = _lf(preamble).strip()
    if pre:
        lines.append(pre)
    img = _lf(image).strip()
    lines.append(f"apptainer exec --nv {shell_quote(img)} {command}" if img else command)
    return "\n".join(lines) + "\n"


def render_batch_script(
    *,
    script_body: str,
    image: str,
    preamble: str,
    launch_command: str,
    port_base: int,
    port_span: int,
) -> str:
    """The full job script: recipe script or assembled exec line, port block after the shebang.

    Raises ``ValueError`` naming the field when neither ``script_body`` nor ``launch_command``
    is given, or when the port window does not fit in 1..65535.
    """
    block = port_window_block(port_base, port_span) + "\n" + drain_block()
    script = _assemble(
        script_body=script_body, image=image, preamble=preamble, launch_command=launch_command
    )
    first, sep, rest = script.partition("\n")
    if first.startswith("#!"):
        return f"{first}\n{block}\n{rest}" if sep else f"{first}\n{block}\n"
    return f"{block}\n{script}"
