"""The suite's xdist groups (tests/conftest.py) name files that exist, each in one group: a
renamed or deleted file must not leave a group silently lighter than it was balanced to be."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import GROUPS, xdist_group

ROOT = Path(__file__).resolve().parents[2]


def test_every_grouped_file_exists_and_is_in_one_group():
    named = [path for files in GROUPS.values() for path in files]
    assert [path for path in named if not (ROOT / path).is_file()] == []
    assert len(named) == len(set(named))


def test_a_file_goes_to_its_group_the_unit_suite_to_mixed_the_rest_to_working():
    assert xdist_group("tests/reliability/test_sasl.py") == "waiting"
    assert xdist_group("tests/reliability/test_crashes.py") == "mixed"
    assert xdist_group("tests/unit/enumerator/test_enumerator.py") == "mixed"
    assert xdist_group("tests/integration/test_demo.py") == "working"


def test_loadgroup_schedules_a_groups_tests_on_one_worker():
    """What make test relies on, run as it runs: on pytest 9.2 pytest-xdist silently ignored the
    groups (tests/conftest.py), and every test went to any worker."""
    import re
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--dist",
                             "loadgroup", "-v", "tests/unit/core/test_buckets.py"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    ran = re.findall(r"^\[(gw\d+)\] .*?PASSED (.+?)\s*$", result.stdout, re.M)
    assert len(ran) >= 2 and all(test.endswith("@mixed") for _, test in ran), ran
    assert len({worker for worker, _ in ran}) == 1, ran
