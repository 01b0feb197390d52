"""``import nsq.spark`` has no side effect; :func:`nsq.spark.register` picks
the Python that Spark starts for workers (no Spark needed: a stand-in
session)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import nsq.spark
from nsq.spark import _use_this_python


def test_import_leaves_the_environment_alone():
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    code = "import os, nsq.spark; print(os.environ.get('PYSPARK_PYTHON', '<unset>'))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "<unset>"


class _Context:
    def __init__(self, python_exec: str) -> None:
        self.pythonExec = python_exec


class _Session:
    def __init__(self, python_exec: str) -> None:
        self.sparkContext = _Context(python_exec)


class _ConnectSession:
    @property
    def sparkContext(self):  # as Spark Connect sessions: no JVM context
        raise RuntimeError("[JVM_ATTRIBUTE_NOT_SUPPORTED]")


def test_unset_points_spark_at_this_interpreter(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    session = _Session("python3")  # the context was built without PYSPARK_PYTHON
    _use_this_python(session)
    assert os.environ["PYSPARK_PYTHON"] == sys.executable
    assert session.sparkContext.pythonExec == sys.executable


def test_a_chosen_interpreter_is_kept(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("PYSPARK_PYTHON", "/opt/py/bin/python")
    session = _Session("/opt/py/bin/python")
    _use_this_python(session)
    assert os.environ["PYSPARK_PYTHON"] == "/opt/py/bin/python"
    assert session.sparkContext.pythonExec == "/opt/py/bin/python"

    # a context built with another explicit interpreter is not touched either
    monkeypatch.delenv("PYSPARK_PYTHON")
    session = _Session("/usr/bin/python3.12")
    _use_this_python(session)
    assert session.sparkContext.pythonExec == "/usr/bin/python3.12"


def test_spark_connect_session(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    _use_this_python(_ConnectSession())
    assert os.environ["PYSPARK_PYTHON"] == sys.executable


def test_lazy_names_still_resolve():
    with pytest.raises(AttributeError):
        nsq.spark.no_such_name  # noqa: B018
