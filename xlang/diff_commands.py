"""`xlang diff` and `xlang readiness` on the command line, and the files `xlang diff --out` writes (index.html,
diff.md, CSVs). What is compared and how: xlang/diff.py."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import pandas as pd

from xlang.diff import Diff, candidates, diff, fired, parse_rules, readiness
from xlang.errors import XlangError
from xlang.terminal import make_console


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, bool):
        return "yes" if v else ""
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() and abs(v) < 1e15 else f"{v:.3g}"
    return str(v)


def _share(v) -> str:
    return "" if v is None or pd.isna(v) else f"{v * 100:.0f}%"


def readiness_display(r: pd.DataFrame) -> pd.DataFrame:
    if r.empty:
        return r
    out = r[["store", "lang", "arch", "toolchain", "candidates"]].copy()
    out["compiles"] = r["compiles"].map(_share)
    out["required families in SASS"] = r["required families in SASS"].map(_share)
    out["executes them (runtime ran)"] = [f"{_share(e)} of {n}" if n else "not run (no runtime verdict)"
                                          for e, n in zip(r["executes them"], r["runtime ran"])]
    out["experts' speed vs vendor"] = [
        "not run (no timed expert)" if not n else f"{p:.3f}x" + (f" [{lo:.3f}, {hi:.3f}]" if lo is not None
                                                                and not pd.isna(lo) else "") + f" (n={n})"
        for p, lo, hi, n in zip(r["experts' speed vs vendor"], r["experts' speed lo"], r["experts' speed hi"],
                                r["experts timed"])]
    return out


def _changed(c: pd.DataFrame) -> pd.DataFrame:
    """The candidates with anything to say, with the columns a reader needs first."""
    if c.empty or "gained" not in c:
        return c
    keep = (c["old"] != c["new"]) | (c["gained"].fillna("") != "") | (c["lost"].fillna("") != "") \
        | (pd.to_numeric(c["SASS mix shift"], errors="coerce").fillna(0) > 0) \
        | (c["registers old"].astype(str) != c["registers new"].astype(str))
    cols = ["task", "lang", "arch", "candidate", "old", "new", "gained", "lost", "family counts changed",
            "instructions old",
            "instructions new", "registers old", "registers new", "spill bytes old", "spill bytes new",
            "SASS mix shift", "top opcode changes", "compile s old", "compile s new", "speed ratio"]
    return c[keep][[x for x in cols if x in c]]


def write(d: Diff, out: Path, title: str | None = None) -> dict:
    """index.html, diff.md and CSVs (candidates, summary, readiness) in out."""
    from jinja2 import Environment, select_autoescape  # lazy: only the HTML page needs it

    out.mkdir(parents=True, exist_ok=True)
    files = {"candidates": out / "candidates.csv", "summary": out / "summary.csv", "readiness": out / "readiness.csv"}
    d.candidates.to_csv(files["candidates"], index=False)
    d.summary.to_csv(files["summary"], index=False)
    d.readiness.to_csv(files["readiness"], index=False)
    title = title or f"xlang diff: {Path(d.old).name} -> {Path(d.new).name}"
    changed = _changed(d.candidates)
    tables = {"readiness": readiness_display(d.readiness), "changed": changed}

    def md_table(df: pd.DataFrame) -> str:
        if df.empty:
            return "(none)\n"
        lines = ["| " + " | ".join(map(str, df.columns)) + " |", "|" + " --- |" * len(df.columns)]
        lines += ["| " + " | ".join(_fmt(v).replace("|", "/") for v in row) + " |" for row in df.itertuples(index=False)]
        return "\n".join(lines) + "\n"

    md = [f"# {title}\n", f"old: `{d.old}`  \nnew: `{d.new}`\n", "## Summary per language x architecture\n"]
    md += [f"- {s}" for s in d.sentences()] + [""]
    md += ["## Readiness per language, architecture and toolchain\n", md_table(tables["readiness"])]
    md += [f"## Candidates that changed ({len(changed)} of {len(d.candidates)}; every candidate: candidates.csv)\n",
           md_table(changed)]
    if d.only_new:
        md += [f"{len(d.only_new)} candidate(s) of the new store have no match in the old one.\n"]
    (out / "diff.md").write_text("\n".join(md))
    env = Environment(autoescape=select_autoescape(default=True, default_for_string=True))
    html = env.from_string(_HTML).render(
        title=title, old=d.old, new=d.new, sentences=d.sentences(), only_new=len(d.only_new),
        total=len(d.candidates),
        tables=[(name, list(df.columns), [[_fmt(v) for v in row] for row in df.itertuples(index=False)])
                for name, df in (("Readiness per language, architecture and toolchain", tables["readiness"]),
                                 (f"Candidates that changed ({len(changed)})", changed))])
    (out / "index.html").write_text(html)
    return {**files, "markdown": out / "diff.md", "html": out / "index.html"}


_HTML = """<!doctype html><html><head><meta charset="utf-8"><title>{{ title }}</title>
<style>body{font-family:system-ui,sans-serif;margin:1.5em;max-width:1400px}table{border-collapse:collapse;
font-size:.85em;margin-bottom:2em}td,th{border-bottom:1px solid #ddd;padding:.25em .5em;text-align:left}
th{background:#f4f4f4}div.scroll{overflow-x:auto}</style></head><body>
<h1>{{ title }}</h1><p>old: <code>{{ old }}</code><br>new: <code>{{ new }}</code></p>
<h2>Summary per language x architecture</h2><ul>{% for s in sentences %}<li>{{ s }}</li>{% endfor %}</ul>
{% if only_new %}<p>{{ only_new }} candidate(s) of the new store have no match in the old one.</p>{% endif %}
{% for name, cols, rows in tables %}<h2>{{ name }}</h2><div class="scroll"><table><tr>{% for c in cols %}<th>{{ c }}</th>
{% endfor %}</tr>{% for row in rows %}<tr>{% for v in row %}<td>{{ v }}</td>{% endfor %}</tr>{% endfor %}</table></div>
{% endfor %}<p>Every candidate ({{ total }}): candidates.csv; the summary: summary.csv; readiness: readiness.csv.</p>
</body></html>"""


def register(app) -> None:
    import typer  # lazy: the command line's, not a library caller's

    @app.command("diff")
    def diff_command(
        old: Path = typer.Argument(..., help="the store judged under the old toolchain"),
        new: Path = typer.Argument(..., help="the store judged under the new one (e.g. by xlang rejudge)"),
        out: Optional[Path] = typer.Option(None, "--out", help="write index.html, diff.md and CSVs here"),
        fail_on: Optional[str] = typer.Option(None, "--fail-on", help="exit 1 when a rule fires: lost-family, "
                                                                      "compile-error, slower:X%, unmatched"),
        title: Optional[str] = typer.Option(None, "--title", help="the report's title"),
        allow_unmatched: bool = typer.Option(False, "--allow-unmatched",
                                             help="exit 0 when some candidates have no match in the other store "
                                                  "(by default: exit 1; nothing matched at all: exit 2)"),
    ):
        """What another toolchain changed on the same candidates: categories, instruction families, registers,
        spills, SASS mix, compile time and speed, per candidate and per language x architecture. The two stores must
        hold the same candidates (a corpus and its rejudge): unmatched candidates are an error unless
        --allow-unmatched."""
        rules = parse_rules(fail_on)
        console = make_console()
        d = diff(old, new)
        unmatched = d.unmatched_text()
        if unmatched and not d.matched and not allow_unmatched:  # nothing to compare: two different corpora
            raise XlangError(f"{unmatched}: nothing to compare (other architectures, tasks or candidates? `xlang "
                             "rejudge OLD.db --store NEW.db` judges the same candidates again); --allow-unmatched "
                             "writes the diff anyway")
        for s in d.sentences():
            console.print(f"- {s}", highlight=False)
        if out is not None:
            files = write(d, out, title)
            console.print(f"wrote {files['html']}, {files['markdown']}, 3 CSV", highlight=False)
        hits = fired(d.candidates, rules)
        for line in hits:
            console.print(f"[red]fail-on[/red] {line}", highlight=False)
        if unmatched:
            console.print(f"[yellow]unmatched[/yellow] {unmatched}"
                          + ("" if allow_unmatched else " (exit 1; --allow-unmatched: exit 0)"), highlight=False)
        if hits or (unmatched and not allow_unmatched):
            raise typer.Exit(1)

    @app.command("readiness")
    def readiness_command(
        stores: list[Path] = typer.Argument(..., help="results stores (one per toolchain, e.g.)"),
        out: Optional[Path] = typer.Option(None, "--out", help="also write readiness.csv here"),
    ):
        """Per language, architecture and toolchain: the share of the corpus that compiles, that carries the
        architecture's required families in SASS, that executed them, and the experts' speed vs the vendor."""
        from rich.table import Table

        r = readiness([(s, candidates(s)) for s in stores])
        display = readiness_display(r)
        table = Table(title="readiness", header_style="bold")
        for c in display.columns:
            table.add_column(str(c), overflow="fold")
        for row in display.itertuples(index=False):
            table.add_row(*[_fmt(v) for v in row])
        make_console().print(table)
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            r.to_csv(out / "readiness.csv", index=False)
