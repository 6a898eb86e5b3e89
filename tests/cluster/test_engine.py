"""--engine ray against --engine local: the same shards and manifest, byte for byte, on the shared
files and on inputs cut into many parts (skipped records, --on-error, --limit, Parquet, a folder
of several formats, pre-tokenized data); one clean error when a worker fails; verify passes.

Every test here runs on one local Ray cluster of 2 CPUs (conftest.py) in one xdist worker. A Ray
run costs ~10-20 s on the 2-core box whatever its size, so `make test` runs one pack: a shared
file byte for byte and verified (the engine end to end: file tasks, part files, planning, the
shard writers), plus the error wrapping and Session.run (tasks on the cluster already started);
`make test-slow` the rest
(many parts with skipped records, whose parts and lines tests/io/test_readers_parts.py checks
locally; a worker failing in a tokenizing task, in a process of its own; every shared file, --on-error
error, --limit, a fast-path difference (both engines again on the reference path), a folder
of formats with Parquet parts, pre-tokenized input, profile, a failing
file task, joining a cluster started with `ray start`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from paths import SHARED_DATA, needs_shared
from ray_packs import OPTION_SETS, assert_no_scratch, assert_same_folders, cli, pack_both

from packtool.demo_data import write_sample
from packtool.io import readers

pytestmark = [pytest.mark.xdist_group("ray"), pytest.mark.usefixtures("ray_cluster")]

SHARED_FILES = sorted(p.name for p in SHARED_DATA.glob("*.json*")) if SHARED_DATA.is_dir() else []


@needs_shared("data")
@pytest.mark.parametrize("options", ["split-padded"])
def test_a_shared_file_packs_byte_identically_and_verifies(tmp_path, options):
    local, on_ray = pack_both(SHARED_DATA / "v1_sft_demo.jsonl", tmp_path, *OPTION_SETS[options])
    assert_same_folders(local, on_ray)
    v = cli("verify", on_ray)
    assert v.exit_code == 0, v.output


@pytest.mark.slow
@needs_shared("data")
@pytest.mark.parametrize("options", sorted(OPTION_SETS))
@pytest.mark.parametrize("name", SHARED_FILES)
def test_every_shared_file_packs_byte_identically(tmp_path, name, options):
    local, on_ray = pack_both(SHARED_DATA / name, tmp_path, *OPTION_SETS[options])
    assert_same_folders(local, on_ray)


def _chat_with_bad_records(path, n=240):
    """The demo chats with a malformed line, a record of no format, blank lines and a JSON array
    spread over the file (so that they fall into different parts)."""
    write_sample(path, n=n, seed=4)
    lines = path.read_bytes().splitlines(keepends=True)
    lines.insert(37, b"{not json\n")
    lines.insert(90, b"\n")
    lines.insert(91, b'{"unrelated": 1}\n')
    lines.insert(150, b"[1, 2]\n")
    lines.insert(151, b"   \n")
    path.write_bytes(b"".join(lines))
    return path


@pytest.fixture
def small_parts(monkeypatch):
    """Parts of about 8 KiB: a file of a few hundred records is read by dozens of tasks."""
    monkeypatch.setattr(readers, "PART_BYTES", 8 << 10)


@pytest.mark.slow
def test_many_parts_keep_source_indices_and_lines_of_skipped_records(tmp_path, small_parts):
    data = _chat_with_bad_records(tmp_path / "chats.jsonl")
    assert len(readers.file_parts(str(data), readers.PART_BYTES)) > 10
    local, on_ray = pack_both(data, tmp_path, *OPTION_SETS["default"])
    assert_same_folders(local, on_ray)
    skipped = json.loads((on_ray / "manifest.json").read_text())["skipped"]
    assert [s["line"] for s in skipped] == [38, 92, 151]


@pytest.mark.slow
def test_on_error_error_stops_at_the_same_record(tmp_path, small_parts):
    data = _chat_with_bad_records(tmp_path / "chats.jsonl")
    a = cli("pack", data, "--len", "2048", "--out", tmp_path / "a", "--no-cache")
    b = cli("pack", data, "--len", "2048", "--out", tmp_path / "b", "--engine", "ray")
    assert a.exit_code == b.exit_code == 1
    assert "chats.jsonl:38" in a.output and a.output == b.output
    assert not (tmp_path / "b").exists()
    assert_no_scratch(tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("limit", ["1", "101"])
def test_limit_reads_the_same_prefix(tmp_path, small_parts, limit):
    data = _chat_with_bad_records(tmp_path / "chats.jsonl")
    local, on_ray = pack_both(data, tmp_path, *OPTION_SETS["default"], "--limit", limit)
    assert_same_folders(local, on_ray)


@pytest.mark.slow
def test_a_fast_path_difference_packs_again_on_the_reference_path(tmp_path, monkeypatch):
    """A probe that differs (FastCheck, concluded in the driver by both engines): both pack again on
    the reference path, with the same shards and manifest, which says why."""
    from packtool.tokenization.pipeline import FastCheck

    conclude = FastCheck.conclude
    differs = "b.jsonl record 0"
    monkeypatch.setattr(
        FastCheck, "conclude", lambda self, n, where: conclude(self, n, where or differs)
    )
    folder = tmp_path / "in"
    folder.mkdir()
    write_sample(folder / "a.jsonl", n=40)
    write_sample(folder / "b.jsonl", n=40, seed=2)
    local, on_ray = pack_both(folder, tmp_path, *OPTION_SETS["default"])
    assert_same_folders(local, on_ray)
    backend = json.loads((on_ray / "manifest.json").read_text())["tokenizer_backend"]
    assert backend["name"] == "hf" and differs in backend["reason"]


@pytest.mark.slow
def test_a_folder_of_formats_and_parquet_row_groups(tmp_path, small_parts):
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path / "in"
    folder.mkdir()
    write_sample(folder / "a.jsonl", n=120, seed=1)
    rows = [json.loads(x) for x in (folder / "a.jsonl").read_text().splitlines()]
    alpaca = [
        {
            "instruction": r["messages"][-2]["content"],
            "input": "",
            "output": r["messages"][-1]["content"],
        }
        for r in rows[:60]
    ]
    (folder / "b.json").write_text(json.dumps(alpaca))
    table = pa.table({"messages": [r["messages"] for r in rows]})
    pq.write_table(table, folder / "c.parquet", row_group_size=10)
    assert len(readers.file_parts(str(folder / "c.parquet"), readers.PART_BYTES)) > 1
    local, on_ray = pack_both(folder, tmp_path, *OPTION_SETS["split-padded"])
    assert_same_folders(local, on_ray)
    assert json.loads((on_ray / "manifest.json").read_text())["format"].startswith("mixed")


@pytest.mark.slow
def test_pretokenized_parquet(tmp_path, small_parts):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = __import__("numpy").random.default_rng(0)
    ids = [rng.integers(5, 1000, int(n)).tolist() for n in rng.integers(1, 700, 300)]
    pq.write_table(pa.table({"input_ids": ids}), tmp_path / "tok.parquet", row_group_size=25)
    local, on_ray = pack_both(tmp_path / "tok.parquet", tmp_path, *OPTION_SETS["truncate-fixed"])
    assert_same_folders(local, on_ray)


@pytest.mark.slow
def test_a_failing_worker_is_one_clean_error(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    write_sample(folder / "a.jsonl", n=50)
    (folder / "b.jsonl.gz").write_bytes(b"\x1f\x8b\x08\x00 this is not gzip data")
    a = cli("pack", folder, "--len", "1024", "--out", tmp_path / "a", "--no-cache")
    b = cli("pack", folder, "--len", "1024", "--out", tmp_path / "b", "--engine", "ray")
    assert a.exit_code == b.exit_code == 1
    assert "b.jsonl.gz" in b.output and "Traceback" not in b.output
    assert a.output == b.output and len(b.output.strip().splitlines()) == 1
    assert not (tmp_path / "b").exists()
    assert_no_scratch(tmp_path)


@pytest.mark.slow
def test_a_worker_failing_while_tokenizing_is_one_line_on_stderr(tmp_path):
    """A gzip file whose head reads and whose end is cut: the file task passes, a tokenizing task
    fails; the command (a real process: Ray's own output would show) says one line, exit 1."""
    import gzip

    folder = tmp_path / "in"
    folder.mkdir()
    write_sample(tmp_path / "s.jsonl", n=3000)
    data = gzip.compress((tmp_path / "s.jsonl").read_bytes())
    (folder / "b.jsonl.gz").write_bytes(data[: len(data) * 2 // 3])
    argv = [sys.executable, "-m", "packtool", "pack", str(folder), "--len", "1024"]
    local = subprocess.run(
        [*argv, "--out", str(tmp_path / "a"), "--no-cache"], capture_output=True, text=True
    )
    ray = subprocess.run(
        [*argv, "--out", str(tmp_path / "b"), "--engine", "ray", "--num-proc", "2"],
        capture_output=True,
        text=True,
    )
    assert local.returncode == ray.returncode == 1
    assert ray.stderr.strip().splitlines() == local.stderr.strip().splitlines()
    assert len(ray.stderr.strip().splitlines()) == 1 and "b.jsonl.gz" in ray.stderr
    assert not (tmp_path / "b").exists()
    assert_no_scratch(tmp_path)


@pytest.mark.slow
def test_joining_a_running_cluster(tmp_path):
    """`ray start --head --block` (its own process group, stopped at the end: not `ray stop`,
    which stops every cluster here), then --ray-address HOST:PORT: the same pack, and the
    cluster keeps running after packtool leaves it."""
    import os
    import signal
    import time

    ray_bin = str(Path(sys.executable).with_name("ray"))
    address = "127.0.0.1:6391"
    head = subprocess.Popen(
        [ray_bin, "start", "--head", "--port=6391", "--num-cpus=2", "--disable-usage-stats",
         "--include-dashboard=false", "--block"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip

    def alive() -> bool:
        return (
            subprocess.run(
                [ray_bin, "status", f"--address={address}"], capture_output=True
            ).returncode
            == 0
        )

    try:
        deadline = time.time() + 90
        while not alive():
            assert time.time() < deadline and head.poll() is None, "the Ray head did not start"
            time.sleep(1)
        write_sample(tmp_path / "s.jsonl", n=300)
        argv = [
            sys.executable,
            "-m",
            "packtool",
            "pack",
            str(tmp_path / "s.jsonl"),
            "--len",
            "1024",
        ]
        argv += ["--shard-rows", "5"]
        subprocess.run([*argv, "--out", str(tmp_path / "local"), "--no-cache"], check=True)
        joined = subprocess.run(
            [*argv, "--out", str(tmp_path / "ray"), "--engine", "ray", "--ray-address", address],
            capture_output=True,
            text=True,
        )
        assert joined.returncode == 0, joined.stderr
        assert_same_folders(tmp_path / "local", tmp_path / "ray")
        assert alive()  # packtool left the cluster as it found it
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        head.wait(timeout=60)
        current = Path("/tmp/ray/ray_current_cluster")  # what `ray stop` would remove
        if current.is_file() and current.read_text().strip().endswith(":6391"):
            current.unlink()


@pytest.mark.slow
def test_verify_passes_on_a_pack_written_on_ray(tmp_path):
    write_sample(tmp_path / "s.jsonl", n=200)
    out = tmp_path / "packed"
    r = cli("pack", tmp_path / "s.jsonl", "--len", "2048", "--out", out, "--engine", "ray",
            "--shard-rows", "8", "--overflow", "split")  # fmt: skip
    assert r.exit_code == 0, r.output
    v = cli("verify", out)
    assert v.exit_code == 0, v.output


def _without_timings(obj):
    if isinstance(obj, dict):
        return {k: _without_timings(v) for k, v in obj.items() if k not in ("seconds", "timings")}
    if isinstance(obj, list):
        return [_without_timings(v) for v in obj]
    return obj


@pytest.mark.slow
def test_profile_on_ray_reports_what_local_reports(tmp_path):
    write_sample(tmp_path / "s.jsonl", n=200)
    a = cli("profile", tmp_path / "s.jsonl", "--len", "2048", "--json", "-", "--no-cache")
    b = cli("profile", tmp_path / "s.jsonl", "--len", "2048", "--json", "-", "--engine", "ray")
    assert a.exit_code == b.exit_code == 0, b.output
    ja, jb = json.loads(a.stdout), json.loads(b.stdout)
    assert jb["recommendation"]["command"].endswith("--engine ray --out packed/")
    assert jb["source"]["pack_args"] == ["--engine", "ray"]  # the pack it recommends runs there too
    for j in (ja, jb):
        del j["recommendation"]["command"], j["source"]["pack_args"]
    assert _without_timings(ja) == _without_timings(jb)


def test_what_fails_in_a_worker_is_named_in_one_line(ray_cluster):
    from packtool.cluster.session import Session
    from packtool.errors import PacktoolError, UsageError

    def boom(kind):
        if kind == "usage":
            raise UsageError("--len 3 is too short")
        return {}["missing"]

    task = ray_cluster.remote(boom)
    for kind, want in (("usage", UsageError), ("other", PacktoolError)):
        with pytest.raises(Exception) as caught:
            ray_cluster.get(task.remote(kind))
        err = Session.failure(caught.value)
        assert type(err) is want and "\n" not in str(err)
        assert (
            str(err) == "--len 3 is too short"
            if kind == "usage"
            else "KeyError: 'missing'" in str(err)
        )


def test_session_runs_tasks_in_call_order_at_most_workers_at_a_time(ray_cluster, tmp_path):
    """Session.run: results in the order of the calls, made lazily and never more than `workers`
    running (one here: each starts after the one before ended); an error comes as raised; the
    scratch folders go with the session."""
    import time

    from packtool.cluster.session import Session

    def stamp(i: int, folder: str) -> tuple[int, float, float]:  # (nested: Ray pickles it whole)
        start = time.monotonic()
        time.sleep(0.05 * (i % 3))
        if i == 99:
            raise ValueError("call 99 fails")
        return i, start, time.monotonic()

    made = []  # when each call was made

    def calls():
        for i in range(6):
            made.append(time.monotonic())
            yield i, str(tmp_path)

    with Session(workers=1) as session:
        assert session.workers == 1 and not session.started  # joined the tests' cluster
        out = session.run(stamp, calls())
        assert [i for i, *_ in out] == list(range(6))
        assert all(made[k + 1] >= out[k][2] <= out[k + 1][1] for k in range(5))
        with pytest.raises(Exception, match="call 99 fails"):
            session.run(stamp, [(1, ""), (99, ""), (2, "")])
        session.scratch_parent = str(tmp_path / "beside")
        folder = session.scratch()
        assert folder.parent == tmp_path / "beside" and folder.is_dir()
    assert not folder.exists()


def _starting(seconds: float):
    """Session._joined that leaves the tests' cluster "starting" for `seconds` (as a new local
    cluster would be): until then Session.run makes its calls in the driver."""
    import threading

    from packtool.cluster.session import Session

    joined = Session._joined

    def late(self):
        joined(self)
        self._up.clear()
        threading.Timer(seconds, self._up.set).start()

    return late


def test_while_the_cluster_starts_the_driver_is_one_of_the_workers(ray_cluster, monkeypatch):
    """Session.run begun while the cluster is not up: the driver makes the first call at once and
    goes on taking the next one until none is left; once the cluster is up, Ray tasks take calls
    too, never more than `workers` with the driver's at a time. The results are in call order
    whoever made them, and the driver's calls are counted. A run begun when it is up: Ray alone."""
    import os
    import time

    from packtool.cluster.session import Session

    monkeypatch.setattr(Session, "_joined", _starting(0.3))

    def where(i: int) -> tuple[int, int, float, float]:  # (nested: Ray pickles it whole)
        start = time.time()
        time.sleep(0.2)
        return i, os.getpid(), start, time.time()

    with Session(workers=2) as session:
        assert not session.up()
        out = session.run(where, [(i,) for i in range(12)])
        assert session.up()
        after = session.run(where, [(i,) for i in range(3)])
    assert [i for i, *_ in out] == list(range(12))
    in_driver = [pid == os.getpid() for _, pid, *_ in out]
    assert in_driver[0] and not all(in_driver) and sum(in_driver) == session.driver_calls
    for _, _, start, _ in out:  # at most 2 calls at a time (0.01 s: one clock, two processes)
        assert sum(a < start + 0.01 and start < b - 0.01 for _, _, a, b in out) <= 2
    assert all(pid != os.getpid() for _, pid, *_ in after)


def test_on_a_local_cluster_the_driver_is_one_of_the_workers_in_every_run(ray_cluster):
    """Session.driver_works (a local cluster of 2 or more workers): a run begun when the cluster is
    up has the driver as one of its workers too, never more than `workers` calls at a time."""
    import os
    import time

    from packtool.cluster.session import Session

    def where(i: int) -> tuple[int, int, float, float]:  # (nested: Ray pickles it whole)
        start = time.time()
        time.sleep(0.2)
        return i, os.getpid(), start, time.time()

    with Session(workers=2) as session:
        assert session.up() and not session.driver_works  # joined: Ray alone
        session.driver_works = True  # as a local cluster of 2 started by the session would be
        out = session.run(where, [(i,) for i in range(10)])
    assert [i for i, *_ in out] == list(range(10))
    in_driver = [pid == os.getpid() for _, pid, *_ in out]
    assert in_driver[0] and not all(in_driver) and sum(in_driver) == session.driver_calls
    for _, _, start, _ in out:
        assert sum(a < start + 0.01 and start < b - 0.01 for _, _, a, b in out) <= 2


_LEAN_CLUSTER = """
import os, subprocess, time
import psutil, ray
from packtool.cluster.session import Session

def where(i):
    return i, os.getpid(), os.nice(0)

with Session(workers=2) as s:
    while not s.up():
        time.sleep(0.05)
    out = s.run(where, [(i,) for i in range(6)])
    names = " ".join(" ".join(p.cmdline()) for p in psutil.Process().children(recursive=True))
    cpus = ray.cluster_resources()["CPU"]
print([i for i, _, _ in out], s.driver_calls, cpus, {n for _, p, n in out if p != os.getpid()})
print("monitor.py" in names, "log_monitor.py" in names, "dashboard.py" in names)
print("raylet" in names and "gcs_server" in names, ray.is_initialized())
"""


@pytest.mark.slow
def test_a_local_cluster_starts_lean_and_the_driver_works_in_it(tmp_path):
    """A local cluster of 2 workers, started by a Session in a process of its own: Ray has 1 CPU
    (the driver is the other worker: it makes calls in a run begun when the cluster is up), its
    workers run at nice 0, and neither the autoscaler's monitor, the log monitor nor the
    dashboard's API server was started; it is stopped at the end."""
    run = subprocess.run(
        [sys.executable, "-c", _LEAN_CLUSTER], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    calls, lean, stopped = run.stdout.strip().splitlines()[-3:]
    order, driver_calls, cpus, nice = calls.rsplit(" ", 3)
    assert order == str(list(range(6))) and int(driver_calls) >= 1 and float(cpus) == 1.0
    assert nice in ("{0}", "set()")  # the Ray tasks' niceness (none if the driver made every call)
    assert lean == "False False False" and stopped == "True False"


@pytest.mark.slow
def test_parts_encoded_in_the_driver_while_the_cluster_starts_pack_the_same(tmp_path, monkeypatch):
    """The cluster "starts" for 0.3 s: the driver reads the file, probes it and encodes parts, as
    do Ray tasks once it is up, and they write the shards; the same pack, byte for byte."""
    from packtool.cluster.session import Session

    monkeypatch.setattr(readers, "PART_BYTES", 256 << 10)
    monkeypatch.setattr(Session, "_joined", _starting(0.3))
    write_sample(tmp_path / "s.jsonl", n=3000)
    report = tmp_path / "ray.json"
    local, on_ray = pack_both(
        tmp_path / "s.jsonl", tmp_path, *OPTION_SETS["split-padded"], "--json", report
    )
    assert_same_folders(local, on_ray)
    engine = json.loads(report.read_text())["engine"]
    # the driver's calls: its file, its probe and parts; Ray's: the other parts (and the shards)
    assert engine["parts"] > 10 and 3 <= engine["driver_calls"] < 2 + engine["parts"]
