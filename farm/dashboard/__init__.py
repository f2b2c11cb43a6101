"""The comparison dashboard (Streamlit, `farm dashboard`) and the static report (`farm report`).

data.py computes every comparison from the warehouse with no Streamlit import, so the report
and the tests use it directly; sql.py is the read-only console; app.py and views/ are the
Streamlit scripts. Streamlit and matplotlib come with the `dashboard` extra
(`pip install 'farm[dashboard]'`); data.py, sql.py and loader.py need neither.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

from farm.errors import UserError

RESULTS_ENV = "FARM_RESULTS"  # `farm dashboard --results DIR` hands the folder to the app in this variable
APP = Path(__file__).parent / "app.py"


def require_dashboard_extra(command: str, *modules: str) -> None:
    """One line (a UserError) instead of an ImportError's traceback when `command` needs a
    module of the `dashboard` extra that is not installed."""
    missing = [name for name in modules if not _installed(name)]
    if missing:
        raise UserError(f"{command} needs {' and '.join(missing)}, part of farm's dashboard extra: "
                        "pip install 'farm[dashboard]' (bin/farm installs it by itself)")


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or a broken install
        return False


def serve(results: Path, address: str, port: int, announce: Callable[[], Any] = lambda: None) -> int:
    """Serve the dashboard on address:port until SIGTERM, SIGINT (Ctrl-C), SIGHUP or SIGQUIT.

    Streamlit runs in this process, as `streamlit run` would run it, not in a child: whatever
    ends `farm dashboard` (a signal, SIGKILL included, or its terminal closing) ends the server
    with it, and nothing is left listening. It listens once `warm_up` is done, then `announce()`
    (the command prints its address), so that the first page is as quick as the later ones.
    Returns the exit status (0 after a signal).
    """
    require_dashboard_extra("farm dashboard", "streamlit")
    import click
    from streamlit.web import cli as streamlit_cli

    os.environ[RESULTS_ENV] = str(results)
    try:
        warm_up()
    except KeyboardInterrupt:  # Ctrl-C while it loads: nothing is listening yet
        return 0
    announce()
    # Streamlit stops gracefully on SIGTERM, SIGINT and SIGQUIT once it serves; a closed terminal
    # (SIGHUP) stops it the same way, unless SIGHUP is ignored (nohup). Before Streamlit's handler
    # is in place, SIGTERM's default ends the process, which is all there is to end.
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        signal.signal(signal.SIGHUP, lambda *_: signal.raise_signal(signal.SIGTERM))
    flags = {"server.address": address, "server.port": str(port), "server.headless": "true",
             "browser.gatherUsageStats": "false", "server.fileWatcherType": "none",
             "global.developmentMode": "false", "theme.base": "light", "client.toolbarMode": "viewer"}
    arguments = ["run", str(APP), *(part for name, value in flags.items() for part in (f"--{name}", value))]
    try:
        streamlit_cli.main.main(arguments, prog_name="streamlit", standalone_mode=False)
    except (KeyboardInterrupt, click.Abort):  # Ctrl-C before Streamlit's own handler was in place
        return 0
    return 0


def warm_up() -> None:
    """Before the server listens: import what the pages import, load the warehouse's snapshot into
    the cache the pages read (`common.snapshot`), pick the Cell page's first cell and count its
    roofline, so that the first page a user opens does not pay for them (the example's first
    Overview took 5.3 s, then 0.8 s, on a 2-core machine). Nothing here may stop the server: a
    failure is left for the page to show."""
    for name in ("streamlit.runtime.scriptrunner_utils.script_run_context", "streamlit.runtime.caching.cache_data_api"):
        logging.getLogger(name).setLevel(logging.ERROR)  # "missing ScriptRunContext": true, and expected here
    try:
        import altair  # noqa: F401
        import duckdb  # noqa: F401
        import onnx  # noqa: F401

        import farm.layers.flops
        import farm.models  # noqa: F401
        from farm.dashboard import common, layers, roofline, summary, telemetry  # noqa: F401

        snap = common.snapshot()
        first = layers.default_cell(snap)  # the Cell page's first cell (remembered per snapshot) and its roofline
        if first is not None:
            roofline.cell_roofline(snap, [first])
    except Exception:  # noqa: BLE001 (the page that needs it reports it, with its context)
        pass

