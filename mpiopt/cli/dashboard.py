"""`mpiopt dashboard`: serve every study of a database as a live local web page.

Thin: check the arguments, open the database read-only (as the query commands do), bind
the server (mpiopt.reporting.dashboard) and serve until Ctrl-C. A SQLite file that does not
exist yet, in a folder that does, is waited for: the page says so and shows the studies
once a job has created it, so the dashboard (or its tunnel) can start before the job. It listens on 127.0.0.1
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
    from mpiopt.storage import mask_url

    try:
        import plotly  # noqa: F401  (the figures and plotly.js)
    except ImportError:
        raise MpioptError("mpiopt dashboard needs plotly: pip install 'mpiopt[report]'") from None
    url = storage_url(args)
    storage = _opened(url)
    try:
        server = make_server(storage, url, args.host, args.port)
    except OSError as exc:
        if storage is not None:
            storage.close()
        raise MpioptError(f"dashboard: cannot listen on {args.host}:{args.port}: "
                          f"{exc.strerror or exc}") from exc
    host, port = server.server_address[:2]
    shown = f"[{host}]" if ":" in host else host
    if args.host not in LOCAL:
        print(f"mpiopt: warning: the dashboard listens on {args.host}, not only on this "
              "machine: anyone who can reach it reads every study of the database "
              "(names, parameters, errors, host names)", file=sys.stderr, flush=True)
    try:
        _stop_on_signals()      # (before the line that says it serves: a stop may follow it)
        print(f"mpiopt dashboard: {mask_url(url)} at http://{shown}:{port}/ (read-only; "
              "Ctrl-C stops it)" + ("" if storage is not None else "; waiting for the database to be "
                                    "created"), flush=True)
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        server.studies.close()     # (the storage: the one given, or the one opened since)
    return 0


def _opened(url: str):
    """The database read-only, or None for a SQLite file a job has yet to create (in a
    folder that exists: a folder that does not is a typo, refused in one line)."""
    from mpiopt.storage import StorageURL, open_storage

    path = StorageURL.parse(url).sqlite_path
    if path is not None and not path.exists():
        if not path.parent.is_dir():
            raise MpioptError(f"dashboard: the folder {path.parent.resolve()} of the results "
                              f"database does not exist ({url}): fix --storage")
        return None
    return open_storage(url, read_only=True)


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
