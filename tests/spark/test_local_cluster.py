"""The connector with executors in JVMs of their own, as on every real
cluster: Spark's ``local-cluster[2,1,1024]`` master (a standalone master and
two workers inside the driver's JVM, each starting an executor JVM of its
own), against real daemons.

Every other Spark test runs on ``local[2]``, where the executor is the
driver's JVM and its Python workers start in the driver's working
directory. Here a Spark application (tests/spark/local_cluster_app.py) is
submitted the way one is on a cluster::

    spark-submit --master 'local-cluster[2,1,1024]' --py-files nsq-<version>-py3-none-any.whl \\
        --conf spark.pyspark.python=<executor python> local_cluster_app.py SPEC.json

- the wheel is built from the checkout (a copy of its sources, so the
  build writes nothing into the checkout) with ``pip wheel --no-deps``;
- the executors' (and the driver's) interpreter is a virtualenv that sees
  this one's packages (pyspark, pyarrow, nsq's dependencies) except nsq:
  the fixture checks that it cannot import nsq, and the probe that every
  task imported it from the shipped wheel;
- the application runs from a directory of its own, with no PYTHONPATH,
  under a SPARK_HOME of symlinks to pyspark's with a ``work`` directory of
  its own (Spark 4's local-cluster workers put executors in
  ``$SPARK_HOME/work``; ``spark.worker.dir`` is not read there);
- a JVM hosts one SparkContext and this pytest process already runs the
  local[2] one (tests/spark/conftest.py), so the local-cluster session runs
  in those spark-submit processes; the tests assert on what they report.

Covered: where the tasks run and import nsq from; the batch sink; the
in-flight source (lookupd, ``Trigger.AvailableNow``, Parquet); the source
on offsets (a batch read; a stream into the nsq sink); a stream on offsets
killed with SIGKILL while a micro-batch is planned and not committed,
restarted from its checkpoint: every message exactly once.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest

from tests.spark.conftest import Cluster, drained, require_spark, wait_for
from tests.spark.test_offsets import WalCluster, bodies
from tests.spark.test_sink import consume

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
APP = Path(__file__).with_name("local_cluster_app.py")
MASTER = "local-cluster[2,1,1024]"


# -- the environment a cluster would give -------------------------------------------------


def build_wheel(out: Path) -> Path:
    """``pip wheel --no-deps`` of a copy of the checkout's package sources."""
    src = out / "src"
    src.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "nsq", src / "nsq", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(src)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"pip wheel failed:\n{r.stdout}\n{r.stderr}"
    wheels = sorted(out.glob("nsq-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def executor_python(base: Path) -> Path:
    """A virtualenv whose site-packages sees this interpreter's packages
    (one ``.pth`` line naming a directory of symlinks to them), nsq and
    every ``.pth`` file left out, so nothing imports nsq unless the wheel
    is on the path."""
    venv = base / "executor-python"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    deps = base / "executor-deps"
    deps.mkdir()
    for lib in dict.fromkeys((sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"])):
        for entry in Path(lib).iterdir():
            name = entry.name
            if name == "nsq" or name.startswith(("nsq-", "nsq.", "__editable__")) or name.endswith(".pth"):
                continue
            if not (deps / name).exists():
                (deps / name).symlink_to(entry)
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    Path(site, "nsq-test-deps.pth").write_text(f"{deps}\n")
    return python


def spark_home(base: Path) -> Path:
    """A SPARK_HOME of symlinks to pip-installed pyspark's, with its own ``work``."""
    from pyspark.find_spark_home import _find_spark_home

    real = Path(_find_spark_home())
    home = base / "spark-home"
    home.mkdir()
    for entry in real.iterdir():
        if entry.name != "work":
            (home / entry.name).symlink_to(entry)
    (home / "work").mkdir()
    return home


class LocalClusterSubmit:
    """spark-submit into ``local-cluster[2,1,1024]`` with the wheel and the executor python."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.wheel = build_wheel(base / "wheel")
        self.python = executor_python(base)
        self.spark_home = spark_home(base)
        self.run_dir = base / "run"
        self.run_dir.mkdir()
        self.app = self.run_dir / APP.name
        shutil.copy2(APP, self.app)
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_HOME")}
        self.env["SPARK_HOME"] = str(self.spark_home)

    def imports(self, code: str) -> subprocess.CompletedProcess:
        """Run ``code`` with the executor python, as Spark would start it (no PYTHONPATH, not in the checkout)."""
        return subprocess.run([str(self.python), "-c", code], cwd=self.run_dir, env=self.env, capture_output=True,
                              text=True, timeout=120)

    def start(self, name: str, spec: dict) -> tuple[subprocess.Popen, Path]:
        """spark-submit the application with ``spec`` (in its own session, so
        one killpg ends the driver, its JVM and the executors)."""
        spec_path = self.base / f"{name}.json"
        spec_path.write_text(json.dumps(spec))
        log_path = self.base / f"{name}.log"
        cmd = [str(self.spark_home / "bin" / "spark-submit"), "--master", MASTER, "--driver-memory", "1g",
               "--conf", "spark.ui.enabled=false", "--conf", "spark.log.level=WARN",
               "--conf", f"spark.pyspark.python={self.python}", "--py-files", str(self.wheel),
               str(self.app), str(spec_path)]
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(cmd, cwd=self.run_dir, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        return proc, log_path


def tail(path: Path, n: int = 4000) -> str:
    return path.read_text(errors="replace")[-n:]


@pytest.fixture(scope="module")
def submit(tmp_path_factory) -> LocalClusterSubmit:
    require_spark()
    s = LocalClusterSubmit(tmp_path_factory.mktemp("local-cluster"))
    r = s.imports("import nsq")
    assert r.returncode != 0, f"the executor python imports nsq without the wheel: {r.stdout}"
    r = s.imports("import pyspark, pyarrow, aiohttp")
    assert r.returncode == 0, f"the executor python lacks the connector's dependencies: {r.stderr}"
    return s


@pytest.fixture(scope="module")
def wal(tmp_path_factory):
    require_spark()
    c = WalCluster(str(tmp_path_factory.mktemp("lc-wal")))
    yield c
    c.stop()


# -- the two spark-submit runs ------------------------------------------------------------


class Runs:
    """What the tests check: the published data and the application's results."""

    def __init__(self, results: dict, spec: dict, sent: dict, kill: dict, log: Path) -> None:
        self.results, self.spec, self.sent, self.kill, self.log = results, spec, sent, kill, log

    def phase(self, name: str) -> Any:
        part = self.results.get(name)
        if part is None:
            pytest.fail(f"phase {name} did not run:\n{tail(self.log)}")
        if "error" in part:
            pytest.fail(f"phase {name} failed in the Spark application:\n{part['error']}")
        return part


def kill_mid_batch(submit: LocalClusterSubmit, spec: dict, tmp: Path) -> dict:
    """Run the offsets stream until a micro-batch is planned and not committed
    after three committed ones, then SIGKILL the whole application."""
    ckpt = Path(spec["kill_ckpt"])

    def batches(kind: str) -> int:
        d = ckpt / kind
        return len([p for p in d.iterdir() if p.name.isdigit()]) if d.is_dir() else 0

    proc, log = submit.start("kill-run", {**spec, "phase": "kill-run"})
    try:
        wait_for(lambda: (batches("commits") >= 3 and batches("offsets") > batches("commits"))
                 or proc.poll() is not None, 240, "a planned, uncommitted batch after three committed", 0.01)
        assert proc.poll() is None, tail(log)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # spark-submit's JVM, the driver python, the executors
        proc.wait()
    return {"planned": batches("offsets"), "committed": batches("commits")}


@pytest.fixture(scope="module")
def runs(submit: LocalClusterSubmit, cluster: Cluster, wal: WalCluster, tmp_path_factory) -> Runs:
    tmp = tmp_path_factory.mktemp("lc-runs")
    a, b = wal.nsqds
    spec: dict[str, Any] = {
        "result": str(tmp / "result.json"),
        "nsqd_tcp": cluster.nsqd.tcp, "lookupd_http": cluster.lookupd.http,
        "wal_nsqds": [a, b], "wal_lookupd": wal.lookupd,
        "sink_topic": "lc_sink", "sink_rows": 10_000,
        "inflight_topic": "lc_inflight", "inflight_ckpt": str(tmp / "inflight-ckpt"),
        "inflight_out": str(tmp / "inflight-out"),
        "batch_topic": "lc_batch", "batch_start": {a: {"lc_batch": 500}, b: {"lc_batch": 0}},
        "batch_end": {a: {"lc_batch": 2500}, b: {"lc_batch": 1500}},
        "pipe_topic": "lc_pipe", "pipe_out_topic": "lc_pipe_out", "pipe_ckpt": str(tmp / "pipe-ckpt"),
        "kill_topic": "lc_kill", "kill_ckpt": str(tmp / "kill-ckpt"), "kill_out": str(tmp / "kill-out"),
        "kill_heads": {a: 5000, b: 5000},
    }
    sent = {
        "inflight": bodies("i", 10_000),
        "batch": {a: bodies("a", 3000), b: bodies("b", 2000)},
        "pipe": {a: bodies("pa", 1500), b: bodies("pb", 1500)},
        "kill": {a: bodies("ka", 4000), b: bodies("kb", 4000)},
        "more": {a: bodies("ka2", 1000), b: bodies("kb2", 1000)},
    }
    for key in ("kill", "batch", "pipe"):
        for nsqd, bs in sent[key].items():
            wal.mpub(nsqd, spec[f"{key}_topic"], bs)
    cluster.mpub(spec["inflight_topic"], sent["inflight"])
    for topic in ("lc_kill", "lc_pipe"):
        wal.threaded.wait_registered(topic=topic)
    cluster.wait_registered(spec["inflight_topic"])

    kill = kill_mid_batch(submit, spec, tmp)
    for nsqd, bs in sent["more"].items():
        wal.mpub(nsqd, "lc_kill", bs)

    proc, log = submit.start("main", {**spec, "phase": "main"})
    try:
        proc.wait(timeout=420)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    result = Path(spec["result"])
    assert result.exists(), f"the application wrote no results (exit {proc.returncode}):\n{tail(log)}"
    return Runs(json.loads(result.read_text()), spec, sent, kill, log)


# -- the tests ------------------------------------------------------------------------------


def test_tasks_run_in_executor_jvms_importing_nsq_from_the_shipped_wheel(runs: Runs, submit: LocalClusterSubmit):
    p = runs.phase("probe")
    assert p["master"] == MASTER
    assert p["python_exec"] == str(submit.python)
    assert p["driver_python"] == str(submit.python)
    assert f"{submit.wheel.name}/nsq/__init__.py" in p["driver_nsq"]  # spark-submit put the wheel on its path
    tasks = p["tasks"]
    assert len(tasks) == 4
    jvms = {t["jvm"] for t in tasks}
    assert len(jvms) == 2 and 0 not in jvms and p["driver_jvm"] not in jvms, (p["driver_jvm"], tasks)
    for t in tasks:
        assert t["python"] == str(submit.python)
        assert t["nsq"].endswith(f"{submit.wheel.name}/nsq/__init__.py"), t["nsq"]  # not the checkout
        assert not t["nsq"].startswith(str(ROOT))
        assert Path(t["cwd"]).is_relative_to(submit.spark_home / "work")
    # the application's phases ran in the same processes
    assert all("error" not in part for part in runs.results.values()), \
        {k: v["error"][-300:] for k, v in runs.results.items() if "error" in v}


def test_sink_publishes_from_the_executors(runs: Runs, cluster: Cluster):
    n = runs.phase("sink")["rows"]
    got = consume(cluster.nsqd.tcp, runs.spec["sink_topic"], n)
    assert sorted(got) == sorted(f"lc-{i}".encode() for i in range(n))


def test_inflight_source_through_lookupd_into_parquet(runs: Runs, cluster: Cluster):
    part = runs.phase("inflight")
    rows = part["rows"]
    sent = runs.sent["inflight"]
    assert sorted(r[0].encode() for r in rows) == sorted(sent)
    assert len({r[1] for r in rows}) == len(sent)
    assert {(r[2], r[3], r[4]) for r in rows} == {(1, runs.spec["inflight_topic"], cluster.nsqd.tcp)}
    assert part["batches"] >= 3  # maxMessagesPerTrigger 4000
    topic = runs.spec["inflight_topic"]
    assert drained(cluster, topic, "spark")
    wait_for(lambda: cluster.channel_stats(topic, "spark")["client_count"] == 0, 10, "connections closed")


def test_offsets_batch_read_by_the_executors(runs: Runs):
    part = runs.phase("offsets_batch")
    assert part["partitions"] >= 4
    a, b = runs.spec["wal_nsqds"]
    sent = runs.sent["batch"]
    rows = sorted(part["rows"])
    assert [(n, o) for n, o, _ in rows] == sorted([(a, i) for i in range(500, 2500)] + [(b, i) for i in range(1500)])
    assert all(body.encode() == sent[n][o] for n, o, body in rows)


def test_offsets_stream_into_the_nsq_sink(runs: Runs, cluster: Cluster):
    part = runs.phase("offsets_to_nsq")
    assert part["batches"] >= 2  # maxOffsetsPerTrigger 1500 of 3000
    sent = [body for bs in runs.sent["pipe"].values() for body in bs]
    got = consume(cluster.nsqd.tcp, runs.spec["pipe_out_topic"], len(sent))
    assert sorted(got) == sorted(body.upper() for body in sent)


def test_killed_offsets_stream_restarts_from_its_checkpoint_exactly_once(runs: Runs, wal: WalCluster):
    """As tests/spark/test_offsets.py's kill test, with the executors in
    their own JVMs in both runs: the Parquet output holds every message
    once, the replayed batch read the same offsets again."""
    assert runs.kill["planned"] > runs.kill["committed"]  # a batch was replayed
    rows = runs.phase("restart")["rows"]
    keys = [(n, o) for n, o, _ in rows]
    assert len(keys) == len(set(keys)) == 10_000  # no duplicates, no losses
    expected = {n: runs.sent["kill"][n] + runs.sent["more"][n] for n in runs.spec["wal_nsqds"]}
    assert all(body.encode() == expected[n][o] for n, o, body in rows)
    for n in runs.spec["wal_nsqds"]:
        assert wal.channel(n, runs.spec["kill_topic"])["offset"] == 5000


# -- register() on a cluster (stand-in sessions, no Spark) -------------------------------


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)


class _Context:
    def __init__(self, master: str, python_exec: str = "python3", py_files: str = "") -> None:
        self.master = master
        self.pythonExec = python_exec
        self._python_includes = ["deps.zip"]
        self.environment: dict[str, str] = {}
        self._conf = _Conf({"spark.submit.pyFiles": py_files} if py_files else {})

    def getConf(self) -> _Conf:
        return self._conf


class _Session:
    def __init__(self, context: _Context) -> None:
        self.sparkContext = context


@pytest.mark.parametrize("master", ["spark://10.0.0.1:7077", "yarn", "k8s://https://10.0.0.2:6443"])
def test_register_leaves_the_interpreter_to_spark_on_a_cluster(monkeypatch: pytest.MonkeyPatch, master: str):
    """The driver's sys.executable means nothing on another machine: on a
    cluster master, register() keeps Spark's python3 (or PYSPARK_PYTHON)."""
    from nsq.spark import _use_this_python

    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    session = _Session(_Context(master))
    _use_this_python(session)
    assert session.sparkContext.pythonExec == "python3"
    assert "PYSPARK_PYTHON" not in os.environ


def test_register_uses_this_interpreter_on_local_cluster(monkeypatch: pytest.MonkeyPatch):
    from nsq.spark import _use_this_python

    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    session = _Session(_Context(MASTER))  # the executors run on this machine
    _use_this_python(session)
    assert session.sparkContext.pythonExec == sys.executable
    assert os.environ["PYSPARK_PYTHON"] == sys.executable


def test_register_puts_what_py_files_shipped_on_the_workers_path(tmp_path: Path):
    """Spark ships every --py-files file but puts only .zip/.egg/.jar on the
    executors' Python path, and none on the streaming source runner's:
    register() adds the wheels to the includes and the driver's copies to
    the workers' PYTHONPATH."""
    from nsq.spark import _reach_shipped_files

    for name in ("nsq-0.1.0-py3-none-any.whl", "deps.zip"):
        (tmp_path / name).write_bytes(b"PK")
    context = _Context("spark://10.0.0.1:7077", py_files="file:/dist/nsq-0.1.0-py3-none-any.whl,/libs/deps.zip,"
                                                      "hdfs://nn/libs/other-2.0-py3-none-any.WHL,/x/helpers.py")
    context.environment = {"PYTHONPATH": "/opt/lib", "PYTHONHASHSEED": "0"}
    session = _Session(context)
    wheels, paths = _reach_shipped_files(session, root=str(tmp_path))
    assert wheels == ["nsq-0.1.0-py3-none-any.whl", "other-2.0-py3-none-any.WHL"]
    assert context._python_includes == ["deps.zip", *wheels]
    assert paths == [str(tmp_path / "nsq-0.1.0-py3-none-any.whl"), str(tmp_path / "deps.zip")]  # those here
    assert context.environment["PYTHONPATH"] == os.pathsep.join(["/opt/lib", *paths])
    assert _reach_shipped_files(session, root=str(tmp_path)) == ([], [])  # once
    plain = _Context("local[2]")
    plain.environment = {}
    assert _reach_shipped_files(_Session(plain), root=str(tmp_path)) == ([], [])
    assert plain.environment == {}
