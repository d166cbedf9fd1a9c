"""The results database (SQLite): runs, samples and every turn of every trajectory.

Shared by the agent loop (writer) and the reports (reader). One file, WAL mode, FULL sync: every committed
transaction survives a SIGKILL of the writer at any point; readers in other processes never block the writer.

Schema (version 1):

  runs     one `xlang run` invocation (or a resumed one: the same run_id).
           run_id PK · created_at · task · lang · arch · model (as given: litellm string, 'reference',
           'replay:...') · source ('llm' | 'reference' | 'replay') · docs_level · turns_limit · samples ·
           shape_json · sampling_json (temperature, max_tokens, ...) · seed (base; sample k uses seed+k) ·
           profiler · config_json (everything else: stop_on_ok, max_cost, concurrency, replay_of, ...) ·
           versions_json (python, litellm, triton, nvcc, ...) · status ('running' | 'done' | 'budget' |
           'error') · cost_usd · finished_at
  samples  one trajectory.  PK (run_id, sample_idx) · seed · status ('running' | 'done' | 'missing' |
           'budget' | 'error') · note · best_turn · best_category · best_speedup · turns_done ·
           cost_usd · started_at · finished_at
  turns    one model reply and its judgement.  PK (run_id, sample_idx, turn_idx) (turn_idx from 1) ·
           created_at · model (as the provider reported it) · messages_json (the exact prompt: a list of
           {role, content}) · reply (raw text) · code (extracted candidate, NULL when none) · build_json
           (BuildResult.to_dict(), NULL when nothing was built) · verdict_json (Verdict.to_dict()) ·
           category (= verdict category) · feedback (the text sent back to the model next turn) ·
           speedup · prompt_tokens · completion_tokens · total_tokens · cost_usd · llm_seconds ·
           build_seconds · eval_seconds · wall_seconds · sampling_json · seed · error (provider error text
           when the reply could not be obtained)
  meta     key/value: schema_version.

Keys are idempotent: writing the same (run_id, sample_idx, turn_idx) twice keeps the first row, so a resumed
run never duplicates anything. JSON columns hold JSON text; `Store.turns()` returns them decoded.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from contextlib import contextmanager
from pathlib import Path

SCHEMA_VERSION = 1
DEFAULT_PATH = "xlang-runs/results.db"
STORE_ENV = "XLANG_STORE"


def default_store() -> str:
    """The results database every command uses when --store is not given: $XLANG_STORE, else DEFAULT_PATH."""
    return os.environ.get(STORE_ENV) or DEFAULT_PATH

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    created_at REAL NOT NULL,
    task TEXT NOT NULL,
    lang TEXT NOT NULL,
    arch TEXT NOT NULL,
    model TEXT NOT NULL,
    source TEXT NOT NULL,
    docs_level TEXT,
    turns_limit INTEGER,
    samples INTEGER,
    shape_json TEXT,
    sampling_json TEXT,
    seed INTEGER,
    profiler TEXT,
    config_json TEXT,
    versions_json TEXT,
    status TEXT NOT NULL DEFAULT 'running',
    cost_usd REAL NOT NULL DEFAULT 0,
    finished_at REAL
);
CREATE TABLE IF NOT EXISTS samples (
    run_id TEXT NOT NULL REFERENCES runs(run_id),
    sample_idx INTEGER NOT NULL,
    seed INTEGER,
    status TEXT NOT NULL DEFAULT 'running',
    note TEXT,
    best_turn INTEGER,
    best_category TEXT,
    best_speedup REAL,
    turns_done INTEGER NOT NULL DEFAULT 0,
    cost_usd REAL NOT NULL DEFAULT 0,
    started_at REAL,
    finished_at REAL,
    PRIMARY KEY (run_id, sample_idx)
);
CREATE TABLE IF NOT EXISTS turns (
    run_id TEXT NOT NULL,
    sample_idx INTEGER NOT NULL,
    turn_idx INTEGER NOT NULL,
    created_at REAL NOT NULL,
    model TEXT,
    messages_json TEXT NOT NULL,
    reply TEXT,
    code TEXT,
    build_json TEXT,
    verdict_json TEXT,
    category TEXT,
    feedback TEXT,
    speedup REAL,
    prompt_tokens INTEGER,
    completion_tokens INTEGER,
    total_tokens INTEGER,
    cost_usd REAL NOT NULL DEFAULT 0,
    llm_seconds REAL,
    build_seconds REAL,
    eval_seconds REAL,
    wall_seconds REAL,
    sampling_json TEXT,
    seed INTEGER,
    error TEXT,
    PRIMARY KEY (run_id, sample_idx, turn_idx),
    FOREIGN KEY (run_id, sample_idx) REFERENCES samples(run_id, sample_idx)
);
CREATE INDEX IF NOT EXISTS turns_category ON turns(category);
CREATE INDEX IF NOT EXISTS runs_key ON runs(task, lang, arch, model);
CREATE VIEW IF NOT EXISTS turn_view AS
    SELECT r.task, r.lang, r.arch, r.model AS run_model, r.source, r.docs_level, r.profiler, t.*
    FROM turns t JOIN runs r USING (run_id);
"""

_JSON_COLUMNS = {"messages_json", "build_json", "verdict_json", "sampling_json", "shape_json", "config_json",
                 "versions_json"}
_TURN_COLUMNS = ("model", "messages_json", "reply", "code", "build_json", "verdict_json", "category", "feedback",
                 "speedup", "prompt_tokens", "completion_tokens", "total_tokens", "cost_usd", "llm_seconds",
                 "build_seconds", "eval_seconds", "wall_seconds", "sampling_json", "seed", "error")
_RUN_COLUMNS = ("task", "lang", "arch", "model", "source", "docs_level", "turns_limit", "samples", "shape_json",
                "sampling_json", "seed", "profiler", "config_json", "versions_json")


def _dump(value):
    return None if value is None else json.dumps(value, default=str)


def _row(cursor, row) -> dict:
    out = {}
    for (name, *_), value in zip(cursor.description, row):
        if name in _JSON_COLUMNS:
            out[name.removesuffix("_json")] = json.loads(value) if value is not None else None
        else:
            out[name] = value
    return out


class Store:
    """The results database. Thread-safe: one connection, writes serialised by a lock.

    with Store(path) as store:
        store.create_run(run_id, task=..., ...)
        with store.transaction():       # optional: group writes; nested blocks join the outer one
            store.add_turn(run_id, 0, 1, messages=[...], reply=..., verdict=v.to_dict(), ...)
        store.turns(run_id=run_id)      # list of dicts, JSON columns decoded (messages, build, verdict, ...)
    """

    def __init__(self, path: str | os.PathLike = DEFAULT_PATH, readonly: bool = False):
        self.path = Path(path)
        self._lock = threading.RLock()
        self._depth = 0
        if readonly:  # a reader that never writes (not even the schema); the file must exist
            if not self.path.is_file():
                raise FileNotFoundError(f"no results database at {self.path}")
            self._conn = sqlite3.connect(f"file:{self.path.resolve()}?mode=ro", uri=True, timeout=60,
                                         isolation_level=None, check_same_thread=False)
            self._conn.execute("PRAGMA busy_timeout=60000")
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(str(self.path), timeout=60, isolation_level=None, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.execute("PRAGMA foreign_keys=ON")
        self._conn.execute("PRAGMA busy_timeout=60000")
        with self.transaction():
            for stmt in _SCHEMA.split(";"):
                if stmt.strip():
                    self._conn.execute(stmt)
            row = self._conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
            if row is None:
                self._conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            elif int(row[0]) > SCHEMA_VERSION:
                raise RuntimeError(f"{self.path}: schema version {row[0]} is newer than this xlang ({SCHEMA_VERSION})")

    # -- lifecycle -------------------------------------------------------------------------------------------
    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextmanager
    def transaction(self):
        """BEGIN IMMEDIATE ... COMMIT (ROLLBACK on an exception). Nested blocks join the outermost one."""
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield self
                finally:
                    self._depth -= 1
                return
            self._conn.execute("BEGIN IMMEDIATE")
            self._depth = 1
            try:
                yield self
            except BaseException:
                self._depth = 0
                self._conn.execute("ROLLBACK")
                raise
            self._depth = 0
            self._conn.execute("COMMIT")

    def _execute(self, sql: str, params=()) -> sqlite3.Cursor:
        with self.transaction():
            return self._conn.execute(sql, params)

    def _query(self, sql: str, params=()) -> list[dict]:
        with self._lock:
            cur = self._conn.execute(sql, params)
            return [_row(cur, r) for r in cur.fetchall()]

    # -- runs --------------------------------------------------------------------------------------------------
    def create_run(self, run_id: str, *, task: str, lang: str, arch: str, model: str, source: str,
                   docs_level: str | None = None, turns_limit: int | None = None, samples: int | None = None,
                   shape: dict | None = None, sampling: dict | None = None, seed: int | None = None,
                   profiler: str | None = None, config: dict | None = None, versions: dict | None = None) -> bool:
        """Insert the run; False (and nothing changed) when run_id exists already (a resumed run)."""
        values = dict(task=task, lang=lang, arch=arch, model=model, source=source, docs_level=docs_level,
                      turns_limit=turns_limit, samples=samples, shape_json=_dump(shape), sampling_json=_dump(sampling),
                      seed=seed, profiler=profiler, config_json=_dump(config), versions_json=_dump(versions))
        cur = self._execute(
            f"INSERT OR IGNORE INTO runs (run_id, created_at, {', '.join(_RUN_COLUMNS)}) "
            f"VALUES (?, ?, {', '.join('?' * len(_RUN_COLUMNS))})",
            (run_id, time.time(), *[values[c] for c in _RUN_COLUMNS]))
        return cur.rowcount == 1

    def finish_run(self, run_id: str, status: str = "done") -> None:
        self._execute("UPDATE runs SET status=?, finished_at=?, cost_usd=(SELECT COALESCE(SUM(cost_usd), 0) FROM "
                      "turns WHERE run_id=?) WHERE run_id=?", (status, time.time(), run_id, run_id))

    def run(self, run_id: str) -> dict | None:
        rows = self._query("SELECT * FROM runs WHERE run_id=?", (run_id,))
        return rows[0] if rows else None

    def runs(self, **where) -> list[dict]:
        sql, params = _where(where, ("run_id", "task", "lang", "arch", "model", "source", "status"))
        return self._query(f"SELECT * FROM runs{sql} ORDER BY created_at, run_id", params)

    # -- samples -----------------------------------------------------------------------------------------------
    def start_sample(self, run_id: str, sample_idx: int, seed: int | None = None) -> bool:
        cur = self._execute("INSERT OR IGNORE INTO samples (run_id, sample_idx, seed, started_at) VALUES (?, ?, ?, ?)",
                            (run_id, sample_idx, seed, time.time()))
        return cur.rowcount == 1

    def update_sample(self, run_id: str, sample_idx: int, **fields) -> None:
        allowed = {"status", "note", "best_turn", "best_category", "best_speedup", "finished_at"}
        bad = set(fields) - allowed
        assert not bad, bad
        sets = [f"{k}=?" for k in fields] + [
            "turns_done=(SELECT COUNT(*) FROM turns WHERE run_id=? AND sample_idx=?)",
            "cost_usd=(SELECT COALESCE(SUM(cost_usd), 0) FROM turns WHERE run_id=? AND sample_idx=?)"]
        self._execute(f"UPDATE samples SET {', '.join(sets)} WHERE run_id=? AND sample_idx=?",
                      (*fields.values(), run_id, sample_idx, run_id, sample_idx, run_id, sample_idx))

    def samples(self, run_id: str | None = None) -> list[dict]:
        sql, params = _where({"run_id": run_id}, ("run_id",))
        return self._query(f"SELECT * FROM samples{sql} ORDER BY run_id, sample_idx", params)

    # -- turns -------------------------------------------------------------------------------------------------
    def add_turn(self, run_id: str, sample_idx: int, turn_idx: int, *, messages: list[dict], reply: str | None = None,
                 code: str | None = None, build: dict | None = None, verdict: dict | None = None,
                 category: str | None = None, feedback: str | None = None, speedup: float | None = None,
                 prompt_tokens: int | None = None, completion_tokens: int | None = None,
                 total_tokens: int | None = None, cost_usd: float = 0.0, llm_seconds: float | None = None,
                 build_seconds: float | None = None, eval_seconds: float | None = None,
                 wall_seconds: float | None = None, model: str | None = None, sampling: dict | None = None,
                 seed: int | None = None, error: str | None = None) -> bool:
        """Insert one turn; False (nothing written) when that (run, sample, turn) is stored already."""
        if category is None and verdict is not None:
            category = verdict.get("category")
        values = dict(model=model, messages_json=_dump(messages), reply=reply, code=code, build_json=_dump(build),
                      verdict_json=_dump(verdict), category=category, feedback=feedback, speedup=speedup,
                      prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, total_tokens=total_tokens,
                      cost_usd=float(cost_usd or 0.0), llm_seconds=llm_seconds, build_seconds=build_seconds,
                      eval_seconds=eval_seconds, wall_seconds=wall_seconds, sampling_json=_dump(sampling), seed=seed,
                      error=error)
        cur = self._execute(
            f"INSERT OR IGNORE INTO turns (run_id, sample_idx, turn_idx, created_at, {', '.join(_TURN_COLUMNS)}) "
            f"VALUES (?, ?, ?, ?, {', '.join('?' * len(_TURN_COLUMNS))})",
            (run_id, sample_idx, turn_idx, time.time(), *[values[c] for c in _TURN_COLUMNS]))
        return cur.rowcount == 1

    def turns(self, run_id: str | None = None, sample_idx: int | None = None, *, messages: bool = True,
              **where) -> list[dict]:
        """Turns (with their run's task, lang, arch, run_model, source, docs_level, profiler), in order.
        Filters: run_id, sample_idx, turn_idx, task, lang, arch, run_model, category, source, docs_level.
        messages=False leaves out the prompts (the bulk of the data) for a lighter read."""
        where = {"run_id": run_id, "sample_idx": sample_idx, **where}
        sql, params = _where(where, ("run_id", "sample_idx", "turn_idx", "task", "lang", "arch", "run_model",
                                     "category", "source", "docs_level"))
        cols = "*" if messages else ", ".join(c for c in self._turn_view_columns() if c != "messages_json")
        return self._query(f"SELECT {cols} FROM turn_view{sql} ORDER BY run_id, sample_idx, turn_idx", params)

    def _turn_view_columns(self) -> list[str]:
        with self._lock:
            return [r[1] for r in self._conn.execute("PRAGMA table_info(turn_view)")]

    def run_cost(self, run_id: str) -> float:
        with self._lock:
            return float(self._conn.execute("SELECT COALESCE(SUM(cost_usd), 0) FROM turns WHERE run_id=?",
                                            (run_id,)).fetchone()[0])


def _where(where: dict, allowed: tuple[str, ...]) -> tuple[str, tuple]:
    bad = set(where) - set(allowed)
    if bad:
        raise ValueError(f"unknown filter(s) {sorted(bad)}; allowed: {', '.join(allowed)}")
    items = [(k, v) for k, v in where.items() if v is not None]
    if not items:
        return "", ()
    return " WHERE " + " AND ".join(f"{k}=?" for k, _ in items), tuple(v for _, v in items)
