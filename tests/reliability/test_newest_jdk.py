"""The in-place switch on the newest JDK on this machine that runs Spark.

The switch writes the private final field ``ProcessingTimeExecutor.intervalMs`` by
reflection. JDK 26 warns about such writes and a later JDK will refuse them unless the JVM
allows it (JEP 500); where the write is refused the policy falls back to restarts, with a
log line naming the JVM flag (unit-tested in tests/unit/backlog_source/mode_switch/test_switchers.py
and test_policy.py).
This runs a real query on the newest JDK installed and checks that in place still works.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.helpers import make_topic

pytestmark = pytest.mark.integration

JOB = Path(__file__).with_name("jdk_job.py")
JVM_ROOT = Path("/usr/lib/jvm")


def newest_jdk() -> tuple[int, Path]:
    """The highest-versioned JDK under /usr/lib/jvm (or the one running Spark now)."""
    found = []
    for home in JVM_ROOT.glob("*") if JVM_ROOT.is_dir() else []:
        release = home / "release"
        if (home / "bin" / "java").exists() and release.exists():
            match = re.search(r'JAVA_VERSION="(\d+)', release.read_text())
            if match:
                found.append((int(match.group(1)), home))
    if not found:
        pytest.fail(f"no JDK with a release file under {JVM_ROOT}; this check needs one to run on")
    return max(found)


def test_in_place_switching_works_on_the_newest_jdk(broker, topic_name, tmp_path):
    version, home = newest_jdk()
    make_topic(broker, topic_name, 2, per_partition=2_500)
    env = {**os.environ, "JAVA_HOME": str(home)}
    result = subprocess.run([sys.executable, str(JOB), broker.bootstrap_servers, topic_name, str(tmp_path)],
                            capture_output=True, text=True, timeout=400, env=env, cwd=JOB.parents[2])
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])
    report = json.loads(result.stdout.split("RESULT: ", 1)[1].splitlines()[0])
    assert int(report["java_version"].split(".")[0]) == version, report
    assert report["switch_method"] == "in-place" and report["transition"] == ["high-throughput", "low-latency"]
    assert report["interval_ms"] == 700 and report["rows"] == 5_000
