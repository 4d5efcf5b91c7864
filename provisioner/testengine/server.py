#!/usr/bin/env python3
"""obleth test engine: a small OpenAI-compatible HTTP server that is NOT a model.

It answers the routes an inference server answers (health, models, chat completions,
completions, embeddings) with deterministic text and vectors, so the provisioner, the demo
recipe, the tests and the benchmark can run a replica anywhere, with no GPU, no model file and
no package: it uses the Python 3.11 standard library only.

Run it as ``python3 server.py --port 8000`` (or with ``OBLETH_SERVING_PORT`` set), or as
``python -m provisioner.testengine``. ``--help`` lists the fault switches (slow start, a loading
phase, dead health, hung inference, exit after a delay, added latency) and the multi-port mode.
Every flag has an environment variable (``OBLETH_TESTENGINE_<FLAG>``); a flag wins over its
variable.

API key: with ``--api-key KEY`` (or, when no flag is given, the replica key the provisioner puts
in the job's environment as ``OBLETH_REPLICA_API_KEY``), every ``/v1/*`` route except
``/v1/health`` answers 401 unless the request carries ``Authorization: Bearer KEY``, as vLLM does;
``/health`` stays open. This is what lets the provisioner prove a port is its own replica.

The code: this file is the entry point (the process: signals, listening, ``main``); next to it
``engine_config.py`` (constants, flags and environment), ``engine_openai.py`` (request bodies,
the deterministic answers), ``engine_http.py`` (HTTP/1.x on asyncio streams) and
``engine_core.py`` (:class:`Engine`: switches, routes, connections). They import one another
as ``provisioner.testengine.<module>`` inside the project and as plain modules when this file
runs as a script; ``provisioner.testengine.install_copy`` copies them all. Every name is
importable from here.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import sys
from collections.abc import Mapping, Sequence

if __package__:  # imported as provisioner.testengine.server
    from .engine_config import (
        DEFAULT_EMBEDDING_DIM,
        ENGINE_NAME,
        ENV_PREFIX,
        EXIT_AFTER_CODE,
        FALSE_WORDS,
        HEALTH_PATHS,
        IDLE_TIMEOUT_SECS,
        INFERENCE_PATHS,
        MAX_BODY_BYTES,
        MAX_EMBEDDING_DIM,
        MAX_HEAD_BYTES,
        MAX_TOKENS_LIMIT,
        PORT_ENV,
        REPLICA_KEY_ENV,
        TRUE_WORDS,
        WORDS,
        ConfigError,
        EngineConfig,
        parse_config,
    )
    from .engine_core import Engine, log
    from .engine_http import (
        ProtocolError,
        Reply,
        Request,
        json_reply,
        read_request,
    )
    from .engine_openai import (
        CONTROL_KEYS,
        BadRequest,
        ChatRequest,
        CompletionRequest,
        EmbeddingRequest,
        JsonObject,
        OpenAIAnswers,
        count_words,
        embed,
        error_body,
        make_tokens,
        parse_chat,
        parse_completion,
        parse_control,
        parse_embeddings,
    )
else:  # run as a script (python3 server.py): the modules sit next to this file
    _HERE = os.path.dirname(os.path.abspath(__file__))
    if _HERE not in sys.path:  # python3 -P / -I or PYTHONSAFEPATH leave it out
        sys.path.insert(0, _HERE)
    from engine_config import (  # type: ignore[import-not-found,no-redef]
        DEFAULT_EMBEDDING_DIM,
        ENGINE_NAME,
        ENV_PREFIX,
        EXIT_AFTER_CODE,
        FALSE_WORDS,
        HEALTH_PATHS,
        IDLE_TIMEOUT_SECS,
        INFERENCE_PATHS,
        MAX_BODY_BYTES,
        MAX_EMBEDDING_DIM,
        MAX_HEAD_BYTES,
        MAX_TOKENS_LIMIT,
        PORT_ENV,
        REPLICA_KEY_ENV,
        TRUE_WORDS,
        WORDS,
        ConfigError,
        EngineConfig,
        parse_config,
    )
    from engine_core import Engine, log  # type: ignore[import-not-found,no-redef]
    from engine_http import (  # type: ignore[import-not-found,no-redef]
        ProtocolError,
        Reply,
        Request,
        json_reply,
        read_request,
    )
    from engine_openai import (  # type: ignore[import-not-found,no-redef]
        CONTROL_KEYS,
        BadRequest,
        ChatRequest,
        CompletionRequest,
        EmbeddingRequest,
        JsonObject,
        OpenAIAnswers,
        count_words,
        embed,
        error_body,
        make_tokens,
        parse_chat,
        parse_completion,
        parse_control,
        parse_embeddings,
    )

__all__ = [
    "BadRequest",
    "CONTROL_KEYS",
    "ChatRequest",
    "CompletionRequest",
    "ConfigError",
    "DEFAULT_EMBEDDING_DIM",
    "ENGINE_NAME",
    "ENV_PREFIX",
    "EXIT_AFTER_CODE",
    "EmbeddingRequest",
    "Engine",
    "EngineConfig",
    "FALSE_WORDS",
    "HEALTH_PATHS",
    "IDLE_TIMEOUT_SECS",
    "INFERENCE_PATHS",
    "JsonObject",
    "MAX_BODY_BYTES",
    "MAX_EMBEDDING_DIM",
    "MAX_HEAD_BYTES",
    "MAX_TOKENS_LIMIT",
    "OpenAIAnswers",
    "PORT_ENV",
    "ProtocolError",
    "REPLICA_KEY_ENV",
    "Reply",
    "Request",
    "TRUE_WORDS",
    "WORDS",
    "count_words",
    "embed",
    "error_body",
    "json_reply",
    "log",
    "main",
    "make_tokens",
    "parse_chat",
    "parse_completion",
    "parse_config",
    "parse_control",
    "parse_embeddings",
    "read_request",
    "serve",
]


def _raise_fd_limit(needed: int) -> None:
    try:
        import resource
    except ImportError:  # not on Unix; nothing to raise
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(hard, max(needed, soft))
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        if target < needed:
            raise ConfigError(
                f"{needed} open files are needed for the ports but the limit is {target}; "
                "raise it (ulimit -n) or use fewer ports"
            )


async def serve(config: EngineConfig) -> int:
    """Run the engine until SIGTERM, --exit-after or /_control exit; return the exit code."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    engine = Engine(config, stop)
    for sig, name in ((signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "SIGINT")):
        loop.add_signal_handler(sig, engine.request_exit, 0, f"{name} received")
    if config.exit_after is not None:
        loop.call_later(
            config.exit_after,
            engine.request_exit,
            EXIT_AFTER_CODE,
            f"--exit-after {config.exit_after:g}s reached",
        )
    if config.slow_start > 0:
        log(
            f"obleth test engine (not a model) slow start: not listening for {config.slow_start:g}s"
        )
        try:
            await asyncio.wait_for(stop.wait(), config.slow_start)
            return engine.exit_code
        except TimeoutError:
            pass

    servers: list[asyncio.Server] = []
    try:
        for port in range(config.port, config.last_port + 1):
            try:
                server = await asyncio.start_server(
                    functools.partial(engine.handle_connection, port),
                    config.host,
                    port,
                    backlog=128 if config.port_count == 1 else 32,
                    limit=MAX_HEAD_BYTES,
                )
            except OSError as exc:
                log(f"obleth test engine: cannot listen on {config.host}:{port}: {exc}")
                return 1
            servers.append(server)
        engine.start_loading(config.loading)
        where = (
            f"{config.host}:{config.port}"
            if config.port_count == 1
            else f"{config.host}:{config.port}-{config.last_port} ({config.port_count} ports)"
        )
        log(
            f"obleth test engine (not a model) listening on {where} model={config.model}"
            + (f" loading={config.loading:g}s" if config.loading > 0 else "")
        )
        await stop.wait()
        return engine.exit_code
    finally:
        for server in servers:
            server.close()


def main(argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None) -> int:
    """Command-line entry point; returns the process exit code."""
    try:
        config = parse_config(sys.argv[1:] if argv is None else argv, environ or os.environ)
        if config.port_count > 1:
            _raise_fd_limit(config.port_count + 256)
    except ConfigError as exc:
        log(f"obleth test engine: {exc}")
        return 2
    pid_written = False
    if config.pid_file:
        try:
            with open(config.pid_file, "w", encoding="ascii") as handle:
                handle.write(f"{os.getpid()}\n")
            pid_written = True
        except OSError as exc:
            log(f"obleth test engine: cannot write --pid-file {config.pid_file}: {exc}")
            return 2
    try:
        return asyncio.run(serve(config))
    finally:
        if pid_written and config.pid_file:
            with contextlib.suppress(OSError):
                os.unlink(config.pid_file)


if __name__ == "__main__":
    raise SystemExit(main())
