"""The results database: schema, idempotent keys, transactions, threads, readers, and SIGKILL safety."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from xlang.store import SCHEMA_VERSION, Store, StoreError
from xlang.verdict import COMPILE_ERROR, OK, Verdict

ROOT = Path(__file__).resolve().parent.parent


def _run(store: Store, run_id: str = "r1") -> None:
    store.create_run(run_id, task="gemm", lang="triton", arch="h100", model="m", source="llm", docs_level="contracts",
                     turns_limit=8, samples=2, shape={"M": 1}, sampling={"temperature": 0.2}, seed=3,
                     profiler="none", config={"stop_on_ok": False}, versions={"python": "3"})


def test_schema_wal_and_round_trip(tmp_path):
    db = tmp_path / "x.db"
    with Store(db) as store:
        _run(store)
        store.start_sample("r1", 0, seed=3)
        v = Verdict(OK, detail="fine", lang="triton", task="gemm", arch="h100", timing={"speedup": 1.2})
        msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "ü ```code```"}]
        assert store.add_turn("r1", 0, 1, messages=msgs, reply="r", code="c", build={"ok": True, "census": None},
                              verdict=v.to_dict(), feedback="fb", speedup=1.2, prompt_tokens=5, completion_tokens=6,
                              total_tokens=11, cost_usd=0.5, llm_seconds=1.0, wall_seconds=2.0, model="gpt",
                              sampling={"temperature": 0.2}, seed=3)
        t = store.turns(run_id="r1")[0]
        assert t["messages"] == msgs and t["category"] == OK and Verdict.from_dict(t["verdict"]) == v
        assert (t["task"], t["lang"], t["arch"], t["run_model"], t["source"]) == ("gemm", "triton", "h100", "m", "llm")
        assert t["build"] == {"ok": True, "census": None} and t["sampling"] == {"temperature": 0.2}
        run = store.run("r1")
        assert run["shape"] == {"M": 1} and run["config"] == {"stop_on_ok": False} and run["status"] == "running"
        store.update_sample("r1", 0, status="done", best_turn=1, best_category=OK, best_speedup=1.2)
        s = store.samples("r1")[0]
        assert (s["turns_done"], s["cost_usd"], s["status"]) == (1, 0.5, "done")
        store.finish_run("r1")
        assert store.run("r1")["cost_usd"] == 0.5 and store.run("r1")["status"] == "done"
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] == str(SCHEMA_VERSION)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
    assert {"runs", "samples", "turns", "meta", "turn_view"} <= tables


def test_idempotent_keys(tmp_path):
    with Store(tmp_path / "x.db") as store:
        _run(store)
        assert store.create_run("r1", task="other", lang="x", arch="y", model="z", source="llm") is False
        assert store.run("r1")["task"] == "gemm"
        assert store.start_sample("r1", 0) and not store.start_sample("r1", 0)
        assert store.add_turn("r1", 0, 1, messages=[], reply="first")
        assert not store.add_turn("r1", 0, 1, messages=[], reply="second")
        assert [t["reply"] for t in store.turns(run_id="r1")] == ["first"]
        with pytest.raises(ValueError, match="unknown filter"):
            store.turns(colour="red")


def test_transactions_roll_back_and_nest(tmp_path):
    with Store(tmp_path / "x.db") as store:
        _run(store)
        store.start_sample("r1", 0)
        with pytest.raises(RuntimeError):
            with store.transaction():
                store.add_turn("r1", 0, 1, messages=[])
                with store.transaction():  # joins the outer one
                    store.add_turn("r1", 0, 2, messages=[])
                raise RuntimeError("boom")
        assert store.turns(run_id="r1") == []
        with store.transaction():
            store.add_turn("r1", 0, 1, messages=[], verdict={"category": COMPILE_ERROR})
            store.update_sample("r1", 0, best_turn=1)
        assert store.samples("r1")[0]["turns_done"] == 1
        assert store.turns(category=COMPILE_ERROR)[0]["turn_idx"] == 1


def test_threads_and_a_concurrent_reader(tmp_path):
    db = tmp_path / "x.db"
    with Store(db) as store:
        _run(store)
        for k in range(8):
            store.start_sample("r1", k)

        def write(k):
            for t in range(1, 21):
                store.add_turn("r1", k, t, messages=[{"role": "user", "content": str(t)}], cost_usd=0.01)

        threads = [threading.Thread(target=write, args=(k,)) for k in range(8)]
        for th in threads:
            th.start()
        with Store(db) as reader:  # another connection reads while the writers write
            for _ in range(5):
                assert len(reader.turns(run_id="r1")) <= 160
        for th in threads:
            th.join()
        assert len(store.turns(run_id="r1")) == 160
        assert store.run_cost("r1") == pytest.approx(1.6)


_WRITER = textwrap.dedent("""
    import sys, time
    from xlang.store import Store
    store = Store(sys.argv[1])
    store.create_run("r", task="gemm", lang="triton", arch="h100", model="m", source="llm")
    store.start_sample("r", 0)
    for t in range(1, 100000):
        store.add_turn("r", 0, t, messages=[{"role": "user", "content": "x" * 2000}], reply="y" * 5000)
        print(t, flush=True)
        if t == 30:
            with store.transaction():        # killed inside an open transaction
                store.add_turn("r", 0, 1000, messages=[], reply="uncommitted")
                print("inside", flush=True)
                time.sleep(60)
""")


def test_sigkill_loses_nothing_committed(tmp_path):
    db = tmp_path / "x.db"
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(db)], stdout=subprocess.PIPE, text=True,
                            cwd=ROOT)
    last = 0
    for line in proc.stdout:
        if line.strip() == "inside":
            break
        last = int(line)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert last == 30
    with Store(db) as store:
        idx = [t["turn_idx"] for t in store.turns(run_id="r")]
        assert idx == list(range(1, 31))  # every committed turn, and not the open transaction's
        assert store._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        # A resumed writer adds after them without duplicating anything.
        assert not store.add_turn("r", 0, 30, messages=[])
        assert store.add_turn("r", 0, 31, messages=[])


def test_readonly_reader_and_light_turns(tmp_path):
    db = tmp_path / "x.db"
    with Store(db) as store:
        _run(store)
        store.start_sample("r1", 0)
        store.add_turn("r1", 0, 1, messages=[{"role": "user", "content": "big"}], reply="r")
    with Store(db, readonly=True) as reader:
        t = reader.turns(run_id="r1", messages=False)[0]
        assert "messages" not in t and t["reply"] == "r" and t["task"] == "gemm"
        with pytest.raises(StoreError, match="read-only"):
            reader.add_turn("r1", 0, 2, messages=[])
    with pytest.raises(StoreError, match="no results store"):
        Store(tmp_path / "none.db", readonly=True)
