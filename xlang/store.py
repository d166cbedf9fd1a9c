"""The results database (SQLite): runs, samples and every turn of every trajectory.

Shared by the agent loop (writer) and the reports (reader). One file, WAL mode, FULL sync: every committed
transaction survives a SIGKILL of the writer at any point; readers in other processes never block the writer.

Schema (version 4; version 2 added runs.context, samples.prompt_variant, turns.reasoning_tokens and
turns.reasoning; version 3 added runs.notes_level and turns.notes_json; version 4 added runs.superseded_by):

  runs     one `xlang run` invocation (or a resumed one: the same run_id).
           run_id PK · created_at · task · lang · arch · model (as given: litellm string, 'reference',
           'replay:...') · source ('llm' | 'reference' | 'replay') · docs_level · turns_limit · samples ·
           shape_json · sampling_json (temperature, max_tokens, ...) · seed (base; sample k uses seed+k) ·
           profiler · config_json (everything else: stop_on_ok, max_cost, concurrency, replay_of, ...) ·
           versions_json (python, litellm, triton, nvcc, ...) · status ('running' | 'done' | 'budget' |
           'error') · cost_usd · finished_at · context (the context policy: trimmed | full | latest-pair |
           single-user) · notes_level (fix-note retrieval: none | bm25 | bm25+kernel; NULL: none) ·
           superseded_by (the run that judged the same compare cell again, under another toolchain, with runtime
           now available, or by --rerun; NULL: current. Reports leave superseded runs out; nothing is deleted)
  samples  one trajectory.  PK (run_id, sample_idx) · seed · status ('running' | 'done' | 'missing' |
           'budget' | 'error') · note · best_turn · best_category · best_speedup · turns_done ·
           cost_usd · started_at · finished_at · prompt_variant (the named prompt variant of this sample)
  turns    one model reply and its judgement.  PK (run_id, sample_idx, turn_idx) (turn_idx from 1) ·
           created_at · model (as the provider reported it) · messages_json (the exact prompt: a list of
           {role, content}) · reply (raw text) · code (extracted candidate, NULL when none) · build_json
           (BuildResult.to_dict(), NULL when nothing was built) · verdict_json (Verdict.to_dict()) ·
           category (= verdict category) · feedback (the text sent back to the model next turn) ·
           speedup · prompt_tokens · completion_tokens · total_tokens · cost_usd · llm_seconds ·
           build_seconds · eval_seconds · wall_seconds · sampling_json · seed · error (provider error text
           when the reply could not be obtained) · reasoning_tokens (the provider's count, part of
           completion_tokens) · reasoning (the reasoning text the provider returned) · notes_json (the fix
           notes added to this turn's feedback: a list of {id, score, category, task, lang, arch}; NULL: none)
  meta     key/value: schema_version.

Readers (`Store(path, readonly=True)`: report, trajectory, replay) open the file with SQLite's mode=ro (immutable
on read-only media) and never change it; a file that is not a store, is damaged, lacks a table or has a newer
schema version is refused with one line (StoreError); an older one (a published report's) is read through an
upgraded copy in memory. Writers refuse a newer version or missing tables and upgrade an older version in
place (new tables and columns added, nothing stored changed).

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

from xlang.errors import XlangError

SCHEMA_VERSION = 4
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
    finished_at REAL,
    context TEXT,
    notes_level TEXT,
    superseded_by TEXT
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
    prompt_variant TEXT,
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
    reasoning_tokens INTEGER,
    reasoning TEXT,
    notes_json TEXT,
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
                 "versions_json", "notes_json"}
_TURN_COLUMNS = ("model", "messages_json", "reply", "code", "build_json", "verdict_json", "category", "feedback",
                 "speedup", "prompt_tokens", "completion_tokens", "total_tokens", "cost_usd", "llm_seconds",
                 "build_seconds", "eval_seconds", "wall_seconds", "sampling_json", "seed", "error", "reasoning_tokens",
                 "reasoning", "notes_json")
_RUN_COLUMNS = ("task", "lang", "arch", "model", "source", "docs_level", "turns_limit", "samples", "shape_json",
                "sampling_json", "seed", "profiler", "config_json", "versions_json", "context", "notes_level")


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


class StoreError(XlangError):
    """The store cannot be used as asked: not a store, damaged, of a newer schema, unwritable."""


def _reason(e: BaseException) -> str:
    return getattr(e, "strerror", None) or str(e) or type(e).__name__


def _open_readonly(path: Path) -> sqlite3.Connection:
    """A connection that can never change the file (URI mode=ro). A WAL store on read-only media (no -shm can
    be created) is opened immutable instead, which is exact only while no -wal holds unmerged commits."""
    if not path.is_file():
        raise StoreError(f"no results store at {path} (run `xlang compare` or `xlang run` first, or name another "
                         "store)")
    uri = path.resolve().as_uri()

    def connect(flags: str) -> sqlite3.Connection:
        conn = sqlite3.connect(f"{uri}?{flags}", uri=True, timeout=60, isolation_level=None,
                               check_same_thread=False)
        conn.execute("PRAGMA busy_timeout=60000")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()  # the file is opened lazily: open it now
        return conn

    try:
        return connect("mode=ro")
    except sqlite3.OperationalError as e:  # cannot open (e.g. no -shm on read-only media): try immutable
        first = e
    except sqlite3.DatabaseError as e:  # opened, but not an SQLite database (garbage, truncated)
        raise StoreError(_not_a_store(path, e)) from None
    wal = Path(f"{path}-wal")
    if wal.is_file() and wal.stat().st_size > 0:
        raise StoreError(f"cannot read {path}: {_reason(first)}; its write-ahead log {wal.name} holds commits that "
                         "need a writable folder (copy the .db and its -wal somewhere writable)")
    try:
        return connect("mode=ro&immutable=1")
    except sqlite3.DatabaseError as e:
        raise StoreError(_not_a_store(path, e)) from None


def _not_writable(path: Path, e: BaseException) -> str:
    where = next((p for p in (path, path.parent) if p.exists() and not os.access(p, os.W_OK)), None)
    return (f"cannot write to {path}: {_reason(e)}"
            + (f" ({where} is read-only; `xlang report --store {path}` reads it, a writer needs a copy elsewhere)"
               if where is not None else ""))


def _not_a_store(path: Path, e: BaseException) -> str:
    return f"{path} is not a results store ({_reason(e)})"


_TABLES = ("meta", "runs", "samples", "turns", "turn_view")


def _check_schema(conn: sqlite3.Connection, path: Path, writer: bool) -> int | None:
    """The store's schema version, after checking it can be used: None for an empty file (a writer creates it).
    Never changes the file. A reader needs every table; a writer refuses a newer version or missing tables."""
    try:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
        row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone() \
            if "meta" in names else None
    except sqlite3.OperationalError as e:  # could not be opened (read-only media, a folder we cannot write)
        if writer:
            raise StoreError(_not_writable(path, e)) from None
        raise StoreError(_not_a_store(path, e)) from None
    except sqlite3.DatabaseError as e:
        raise StoreError(_not_a_store(path, e)) from None
    if not names:
        if writer:
            return None
        raise StoreError(f"{path} is empty, not a results store")
    if "meta" not in names or row is None:
        raise StoreError(f"{path} is not a results store (no schema version; tables: {', '.join(sorted(names))})")
    try:
        version = int(row[0])
    except (TypeError, ValueError):
        raise StoreError(f"{path} has an unknown schema version '{row[0]}'") from None
    if version > SCHEMA_VERSION:
        raise StoreError(f"{path} has schema version {version}, newer than this xlang's ({SCHEMA_VERSION}): "
                         "upgrade xlang to use it")
    missing = [t for t in _TABLES if t not in names]
    if missing and version == SCHEMA_VERSION:  # an older version may lack tables added since: _upgrade adds them
        raise StoreError(f"{path} is damaged: missing {', '.join(missing)} (nothing was changed)")
    return version


def _create_schema(conn: sqlite3.Connection) -> None:
    for stmt in _SCHEMA.split(";"):
        if stmt.strip():
            conn.execute(stmt)


def _upgrade(conn: sqlite3.Connection, version: int) -> None:
    """Writer only, inside a transaction: bring an older store to SCHEMA_VERSION. Tables added since are
    created, columns added since are appended (ALTER TABLE ADD COLUMN); nothing stored is changed."""
    want = sqlite3.connect(":memory:")
    _create_schema(want)
    _create_schema(conn)  # IF NOT EXISTS: only what is missing
    for (table,) in want.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall():
        have = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
        for _, name, kind, notnull, default, _pk in want.execute(f"PRAGMA table_info({table})"):
            if name not in have:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}"
                             + (" NOT NULL" if notnull else "") + (f" DEFAULT {default}" if default is not None else ""))
    want.close()
    conn.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(SCHEMA_VERSION),))


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
        self.readonly = readonly
        self._lock = threading.RLock()
        self._depth = 0
        if self.path.is_dir():
            raise StoreError(f"{self.path} is a directory, not a results store (pass the .db file)")
        if readonly:
            self._conn = _open_readonly(self.path)
            try:
                version = _check_schema(self._conn, self.path, writer=False)
                if version is not None and version < SCHEMA_VERSION:
                    # An older store (a published report's, say) is read through an upgraded copy in memory:
                    # the file itself is never changed.
                    copy = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
                    self._conn.backup(copy)
                    self._conn.close()
                    self._conn = copy
                    copy.execute("BEGIN")
                    _upgrade(copy, version)
                    copy.execute("COMMIT")
            except sqlite3.Error as e:
                self._conn.close()
                raise StoreError(_not_a_store(self.path, e)) from None
            except BaseException:
                self._conn.close()
                raise
            return
        if self.path.is_file() and self.path.stat().st_size == 0:  # a new store is made only where no file is
            raise StoreError(f"{self.path} is an empty file (0 bytes), not a results store: remove it for a new "
                             "store there, or name another store")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(str(self.path), timeout=60, isolation_level=None, check_same_thread=False)
        except (OSError, sqlite3.Error) as e:
            raise StoreError(f"cannot open {self.path} for writing: {_reason(e)}") from None
        try:
            self._conn.execute("PRAGMA busy_timeout=60000")
            version = _check_schema(self._conn, self.path, writer=True)  # before anything is written
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.execute("PRAGMA foreign_keys=ON")
            with self.transaction():
                if version is None:  # a new file: create the schema
                    _create_schema(self._conn)
                    self._conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
                elif version < SCHEMA_VERSION:
                    _upgrade(self._conn, version)
        except sqlite3.Error as e:
            self._conn.close()
            raise StoreError(f"cannot write to {self.path}: {_reason(e)}") from None
        except BaseException:
            self._conn.close()
            raise

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
        if self.readonly:
            raise StoreError(f"{self.path} is open read-only")
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
        with self._errors(), self.transaction():
            return self._conn.execute(sql, params)

    def _query(self, sql: str, params=()) -> list[dict]:
        with self._errors(), self._lock:
            cur = self._conn.execute(sql, params)
            return [_row(cur, r) for r in cur.fetchall()]

    @contextmanager
    def _errors(self):
        """A damaged, truncated or unwritable file found mid-read or mid-write: one line, not a traceback."""
        try:
            yield
        except sqlite3.IntegrityError:
            raise  # our own bug (a broken key), not the file's
        except sqlite3.DatabaseError as e:
            what = "read" if self.readonly else "use"
            raise StoreError(f"cannot {what} {self.path}: {_reason(e)}") from None

    # -- runs --------------------------------------------------------------------------------------------------
    def create_run(self, run_id: str, *, task: str, lang: str, arch: str, model: str, source: str,
                   docs_level: str | None = None, turns_limit: int | None = None, samples: int | None = None,
                   shape: dict | None = None, sampling: dict | None = None, seed: int | None = None,
                   profiler: str | None = None, config: dict | None = None, versions: dict | None = None,
                   context: str | None = None, notes_level: str | None = None) -> bool:
        """Insert the run; False (and nothing changed) when run_id exists already (a resumed run)."""
        values = dict(task=task, lang=lang, arch=arch, model=model, source=source, docs_level=docs_level,
                      turns_limit=turns_limit, samples=samples, shape_json=_dump(shape), sampling_json=_dump(sampling),
                      seed=seed, profiler=profiler, config_json=_dump(config), versions_json=_dump(versions),
                      context=context, notes_level=notes_level)
        cur = self._execute(
            f"INSERT OR IGNORE INTO runs (run_id, created_at, {', '.join(_RUN_COLUMNS)}) "
            f"VALUES (?, ?, {', '.join('?' * len(_RUN_COLUMNS))})",
            (run_id, time.time(), *[values[c] for c in _RUN_COLUMNS]))
        return cur.rowcount == 1

    def finish_run(self, run_id: str, status: str = "done") -> None:
        self._execute("UPDATE runs SET status=?, finished_at=?, cost_usd=(SELECT COALESCE(SUM(cost_usd), 0) FROM "
                      "turns WHERE run_id=?) WHERE run_id=?", (status, time.time(), run_id, run_id))

    def supersede(self, run_ids, by: str) -> None:
        """Mark runs as judged again by run `by` (a compare cell judged anew); their rows are kept."""
        with self.transaction():
            for run_id in run_ids:
                if run_id != by:
                    self._execute("UPDATE runs SET superseded_by=? WHERE run_id=?", (by, run_id))

    def run(self, run_id: str) -> dict | None:
        rows = self._query("SELECT * FROM runs WHERE run_id=?", (run_id,))
        return rows[0] if rows else None

    def runs(self, **where) -> list[dict]:
        sql, params = _where(where, ("run_id", "task", "lang", "arch", "model", "source", "status"))
        return self._query(f"SELECT * FROM runs{sql} ORDER BY created_at, run_id", params)

    # -- samples -----------------------------------------------------------------------------------------------
    def start_sample(self, run_id: str, sample_idx: int, seed: int | None = None,
                     prompt_variant: str | None = None) -> bool:
        cur = self._execute("INSERT OR IGNORE INTO samples (run_id, sample_idx, seed, started_at, prompt_variant) "
                            "VALUES (?, ?, ?, ?, ?)", (run_id, sample_idx, seed, time.time(), prompt_variant))
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
                 seed: int | None = None, error: str | None = None, reasoning_tokens: int | None = None,
                 reasoning: str | None = None, notes: list | None = None) -> bool:
        """Insert one turn; False (nothing written) when that (run, sample, turn) is stored already."""
        if category is None and verdict is not None:
            category = verdict.get("category")
        values = dict(model=model, messages_json=_dump(messages), reply=reply, code=code, build_json=_dump(build),
                      verdict_json=_dump(verdict), category=category, feedback=feedback, speedup=speedup,
                      prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, total_tokens=total_tokens,
                      cost_usd=float(cost_usd or 0.0), llm_seconds=llm_seconds, build_seconds=build_seconds,
                      eval_seconds=eval_seconds, wall_seconds=wall_seconds, sampling_json=_dump(sampling), seed=seed,
                      error=error, reasoning_tokens=reasoning_tokens, reasoning=reasoning, notes_json=_dump(notes))
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
        with self._errors(), self._lock:
            return [r[1] for r in self._conn.execute("PRAGMA table_info(turn_view)")]

    def run_cost(self, run_id: str) -> float:
        with self._errors(), self._lock:
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
