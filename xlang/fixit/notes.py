"""Fix-note retrieval for the agent loop: BM25 (bm25s) over notes written from earlier repairs.

A notes store is a JSONL file (`xlang fixit export` writes one: notes.jsonl), one note per line
(schemas/note.schema.json): {id, category, task, lang, arch, error, note, fixed_code, ...}. A note's document is its
error text, category, task, language and architecture; after a failed turn the query is that turn's error text (the
verdict's detail), category, task, language and architecture, and the top-k notes with a positive score are added to
the feedback: the notes alone (`bm25`) or each with its fixed kernel (`bm25+kernel`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from xlang.errors import XlangError

LEVELS = ("none", "bm25", "bm25+kernel")
DEFAULT_K = 3
_ERROR_CHARS = 4000  # of a query's or a note's error text


def _text(*parts) -> str:
    out = []
    for p in parts:
        p = str(p or "")
        out.append(p.replace("_", " ") + " " + p if "_" in p else p)  # compile_error: also 'compile error'
    return " ".join(out)


def note_document(note: dict) -> str:
    return _text((note.get("error") or "")[:_ERROR_CHARS], note.get("category"), note.get("task"), note.get("lang"),
                 note.get("arch"))


def read_notes(path: str | Path) -> list[dict]:
    """The notes of a notes store (JSONL); a missing or malformed file is one clear XlangError."""
    p = Path(path)
    if not p.is_file():
        raise XlangError(f"--notes-store {p}: no such notes file (`xlang fixit export` writes notes.jsonl)")
    notes = []
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            note = json.loads(line)
        except json.JSONDecodeError as e:
            raise XlangError(f"--notes-store {p}: line {n} is not JSON ({e.msg})") from None
        if not isinstance(note, dict) or not note.get("id") or not note.get("note"):
            raise XlangError(f"--notes-store {p}: line {n} is not a note (needs at least id and note)")
        notes.append(note)
    return notes


@dataclass
class Hit:
    note: dict
    score: float

    def record(self) -> dict:
        """What the store keeps of a shown note (turns.notes_json)."""
        n = self.note
        return {"id": n["id"], "score": round(float(self.score), 4), "category": n.get("category"),
                "task": n.get("task"), "lang": n.get("lang"), "arch": n.get("arch")}


class NoteIndex:
    """BM25 over a list of notes. search() returns the top-k notes with a positive score, best first."""

    def __init__(self, notes: list[dict], source: str = ""):
        # bm25s imports JAX when it is installed and runs a top-k with it at import: on a GPU machine JAX then
        # takes the GPU (a context and most of its memory) in the loop's own process, and every later verdict
        # sees a foreign process on the GPU (H200, 2026-11-30: forbidden_call). JAX stays on the CPU here.
        os.environ["JAX_PLATFORMS"] = "cpu"
        try:
            import bm25s
        except ImportError:
            raise XlangError("--notes needs the bm25s package: pip install 'xlang[fixit]'") from None

        self.notes = list(notes)
        self.source = source
        self._bm25s = bm25s
        self._retriever = None
        if self.notes:
            self._retriever = bm25s.BM25()
            self._retriever.index(self._tokenize([note_document(n) for n in self.notes]), show_progress=False)

    @classmethod
    def from_file(cls, path: str | Path) -> "NoteIndex":
        return cls(read_notes(path), str(path))

    def _tokenize(self, texts: list[str]):
        return self._bm25s.tokenize([t.lower() for t in texts], stopwords="en", show_progress=False)

    def search(self, *, error: str, category: str, task: str, lang: str, arch: str, k: int = DEFAULT_K) -> list[Hit]:
        if self._retriever is None or k < 1:
            return []
        query = _text((error or "")[:_ERROR_CHARS], category, task, lang, arch)
        tokens = self._tokenize([query])
        if not any(len(ids) for ids in tokens.ids):
            return []
        k = min(k, len(self.notes))
        docs, scores = self._retriever.retrieve(tokens, k=k, show_progress=False, n_threads=1,
                                                 backend_selection="numpy")
        hits = [Hit(self.notes[int(i)], float(s)) for i, s in zip(docs[0], scores[0]) if float(s) > 0.0]
        return sorted(hits, key=lambda h: -h.score)


def notes_feedback(hits: list[Hit], level: str, fence: str) -> str:
    """The section added to a failed turn's feedback."""
    if not hits or level == "none":
        return ""
    lines = ["## Notes from earlier fixes of similar failures",
             "Retrieved by similarity of the error; they may or may not apply to your code."]
    for i, h in enumerate(hits, 1):
        n = h.note
        where = " · ".join(str(n.get(x)) for x in ("task", "lang", "arch") if n.get(x))
        lines.append(f"**Note {i}** ({n.get('category') or '?'}; {where}):\n{n['note'].strip()}")
        if level == "bm25+kernel" and n.get("fixed_code"):
            lines.append(f"The fixed kernel of note {i}:\n```{fence}\n{n['fixed_code'].rstrip()}\n```")
    return "\n\n".join(lines)




def check_level(level: str, store: str | None) -> None:
    if level not in LEVELS:
        raise XlangError(f"--notes {level}: unknown (one of: {', '.join(LEVELS)})")
    if level != "none" and not store:
        raise XlangError(f"--notes {level} needs --notes-store PATH (a notes.jsonl from `xlang fixit export`)")
