"""scripts/build-pyz installs shiv into the project venv when it is missing."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# a stand-in for the venv's python: logs each call; `-m shiv` works only once
# `-m pip install shiv` ran; the build itself stops there (no dist/ written)
STUB = """#!/usr/bin/env bash
echo "$*" >> "{log}"
case "$*" in
  "-m shiv --version") [ -e "{marker}" ] || exit 1; echo "shiv, version 0"; exit 0 ;;
  "-m pip install -q shiv") touch "{marker}"; exit 0 ;;
  "-m shiv -c"*) exit 7 ;;
esac
exit 3
"""


def test_build_pyz_installs_shiv_into_the_venv(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    log, marker = tmp_path / "calls.log", tmp_path / "shiv-installed"
    py = venv / "bin" / "python"
    py.write_text(STUB.format(log=log, marker=marker))
    py.chmod(0o755)
    r = subprocess.run(["bash", str(ROOT / "scripts" / "build-pyz")], capture_output=True, text=True,
                       env={**os.environ, "NSQ_VENV": str(venv)}, timeout=60)
    calls = log.read_text().splitlines()
    assert "shiv is not installed" not in r.stderr
    assert calls[:3] == ["-m shiv --version", "-m pip install -q shiv", calls[2]], calls
    assert calls[2].startswith("-m shiv -c nsq -o dist/nsq.pyz"), calls
    assert r.returncode == 7  # the stub's "build" result, passed through


def test_build_pyz_on_a_fresh_clone_creates_the_venv(tmp_path):
    # no venv yet: python3 -m venv makes it (the stub python3 writes the stub
    # venv python), then shiv is installed into it and the build runs
    venv = tmp_path / "venv"
    log, marker = tmp_path / "calls.log", tmp_path / "shiv-installed"
    stub = STUB.format(log=log, marker=marker)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    python3 = bindir / "python3"
    python3.write_text(f"""#!/usr/bin/env bash
echo "python3 $*" >> "{log}"
if [ "$1 $2" = "-m venv" ]; then
  mkdir -p "$3/bin"
  cat > "$3/bin/python" <<'STUB'
{stub}STUB
  chmod +x "$3/bin/python"
  exit 0
fi
exit 3
""")
    python3.chmod(0o755)
    r = subprocess.run(["bash", str(ROOT / "scripts" / "build-pyz")], capture_output=True, text=True,
                       env={**os.environ, "NSQ_VENV": str(venv), "PATH": f"{bindir}:{os.environ['PATH']}"},
                       timeout=60)
    calls = log.read_text().splitlines()
    assert "shiv is not installed" not in r.stderr, r.stderr
    assert calls[:3] == [f"python3 -m venv {venv}", "-m shiv --version", "-m pip install -q shiv"], calls
    assert calls[3].startswith("-m shiv -c nsq -o dist/nsq.pyz"), calls
    assert r.returncode == 7, r.stderr
