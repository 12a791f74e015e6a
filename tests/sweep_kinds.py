"""A sweep item kind for testing the runner itself: items that sleep, crash or hang.

Importing this module registers the kind ``sleep`` (grid keys ``sleeps``, ``exit_codes``,
``pid_dir``). An item sleeps ``sleep`` seconds and reports ``optimal`` with objective
``sleep``; with ``exit_code`` its process exits with that code instead; with ``pid_dir`` it
writes its pid to ``<pid_dir>/<id>.pid`` first and stops sleeping once
``<pid_dir>/<id>.release`` exists.
"""

import os
import time
from pathlib import Path

from milp_parallel.sweep import OPTIMAL, register_item_kind
from milp_parallel.units import parse_seconds


def run_sleep_item(item):
    p = dict(item.params)
    seconds = parse_seconds(p["sleep"])
    release = None
    if p.get("pid_dir"):
        Path(p["pid_dir"], f"{item.id}.pid").write_text(str(os.getpid()))
        release = Path(p["pid_dir"], f"{item.id}.release")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not (release and release.exists()):
        time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
    if p.get("exit_code") is not None:
        os._exit(int(p["exit_code"]))
    return {"status": OPTIMAL, "objective": seconds, "bound": seconds, "gap": 0.0,
            "solve_seconds": seconds}


SLEEP = register_item_kind("sleep", run_sleep_item,
                           keys={"sleeps": "sleep", "exit_codes": "exit_code",
                                 "pid_dir": "pid_dir"})
