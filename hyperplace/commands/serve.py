"""``hyperplace serve``: the solver service over HTTP (FastAPI + uvicorn, extra ``serve``)."""

from __future__ import annotations

import math
import socket
import sys
from pathlib import Path
from typing import Annotated

import typer

from hyperplace.errors import InputError


def serve_command(
    host: Annotated[str, typer.Option(help="address to bind (loopback by default)")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="port (0: any free port)")] = 8080,
    workers: Annotated[int, typer.Option(min=0, help="solver worker processes (0: one per CPU)")] = 0,
    max_budget: Annotated[float, typer.Option(help="largest budgetS honoured, seconds")] = 60.0,
    default_budget: Annotated[float, typer.Option(help="budget of a request naming none")] = 10.0,
    queue_limit: Annotated[int, typer.Option(min=1, help="waiting requests before 429")] = 64,
    token_file: Annotated[Path | None, typer.Option(
        help="file holding the Bearer token every endpoint but /healthz requires")] = None,
    insecure: Annotated[bool, typer.Option(
        help="allow a non-loopback address without a token")] = False,
    db: Annotated[str | None, typer.Option(
        help="SQLite file for stored clusters, runs and plans (':memory:' keeps nothing); "
             "default $XDG_STATE_HOME/hyperplace/service.sqlite")] = None,
    max_body_mb: Annotated[float, typer.Option(help="larger request bodies get 413")] = 32.0,
    half_life: Annotated[float, typer.Option(
        "--half-life", help="hours for a stored cluster's per-queue usage history to count "
        "half (Slurm's PriorityDecayHalfLife, default 7 days); 0 keeps no history")] = 168.0,
    shutdown_grace: Annotated[float, typer.Option(
        help="on SIGTERM, seconds running solves may go on before they are stopped (queued "
             "requests get 503 at once)")] = 10.0,
    run_retention: Annotated[float, typer.Option(
        help="hours a finished run is kept (0 keeps them all)")] = 168.0,
    log_level: Annotated[str, typer.Option(help="uvicorn log level")] = "warning",
) -> None:
    """Serve placement, layer split, checks, runs, stored clusters and scheduler extenders."""
    import os

    from hyperplace.service.config import ServiceConfig, default_db_path, is_loopback, read_token

    for name, value in (("--max-budget", max_budget), ("--default-budget", default_budget),
                        ("--max-body-mb", max_body_mb)):
        if not math.isfinite(value) or value <= 0:
            raise InputError(f"must be a positive, finite number, got {value}", path=name)
    if not math.isfinite(half_life) or half_life < 0:
        raise InputError(f"must be a finite number of hours, 0 or more, got {half_life}",
                         path="--half-life")
    token = read_token(token_file) if token_file is not None else None
    if not is_loopback(host) and token is None and not insecure:
        raise InputError(f"refusing to serve on non-loopback address {host!r} without "
                         "--token-file (or pass --insecure)", path="--host")
    try:
        import uvicorn  # noqa: F401

        from hyperplace.service.app import create_app, run_server
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise InputError(f"the service needs the 'serve' extra (pip install "
                         f"'hyperplace[serve]'): {exc}") from None
    config = ServiceConfig(
        workers=workers or max(1, os.cpu_count() or 1), queue_limit=queue_limit,
        max_budget_s=max_budget, default_budget_s=min(default_budget, max_budget), token=token,
        db_path=db or default_db_path(), max_body_bytes=int(max_body_mb * 1024 * 1024),
        test_hooks=os.environ.get("HYPERPLACE_SERVICE_TEST_HOOKS") == "1",
        half_life_s=half_life * 3600.0 or None, shutdown_grace_s=shutdown_grace,
        run_retention_s=run_retention * 3600.0 if math.isfinite(run_retention) else -1.0)
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    # IPPROTO_TCP spelled out: asyncio sets TCP_NODELAY on accepted connections only when the
    # listening socket says TCP (with proto 0, every answer waited ~40 ms for a delayed ACK)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as exc:
        raise InputError(f"cannot bind {host}:{port}: {exc.strerror or exc}", path="--port") from None
    sock.listen(2048)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    app = create_app(config)  # takes the database's lock: a second server stops here
    print(f"hyperplace serve: listening on http://{shown}:{bound} ({config.workers} workers, "
          f"max budget {config.max_budget_s:g} s, token {'on' if token else 'off'}, "
          f"db {config.db_path})", file=sys.stderr, flush=True)
    run_server(app, sock, log_level)


def register(app: typer.Typer) -> None:
    app.command("serve")(serve_command)
