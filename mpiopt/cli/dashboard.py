"""`mpiopt dashboard`: serve every study of a database as a live local web page.

Thin: check the arguments, open the database read-only (as the query commands do), bind
the server (mpiopt.reporting.dashboard) and serve until Ctrl-C. It listens on 127.0.0.1
unless --host names another address; then it warns, as anyone who reaches that address
reads every study.
"""
from __future__ import annotations

import sys

from mpiopt.cli.common import add_storage_option, storage_url
from mpiopt.errors import MpioptError

LOCAL = ("127.0.0.1", "localhost", "::1")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "dashboard", help="a live web page of every study in the database (read-only)",
        description="Serve every study of the database as a local web page that updates "
        "while studies run: the report's figures, the trials (sortable, filterable), each "
        "trial's curve and error. The database is only read. Stop with Ctrl-C.")
    add_storage_option(p)
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=_port, default=8080,
                   help="port (default 8080; 0: any free port)")
    p.set_defaults(func=cmd_dashboard)


def _port(text: str) -> int:
    import argparse

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be 0 to 65535, not {value}")
    return value


def cmd_dashboard(args) -> int:
    from mpiopt.reporting.dashboard import make_server
    from mpiopt.storage import mask_url, open_storage

    try:
        import plotly  # noqa: F401  (the figures and plotly.js)
    except ImportError:
        raise MpioptError("mpiopt dashboard needs plotly: pip install 'mpiopt[report]'") from None
    url = storage_url(args)
    storage = open_storage(url, read_only=True)
    try:
        try:
            server = make_server(storage, url, args.host, args.port)
        except OSError as exc:
            raise MpioptError(f"dashboard: cannot listen on {args.host}:{args.port}: "
                              f"{exc.strerror or exc}") from exc
        host, port = server.server_address[:2]
        shown = f"[{host}]" if ":" in host else host
        if args.host not in LOCAL:
            print(f"mpiopt: warning: the dashboard listens on {args.host}, not only on this "
                  "machine: anyone who can reach it reads every study of the database "
                  "(names, parameters, errors, host names)", file=sys.stderr, flush=True)
        _stop_on_signals()      # (before the line that says it serves: a stop may follow it)
        try:
            print(f"mpiopt dashboard: {mask_url(url)} at http://{shown}:{port}/ (read-only; "
                  "Ctrl-C stops it)", flush=True)
            server.serve_forever(poll_interval=0.5)
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
    finally:
        storage.close()
    return 0


def _stop_on_signals() -> None:
    """Ctrl-C and SIGTERM stop the server, whatever the process was started with: a parent
    that ignored or blocked them (both are inherited across exec) left a dashboard that
    `kill` could not end."""
    import signal

    def stop(signum, frame):
        raise KeyboardInterrupt

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, stop)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
