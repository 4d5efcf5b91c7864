"""The test engine's constants and its configuration: the command-line flags, their
``OBLETH_TESTENGINE_<FLAG>`` environment variables (a flag wins) and :class:`EngineConfig`,
what :func:`parse_config` makes of them.

Part of the test engine (``server.py``): standard library only, importing no other module."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

ENGINE_NAME: Final = "obleth-test-engine"
ENV_PREFIX: Final = "OBLETH_TESTENGINE_"
PORT_ENV: Final = "OBLETH_SERVING_PORT"
# The per-replica secret the provisioner gives every job (used when --api-key is not given).
REPLICA_KEY_ENV: Final = "OBLETH_REPLICA_API_KEY"
# The text every completion is made of, one word per token, repeated as often as asked.
WORDS: Final = ("this", "is", "the", "obleth", "test", "engine,", "not", "a", "model")
DEFAULT_EMBEDDING_DIM: Final = 8
MAX_TOKENS_LIMIT: Final = 65536
MAX_EMBEDDING_DIM: Final = 65536
MAX_BODY_BYTES: Final = 16 * 1024 * 1024
MAX_HEAD_BYTES: Final = 64 * 1024
IDLE_TIMEOUT_SECS: Final = 300.0
EXIT_AFTER_CODE: Final = 3
INFERENCE_PATHS: Final = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/embeddings"})
HEALTH_PATHS: Final = frozenset({"/health", "/v1/health"})
TRUE_WORDS: Final = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS: Final = frozenset({"0", "false", "no", "off", ""})


class ConfigError(Exception):
    """A flag or environment variable is missing or malformed; the message names it."""


@dataclass(frozen=True)
class EngineConfig:
    """Everything the engine was started with (flags over environment over defaults)."""

    host: str
    port: int
    port_count: int
    model: str
    embedding_dim: int = DEFAULT_EMBEDDING_DIM
    slow_start: float = 0.0
    loading: float = 0.0
    loading_status: int = 200
    dead_health: bool = False
    hang_inference: bool = False
    exit_after: float | None = None
    latency_ms: int = 0
    control: bool = False
    pid_file: str | None = None
    quiet: bool = False
    api_key: str = field(default="", repr=False)  # "" = no key asked

    @property
    def last_port(self) -> int:
        return self.port + self.port_count - 1


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="obleth-test-engine",
        description=(
            "obleth test engine: an OpenAI-compatible server for tests and demos. It is NOT a "
            "model; it answers with fixed text and hash-derived vectors. Each flag can also be "
            f"set with an environment variable {ENV_PREFIX}<FLAG>; the flag wins."
        ),
    )
    bool_action = argparse.BooleanOptionalAction
    parser.add_argument("--host", help="address to bind (env OBLETH_TESTENGINE_HOST, 0.0.0.0)")
    parser.add_argument("--port", type=int, help=f"port to listen on (or env {PORT_ENV})")
    parser.add_argument("--model", help="model id to report (env ..._MODEL, test-engine)")
    parser.add_argument("--embedding-dim", type=int, help="embedding vector size (default 8)")
    parser.add_argument(
        "--ports-from", type=int, help="multi-port mode: first of N consecutive ports"
    )
    parser.add_argument("--ports-count", type=int, help="multi-port mode: how many ports")
    parser.add_argument("--slow-start", type=float, metavar="SECS", help="listen only after SECS")
    parser.add_argument(
        "--loading",
        type=float,
        metavar="SECS",
        help="for SECS after listening, /health says loading and inference answers 503",
    )
    parser.add_argument(
        "--loading-status",
        type=int,
        choices=(200, 503),
        help="/health status while loading: 200 {'status':'loading'} or 503 like llama.cpp",
    )
    parser.add_argument("--dead-health", action=bool_action, help="/health always answers 500")
    parser.add_argument(
        "--hang-inference",
        action=bool_action,
        help="inference requests never answer while /health and /v1/models do",
    )
    parser.add_argument(
        "--exit-after", type=float, metavar="SECS", help=f"exit with code {EXIT_AFTER_CODE}"
    )
    parser.add_argument("--latency-ms", type=int, metavar="N", help="delay every answer by N ms")
    parser.add_argument(
        "--control", action=bool_action, help="accept POST /_control to flip fault switches"
    )
    parser.add_argument("--pid-file", help="write the process id to this file")
    parser.add_argument("--quiet", action=bool_action, help="no per-request log lines")
    parser.add_argument(
        "--api-key",
        metavar="KEY",
        help=(
            "answer /v1/* only to 'Authorization: Bearer KEY' (401 otherwise; /health stays "
            f"open). Default: ${REPLICA_KEY_ENV}, then {ENV_PREFIX}API_KEY; empty: no key"
        ),
    )
    return parser


def _env_str(environ: Mapping[str, str], name: str) -> str | None:
    value = environ.get(name)
    if value is None or value.strip() == "":
        return None
    return value.strip()


def _env_int(environ: Mapping[str, str], name: str) -> int | None:
    value = _env_str(environ, name)
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"{name}={value!r} is not a whole number; set it to e.g. 8000") from None


def _env_float(environ: Mapping[str, str], name: str) -> float | None:
    value = _env_str(environ, name)
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        raise ConfigError(f"{name}={value!r} is not a number of seconds; set e.g. 5") from None


def _env_bool(environ: Mapping[str, str], name: str) -> bool | None:
    value = environ.get(name)
    if value is None:
        return None
    word = value.strip().lower()
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    raise ConfigError(f"{name}={value!r} is not a yes/no value; use 1 or 0")


def _pick(flag: Any, env_value: Any, default: Any) -> Any:
    if flag is not None:
        return flag
    if env_value is not None:
        return env_value
    return default


def _check_port(value: int, name: str) -> int:
    if not 1 <= value <= 65535:
        raise ConfigError(f"{name}={value} is not a TCP port; use a number from 1 to 65535")
    return value


def _check_non_negative(value: float, name: str) -> float:
    if value < 0:
        raise ConfigError(f"{name}={value} is negative; give 0 or more seconds")
    return value


def parse_config(argv: Sequence[str], environ: Mapping[str, str]) -> EngineConfig:
    """Build the configuration from command-line flags and environment variables.

    Raises ConfigError (naming the flag and variable) when something is missing or invalid;
    ``--help`` and unknown flags exit through argparse as usual.
    """
    args = _build_parser().parse_args(list(argv))
    e = ENV_PREFIX

    ports_from = _pick(args.ports_from, _env_int(environ, e + "PORTS_FROM"), None)
    ports_count = _pick(args.ports_count, _env_int(environ, e + "PORTS_COUNT"), None)
    if args.port is not None and args.ports_from is not None:
        raise ConfigError("give either --port or --ports-from/--ports-count, not both")
    if ports_from is not None or ports_count is not None:
        if ports_from is None or ports_count is None:
            raise ConfigError(
                "multi-port mode needs both --ports-from P and --ports-count N "
                f"(or {e}PORTS_FROM and {e}PORTS_COUNT)"
            )
        port = _check_port(int(ports_from), "--ports-from")
        count = int(ports_count)
        if count < 1:
            raise ConfigError(f"--ports-count={count} must be 1 or more")
        _check_port(port + count - 1, "--ports-from + --ports-count - 1")
    else:
        raw_port = _pick(args.port, _env_int(environ, PORT_ENV), None)
        if raw_port is None:
            raise ConfigError(
                f"no port given: pass --port PORT or set {PORT_ENV} "
                "(or --ports-from P --ports-count N for multi-port mode)"
            )
        port = _check_port(int(raw_port), "--port" if args.port is not None else PORT_ENV)
        count = 1

    host = _pick(args.host, _env_str(environ, e + "HOST"), "0.0.0.0")
    model = _pick(args.model, _env_str(environ, e + "MODEL"), "test-engine")
    dim = int(_pick(args.embedding_dim, _env_int(environ, e + "EMBEDDING_DIM"), 8))
    if not 1 <= dim <= MAX_EMBEDDING_DIM:
        raise ConfigError(f"--embedding-dim={dim} must be from 1 to {MAX_EMBEDDING_DIM}")
    loading_status = int(_pick(args.loading_status, _env_int(environ, e + "LOADING_STATUS"), 200))
    if loading_status not in (200, 503):
        raise ConfigError(f"{e}LOADING_STATUS={loading_status} must be 200 or 503")
    exit_after = _pick(args.exit_after, _env_float(environ, e + "EXIT_AFTER"), None)
    if exit_after is not None:
        _check_non_negative(float(exit_after), "--exit-after")
    latency_ms = int(_pick(args.latency_ms, _env_int(environ, e + "LATENCY_MS"), 0))
    if latency_ms < 0:
        raise ConfigError(f"--latency-ms={latency_ms} is negative; give 0 or more")
    api_key = str(
        _pick(
            args.api_key,
            _env_str(environ, REPLICA_KEY_ENV) or _env_str(environ, e + "API_KEY"),
            "",
        )
    ).strip()
    if api_key and not all(33 <= ord(c) < 127 for c in api_key):
        raise ConfigError("--api-key must be printable ASCII without spaces")
    return EngineConfig(
        host=str(host),
        port=port,
        port_count=count,
        model=str(model),
        embedding_dim=dim,
        slow_start=_check_non_negative(
            float(_pick(args.slow_start, _env_float(environ, e + "SLOW_START"), 0.0)),
            "--slow-start",
        ),
        loading=_check_non_negative(
            float(_pick(args.loading, _env_float(environ, e + "LOADING"), 0.0)), "--loading"
        ),
        loading_status=loading_status,
        dead_health=bool(_pick(args.dead_health, _env_bool(environ, e + "DEAD_HEALTH"), False)),
        hang_inference=bool(
            _pick(args.hang_inference, _env_bool(environ, e + "HANG_INFERENCE"), False)
        ),
        exit_after=None if exit_after is None else float(exit_after),
        latency_ms=latency_ms,
        control=bool(_pick(args.control, _env_bool(environ, e + "CONTROL"), False)),
        pid_file=_pick(args.pid_file, _env_str(environ, e + "PID_FILE"), None),
        quiet=bool(_pick(args.quiet, _env_bool(environ, e + "QUIET"), False)),
        api_key=api_key,
    )
