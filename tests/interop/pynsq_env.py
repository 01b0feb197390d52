"""A cached virtualenv holding the official Python client, pynsq.

pynsq installs a top-level module named ``nsq``, as this project does, so it
cannot be imported in the test process. It lives in its own virtualenv under
``<repo>/.cache/pynsq-venv`` (gitignored), created once and reused by later
runs; tests run :mod:`pynsq_script` with that virtualenv's interpreter, in
isolated mode (``-I``: no PYTHONPATH, no user site, no script directory on
``sys.path``) and with a scratch working directory, so ``import nsq`` there
can only find pynsq.

Versions are pinned; all were verified to install and import on CPython
3.11. python-snappy (0.7.x is pure Python on top of cramjam's wheels, so no C
compiler or libsnappy is needed) is what pynsq's ``snappy=True`` imports.
Changing a pin changes :data:`STAMP`, which rebuilds the cache.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

__all__ = [
    "PINS",
    "REPO_ROOT",
    "SCRIPT",
    "STAMP",
    "VENV_DIR",
    "PynsqUnavailable",
    "clean_env",
    "ensure_pynsq_venv",
    "venv_python",
]

#: Requirements installed into the virtualenv.
#: pynsq must stay first (the tests read its version from ``PINS[0]``).
PINS = ("pynsq==0.9.1", "tornado==6.6.1", "python-snappy==0.7.3", "cramjam==2.14.0")

REPO_ROOT = Path(__file__).resolve().parents[2]
CACHE_DIR = REPO_ROOT / ".cache"
VENV_DIR = CACHE_DIR / "pynsq-venv"
SCRIPT = Path(__file__).resolve().with_name("pynsq_script.py")

#: Written into the virtualenv once it is complete; a differing stamp (another
#: pin, another interpreter) makes :func:`ensure_pynsq_venv` rebuild it.
STAMP = "{} | {}.{}.{} | {}".format(" ".join(PINS), *sys.version_info[:3], sys.executable)
_STAMP_FILE = ".nsq-interop-stamp"

_CREATE_TIMEOUT = 120
_INSTALL_TIMEOUT = 600


class PynsqUnavailable(RuntimeError):
    """The virtualenv could not be created (typically: no route to PyPI)."""


def venv_python(venv: Path = VENV_DIR) -> Path:
    """The interpreter inside ``venv``."""
    if os.name == "nt":  # pragma: no cover - the suite runs on POSIX
        return venv / "Scripts" / "python.exe"
    return venv / "bin" / "python"


def clean_env() -> dict[str, str]:
    """An environment for the virtualenv's interpreter and pip.

    Only what a subprocess needs survives; anything that could point Python at
    this checkout (PYTHONPATH, PYTHONHOME, a virtualenv) is dropped.
    """
    keep = (
        "PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "SYSTEMROOT",
        # pip's own configuration (index, proxy, certificates) must survive
        "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_CERT",
        "PIP_CONFIG_FILE", "PIP_DEFAULT_TIMEOUT", "PIP_TRUSTED_HOST",
        "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
        "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE",
    )
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env["PYTHONNOUSERSITE"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _run(cmd: list[str], timeout: float, what: str) -> None:
    try:
        proc = subprocess.run(
            cmd, env=clean_env(), cwd=str(CACHE_DIR), stdin=subprocess.DEVNULL,
            capture_output=True, text=True, timeout=timeout,
        )
    except subprocess.TimeoutExpired as e:
        raise PynsqUnavailable(f"{what} timed out after {timeout}s") from e
    except OSError as e:
        raise PynsqUnavailable(f"{what} failed to start: {e}") from e
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise PynsqUnavailable(f"{what} exited {proc.returncode}:\n{tail}")


def _is_ready(venv: Path) -> bool:
    try:
        stamp = (venv / _STAMP_FILE).read_text()
    except OSError:
        return False
    return stamp == STAMP and venv_python(venv).exists()


def ensure_pynsq_venv() -> Path:
    """Return the virtualenv's interpreter, creating the virtualenv if needed.

    Safe against concurrent callers (an exclusive lock on a file next to the
    virtualenv). A half-built or stale virtualenv is removed and rebuilt.

    Raises:
        PynsqUnavailable: ``venv`` or ``pip install`` failed; the message says
            why (the tail of pip's output).
    """
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    with open(CACHE_DIR / "pynsq-venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _is_ready(VENV_DIR):
            return venv_python(VENV_DIR)
        shutil.rmtree(VENV_DIR, ignore_errors=True)
        try:
            _run([sys.executable, "-m", "venv", str(VENV_DIR)], _CREATE_TIMEOUT, "python -m venv")
            py = str(venv_python(VENV_DIR))
            _run(
                [py, "-m", "pip", "install", "--no-input", "--disable-pip-version-check", *PINS],
                _INSTALL_TIMEOUT, f"pip install {' '.join(PINS)}",
            )
            # the interpreter must find pynsq (not this checkout) under "nsq"
            _run(
                [py, "-I", "-c",
                 "import nsq, tornado, snappy, nsq.snappy_socket; "
                 "assert hasattr(nsq, 'Reader') and hasattr(nsq, 'Writer'), nsq.__file__"],
                _CREATE_TIMEOUT, "import check of pynsq",
            )
        except BaseException:
            shutil.rmtree(VENV_DIR, ignore_errors=True)
            raise
        (VENV_DIR / _STAMP_FILE).write_text(STAMP)
        return venv_python(VENV_DIR)
