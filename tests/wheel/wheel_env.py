"""The package as users get it: a wheel, installed (not editable) into a fresh virtual
environment, used from outside the source tree.

    python -m tests.wheel.wheel_env            # build, install, run the smoke check
    python -m tests.wheel.wheel_env --install  # build and install only

``make test`` runs the smoke check first (so CI proves the wheel works), and the standalone
cluster test runs its driver and executors on this environment's interpreter, as a user's
executors would. The environment lives in ``.venv-wheel/`` and is rebuilt whenever the
sources it was built from change.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10, which the project supports: the same parser, from PyPI
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]
ENV = ROOT / ".venv-wheel"
STAMP = ENV / ".built-from"
SMOKE = Path(__file__).with_name("smoke.py")


def source_folders() -> tuple[str, ...]:
    """The folders the wheel is built from, read from the build's own mapping: the top
    package's folder and every folder ``[tool.setuptools.package-dir]`` maps into it. A
    folder added there is digested without anyone remembering this file (core/ and split/
    were missing from a hand-kept list, so changes there reused a stale environment)."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapped = setuptools.get("package-dir", {})
    tops = {name.split(".")[0] for name in setuptools["packages"]}
    return tuple(sorted(tops | {mapped[name] for name in mapped}))


#: The folders the wheel is built from (pyproject.toml maps them into one namespace).
SOURCE_FOLDERS = source_folders()


def python() -> Path:
    return ENV / "bin" / "python"


def sources_digest() -> str:
    """A digest of everything that goes into the wheel."""
    digest = hashlib.sha256()
    files = [ROOT / "pyproject.toml", ROOT / "README.md"]
    files += sorted(p for folder in SOURCE_FOLDERS for p in (ROOT / folder).rglob("*.py"))
    for path in files:
        digest.update(str(path.relative_to(ROOT)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def ensure_installed() -> Path:
    """Build the wheel and install it with its ``demo`` extra into a fresh ``.venv-wheel``,
    unless that environment was built from the current sources. Returns its interpreter."""
    digest = sources_digest()
    if python().exists() and STAMP.exists() and STAMP.read_text() == digest:
        return python()
    with tempfile.TemporaryDirectory() as dist:
        shutil.rmtree(ENV, ignore_errors=True)
        _run([sys.executable, "-m", "venv", str(ENV)])
        # The new environment's pip builds the wheel: the interpreter running this may have none.
        _run([str(python()), "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", dist, str(ROOT)])
        [wheel] = Path(dist).glob("backlog_source-*.whl")
        _run([str(python()), "-m", "pip", "install", "--quiet", f"{wheel}[demo]"])
    STAMP.write_text(digest)
    return python()


def smoke() -> None:
    """Run the smoke check with the installed package, from a directory outside the tree."""
    interpreter = ensure_installed()
    with tempfile.TemporaryDirectory() as outside:
        script = Path(outside) / SMOKE.name
        shutil.copy(SMOKE, script)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env["PATH"] = f"{interpreter.parent}{os.pathsep}{env.get('PATH', '')}"
        _run([str(interpreter), str(script)], cwd=outside, env=env)


def _run(command: list[str], **kwargs) -> None:
    print("+", " ".join(command), flush=True)
    subprocess.run(command, check=True, **kwargs)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--install", action="store_true", help="build and install only")
    args = parser.parse_args()
    ensure_installed() if args.install else smoke()
