"""Every hint names an option that exists (issue 48: a hint told `xlang readiness` and `xlang diff` users to "pass
--store", an option neither has). Two checks against the typer commands themselves:

- every `xlang CMD ... --option` written in xlang's sources (every string literal, f-strings included), the
  README and docs/ names an option CMD has;
- the one-line errors of a battery of bad invocations of every command that reads or writes a store or takes
  files: each `--option` they name is an option of the command that printed it (or of the `xlang CMD` the text
  names around it)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import typer.main

from xlang.cli import app, main

ROOT = Path(__file__).resolve().parent.parent
TRAIL = "`),.;:\"'"


def _tree():
    return typer.main.get_command(app)


def _options(command) -> set[str]:
    """Its options' long names (typer's click: an option has opts, an argument has none that start with --)."""
    names = {"--help"}
    for p in command.params:
        names |= {o for o in (*p.opts, *getattr(p, "secondary_opts", ())) if o.startswith("--")}
    return names


def _resolve(words: list[str]) -> tuple[list[str], object] | None:
    command = _tree()
    path = []
    for w in words:
        if w not in getattr(command, "commands", {}):
            break
        command = command.commands[w]
        path.append(w)
    return (path, command) if path else None


def named_options(text: str, invoked: list[str] | None = None) -> list[tuple[tuple[str, ...], str]]:
    """(command path, --option) for every option the text names: inside an `xlang CMD ...` command line the
    option is CMD's; outside one it is the invoked command's (None: left out, as in a source string whose caller is
    not known). A command line ends at a closing backtick or bracket, a comma or semicolon, or a plain word that is
    no option's value."""
    tokens = text.split()
    out = []
    context: list[str] | None = None
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        core = tok.strip("`([]{}\"'").rstrip(TRAIL + "]")
        if core == "xlang" and tok.lstrip("`(\"'").startswith("xlang"):
            words = [t.strip("`([\"'").rstrip(TRAIL + "]") for t in tokens[i + 1:i + 4]]
            found = _resolve(words)
            if found:
                context = found[0]
                i += 1 + len(context)
                if tokens[i - 1][-1] in TRAIL:  # `xlang report` ends at its backtick
                    context = None
                continue
        if core.startswith("--") and re.fullmatch(r"--[a-z][a-z0-9-]*(=.*)?", core):
            owner = context if context is not None else invoked
            if owner is not None:
                out.append((tuple(owner), core.split("=")[0]))
            if context is not None and i + 1 < len(tokens) and not tokens[i + 1].startswith("-") \
                    and tok[-1] not in TRAIL:
                i += 1  # its value, whatever it looks like
                tok = tokens[i]
        elif context is not None and re.fullmatch(r"[a-z]+", core) and tok[-1] not in TRAIL:
            context = None  # a plain word: the command line is over
        if context is not None and tok[-1] in TRAIL and not tok.endswith("..."):
            context = None
        i += 1
    return out


def _missing(pairs) -> list[str]:
    bad = []
    for path, option in pairs:
        found = _resolve(list(path))
        assert found, path
        if option not in _options(found[1]):
            bad.append(f"xlang {' '.join(path)} has no {option}")
    return bad


def _source_texts():
    for path in sorted((ROOT / "xlang").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.JoinedStr):
                text = "".join(v.value if isinstance(v, ast.Constant) else "X" for v in node.values)
                yield f"{path.relative_to(ROOT)}:{node.lineno}", text
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                yield f"{path.relative_to(ROOT)}:{node.lineno}", node.value
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        if path.is_file():
            for n, line in enumerate(path.read_text().splitlines(), 1):
                yield f"{path.relative_to(ROOT)}:{n}", line


def test_the_parser_attributes_options_as_a_reader_would():
    assert named_options("run `xlang compare` or `xlang run` first, or pass --store", ["readiness"]) == \
        [(("readiness",), "--store")]
    assert named_options("see xlang report --store X.db --out DIR) for it") == \
        [(("report",), "--store"), (("report",), "--out")]
    assert named_options("`xlang fixit collect --out fixit` first") == [(("fixit", "collect"), "--out")]
    assert _missing([(("readiness",), "--store")]) == ["xlang readiness has no --store"]
    assert _missing([(("diff",), "--allow-unmatched"), (("report",), "--where")]) == []


def test_every_option_written_after_an_xlang_command_exists():
    bad = []
    for where, text in _source_texts():
        bad += [f"{where}: {m}" for m in _missing(named_options(text))]
    assert not bad, "\n".join(bad)


def _error_of(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code not in (0, None), argv
    captured = capsys.readouterr()
    return captured.err + captured.out


def _battery(tmp: Path) -> list[list[str]]:
    missing, empty, text = str(tmp / "none.db"), tmp / "empty.db", tmp / "notes.txt"
    empty.write_bytes(b"")
    text.write_text("not a store\n")
    stores = [missing, str(empty), str(text)]
    runs = []
    for s in stores:
        runs += [["readiness", s], ["diff", s, s], ["report", "--store", s], ["trajectory", "--store", s],
                 ["rejudge", s, "--store", str(tmp / "new.db")], ["fixit", "collect", "--store", s, "--out",
                                                                    str(tmp / "fixit")]]
    runs += [["compare", "--arch", "b200", "--langs", "triton", "--store", str(empty)],
             ["compare", "--arch", "b200", "--langs", "nolang"], ["compare", "--arch", "x999", "--langs", "triton"],
             ["compare", "--arch", "b200", "--langs", "triton", "--suite", "nosuch"],
             ["compare", "--arch", "b200", "--langs", "triton", "--shape", "Q=1"],
             ["rejudge", "experts", "--store", str(tmp / "new.db")],
             ["rejudge", "experts", "--task", "nosuch", "--arch", "b200", "--store", str(tmp / "new.db")],
             ["report", "--store", missing, "--where", "task=x"], ["build", str(tmp / "none.py"), "--lang", "triton",
                                                                  "--task", "gemm", "--arch", "b200"]]
    return runs


def test_every_option_an_error_names_is_an_option_of_that_command(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("XLANG_STORE", raising=False)
    bad = []
    for argv in _battery(tmp_path):
        text = _error_of(argv, capsys)
        assert text.strip(), argv
        invoked = _resolve(argv[:2])[0]
        bad += [f"{' '.join(argv)}: {m} ({text.strip()[:300]})" for m in _missing(named_options(text, invoked))]
    assert not bad, "\n".join(bad)
