"""The results store as a new user meets it through the CLI (issue 16): readers never change a store, and a store
that is not one, is damaged, lacks a table or has another schema version is one line and exit 2."""

from __future__ import annotations

import hashlib
import os
import sqlite3
from pathlib import Path

import pytest

from report_records import verdict
from xlang.store import SCHEMA_VERSION, Store, StoreError


def one_line(err: str, *needles: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], (n, lines[0])


def make_store(path: Path) -> Path:
    with Store(path) as s:
        s.create_run("r1", task="gemm", lang="triton", arch="h100", model="reference", source="reference",
                     turns_limit=8, samples=1)
        s.start_sample("r1", 0)
        v = verdict("static_ok", "h100", "triton", "gemm", ran=False)
        s.add_turn("r1", 0, 1, messages=[{"role": "user", "content": "x"}], reply="r", verdict=v, build=v["build"])
        s.update_sample("r1", 0, status="done", best_turn=1, best_category="static_ok")
        s.finish_run("r1")
    return path


def fingerprint(path: Path) -> tuple[str, int, int]:
    data = path.read_bytes()
    return hashlib.sha256(data).hexdigest(), len(data), path.stat().st_mtime_ns


@pytest.mark.parametrize("dropped", ["turns", "runs", "samples", "meta"])
def test_report_and_trajectory_refuse_a_store_with_a_missing_table(xlang, tmp_path, dropped):
    db = make_store(tmp_path / "r.db")
    with sqlite3.connect(db) as c:
        c.execute("DROP VIEW turn_view")
        c.execute(f"DROP TABLE {dropped}")
    before = fingerprint(db)
    code, out, err = xlang("report", "--store", db, "--out", tmp_path / "rep")
    one_line(err, str(db))
    assert code == 2 and ("missing" in err or "not a results store" in err)
    assert "0 sample runs" not in out and not (tmp_path / "rep").exists()  # no invented zeros
    code, out, err = xlang("trajectory", "--store", db)
    assert code == 2
    one_line(err, str(db))
    assert fingerprint(db) == before  # never repaired


def test_zero_byte_and_garbage_files_are_not_stores(xlang, tmp_path):
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database at all\n" * 100)
    for db in (empty, garbage):
        for cmd in (["report", "--store", db, "--out", tmp_path / "rep"], ["trajectory", "--store", db]):
            code, out, err = xlang(*cmd)
            assert code == 2, (cmd, out, err)
            one_line(err, str(db))
    assert empty.stat().st_size == 0  # a reader never turns an empty file into a store
    code, _, err = xlang("compare", "--arch", "h100", "--langs", "triton", "--tasks", "gemm", "--profiler", "none",
                         "--store", garbage)
    assert code == 2
    one_line(err, "not a results store")


def test_truncated_store_is_one_line(xlang, tmp_path):
    db = make_store(tmp_path / "r.db")
    with Store(db) as s:  # enough rows that the tables span many pages
        for i in range(200):
            s.create_run(f"x{i}", task="gemm", lang="triton", arch="h100", model="m" * 500, source="llm")
    data = db.read_bytes()
    db.write_bytes(data[: len(data) // 3])
    for cmd in (["trajectory", "--store", db], ["report", "--store", db, "--out", tmp_path / "rep"]):
        code, out, err = xlang(*cmd)
        assert code == 2, (cmd, out, err)
        one_line(err, str(db))


def test_newer_schema_is_refused_by_readers_and_writers(xlang, tmp_path):
    db = make_store(tmp_path / "r.db")
    with sqlite3.connect(db) as c:
        c.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION + 1),))
    before = fingerprint(db)
    for cmd in (["report", "--store", db, "--out", tmp_path / "rep"], ["trajectory", "--store", db],
                ["trajectory", "r1", "--store", db],
                ["compare", "--arch", "h100", "--langs", "triton", "--tasks", "gemm", "--profiler", "none",
                 "--store", db]):
        code, out, err = xlang(*cmd)
        assert code == 2, (cmd, out, err)
        one_line(err, "newer")
    assert fingerprint(db) == before


def test_older_schema_readers_read_a_copy_writers_upgrade_keeping_everything(xlang, tmp_path):
    db = make_store(tmp_path / "r.db")
    with sqlite3.connect(db) as c:  # what a version-0 store would look like: one column fewer
        c.execute("DROP VIEW turn_view")
        c.execute("ALTER TABLE turns DROP COLUMN error")
        c.execute("UPDATE meta SET value='0' WHERE key='schema_version'")
    before = fingerprint(db)
    code, out, err = xlang("trajectory", "--store", db)  # a published report's store stays readable...
    assert code == 0 and "r1" in out, err
    assert fingerprint(db) == before  # ...through an upgraded copy in memory: the file is not changed
    with Store(db) as s:  # a writer upgrades: ADD COLUMN, the view back, nothing lost
        assert s.turns(run_id="r1")[0]["reply"] == "r" and s.turns(run_id="r1")[0]["error"] is None
        assert s._conn.execute("SELECT value FROM meta").fetchone()[0] == str(SCHEMA_VERSION)
    code, out, err = xlang("trajectory", "--store", db)
    assert code == 0 and "r1" in out, err


def test_reader_opens_read_only_and_never_writes(xlang, tmp_path, monkeypatch):
    db = make_store(tmp_path / "r.db")
    before = fingerprint(db)
    code, out, err = xlang("report", "--store", db, "--out", tmp_path / "rep")
    assert code == 0, err
    assert "1 sample runs" in out and (tmp_path / "rep" / "index.html").is_file()
    assert fingerprint(db) == before
    with Store(db, readonly=True) as s:
        with pytest.raises(StoreError, match="read-only"):
            s.create_run("r2", task="gemm", lang="triton", arch="h100", model="m", source="llm")
    # The connection itself is read-only (mode=ro): a write through it is refused by SQLite.
    with Store(db, readonly=True) as s:
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            s._conn.execute("DELETE FROM runs")
    assert fingerprint(db) == before


def test_read_only_media_falls_back_to_immutable(xlang, tmp_path, monkeypatch):
    """On read-only media SQLite cannot create the -shm a WAL store needs: mode=ro fails, the reader opens it
    immutable (exact while no -wal holds commits) and says so in one line when one does."""
    db = make_store(tmp_path / "r.db")
    real = sqlite3.connect

    def no_shm(database, *a, **k):
        if isinstance(database, str) and database.startswith("file:") and "immutable=1" not in database:
            raise sqlite3.OperationalError("unable to open database file")
        return real(database, *a, **k)

    monkeypatch.setattr(sqlite3, "connect", no_shm)
    code, out, err = xlang("trajectory", "--store", db)
    assert code == 0 and "r1" in out, err
    wal = Path(f"{db}-wal")
    wal.write_bytes(b"x" * 64)  # a log with (pretend) commits that only a writable folder could merge
    code, out, err = xlang("trajectory", "--store", db)
    assert code == 2
    one_line(err, "-wal")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through any permission")
def test_read_only_folder(xlang, tmp_path):
    db = make_store(tmp_path / "ro" / "r.db")
    os.chmod(db, 0o444)
    os.chmod(db.parent, 0o555)
    try:
        code, out, err = xlang("trajectory", "--store", db)
        assert code == 0 and "r1" in out, err
        code, out, err = xlang("compare", "--arch", "h100", "--langs", "triton", "--tasks", "gemm", "--profiler",
                               "none", "--store", db)
        assert code == 2
        one_line(err, str(db))
    finally:
        os.chmod(db.parent, 0o755)


def test_a_writer_on_read_only_media_says_read_only_not_not_a_store(tmp_path):
    """`xlang compare --store` on a store on a read-only mount (a bind mount made read-only in a user and mount
    namespace of its own): one line saying the media is read-only, never "is not a results store"."""
    import shutil
    import subprocess
    import sys

    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no unshare here")
    src, ro = tmp_path / "src", tmp_path / "ro"
    ro.mkdir()
    db = make_store(src / "r.db")
    before = fingerprint(db)
    root = Path(__file__).resolve().parent.parent
    script = (f"mount --bind {src} {ro} && mount -o remount,ro,bind {ro} || exit 77; "
              f"PYTHONPATH={root} {sys.executable} -m xlang compare --arch b200 --langs triton --tasks gemm "
              f"--profiler none --store {ro / 'r.db'}")
    proc = subprocess.run([unshare, "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=120)
    if proc.returncode == 77 or "unshare failed" in proc.stderr or "Operation not permitted" in proc.stderr:
        pytest.skip(f"cannot make a read-only mount here: {proc.stderr.strip()[:200]}")
    assert proc.returncode == 2, proc.stderr
    one_line(proc.stderr, "cannot write to", "read-only")
    assert "not a results store" not in proc.stderr
    assert fingerprint(db) == before


def test_a_writer_refuses_a_zero_byte_file(xlang, tmp_path):
    """A zero-byte file named as the store is not silently turned into a new store."""
    empty = tmp_path / "empty.db"
    empty.write_bytes(b"")
    code, _, err = xlang("compare", "--arch", "b200", "--langs", "triton", "--tasks", "gemm", "--profiler", "none",
                         "--store", empty)
    assert code == 2
    one_line(err, str(empty), "empty file")
    assert empty.stat().st_size == 0


def test_store_that_is_a_folder_and_report_out_that_cannot_be_written(xlang, tmp_path):
    folder = tmp_path / "adir.db"
    folder.mkdir()
    for cmd in (["compare", "--arch", "h100", "--langs", "triton", "--tasks", "gemm", "--profiler", "none",
                 "--store", folder], ["report", "--store", folder], ["trajectory", "--store", folder]):
        code, out, err = xlang(*cmd)
        assert code == 2, (cmd, out, err)
        one_line(err, "directory")
    db = make_store(tmp_path / "r.db")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code, out, err = xlang("report", "--store", db, "--out", blocker / "sub")
    assert code == 2
    one_line(err, "cannot write the report")


def test_report_defaults_beside_the_store_not_into_the_working_folder(xlang, tmp_path, monkeypatch):
    db = make_store(tmp_path / "runs" / "r.db")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    code, out, err = xlang("report", "--store", db)
    assert code == 0, err
    assert (tmp_path / "runs" / "report-r" / "index.html").is_file() and not (work / "reports").exists()


def test_trajectory_show_and_turn_are_checked(xlang, tmp_path):
    db = make_store(tmp_path / "r.db")
    code, out, err = xlang("trajectory", "r1", "--store", db, "--turn", "1", "--show", "bogus")
    assert code == 2 and "null" not in out
    one_line(err, "--show bogus")
    code, out, err = xlang("trajectory", "r1", "--store", db, "--turn", "7")
    assert code == 2
    one_line(err, "no turn 7")
    code, out, err = xlang("trajectory", "r1", "--store", db, "--turn", "1", "--show", "reply")
    assert code == 0 and out.strip().endswith("r")
    code, out, err = xlang("trajectory", "nosuchrun", "--store", db)
    assert code == 2
    one_line(err, "nosuchrun")
