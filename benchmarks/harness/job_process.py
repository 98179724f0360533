"""A benchmark's job in a process of its own, in a process group of its own: its JVM and
Python workers go with it when it is killed, as when a job's machine dies.

Used by ``soak.py`` (the driver killed once per soak) and ``catch_up_budgets.py`` (kill -9
halfway through a drain).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

#: The repository root: jobs run ``python -m benchmarks.harness.<job>`` from there.
ROOT = Path(__file__).resolve().parents[2]


class JobProcess:
    """``python -m <module> <args>`` started by :meth:`start` (again after a kill), its output
    appended to ``log``."""

    def __init__(self, module: str, args: list[str], log: Path) -> None:
        self.command = [sys.executable, "-m", module, *args]
        self.log = log
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        with open(self.log, "a") as out:  # the child keeps its own copy of the descriptor
            self.process = subprocess.Popen(self.command, stdout=out, stderr=subprocess.STDOUT,
                                            start_new_session=True, cwd=ROOT)

    def running(self) -> bool:
        """True while the job runs. Raises RuntimeError with the end of its log once it has
        ended (a job that exits on its own failed the benchmark)."""
        if self.process is None or self.process.poll() is not None:
            code = None if self.process is None else self.process.returncode
            tail = self.log.read_text()[-3000:] if self.log.exists() else ""
            raise RuntimeError(f"the job ended with {code}: {tail}")
        return True

    def kill(self) -> None:
        """SIGKILL to the job's whole process group, then reap it."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(30)
