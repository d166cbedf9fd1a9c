"""Consoles for the commands: the terminal's width on a terminal; piped, wide enough that no table is cut
(rich would assume 80 columns), unless COLUMNS says otherwise."""

from __future__ import annotations

import os
import sys

PIPED_WIDTH = 400


def make_console(stderr: bool = False):
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    tty = hasattr(stream, "isatty") and stream.isatty()
    width = None if tty or os.environ.get("COLUMNS", "").isdigit() else PIPED_WIDTH
    return Console(stderr=stderr, width=width)


def keep_words(table, console):
    """Fix column widths so that a table narrower than its natural width wraps cells between words and never cuts
    one ('attn_bw/d', 'sm_100/a' is what rich's own shrinking does): every column gets its longest word, the
    room left is shared in proportion to what each column would need beyond that. Call after adding the rows."""
    from rich.text import Text

    def plain(cell) -> str:
        return cell.plain if isinstance(cell, Text) else Text.from_markup(str(cell)).plain

    cols = table.columns
    texts = [[plain(col.header), *map(plain, col.cells)] for col in cols]
    longest_word = [max((len(w) for t in ts for w in t.split()), default=1) for ts in texts]
    longest_line = [max((len(ln) for t in ts for ln in t.splitlines()), default=1) for ts in texts]
    mins = [line if col.no_wrap else word for col, word, line in zip(cols, longest_word, longest_line)]
    # the outer edges, the rules between columns, and one space of padding each side of every cell
    frame = (2 if table.box and table.show_edge else 0) + (len(cols) - 1 if table.box else 0) + 2 * len(cols)
    room = console.width - frame
    if sum(longest_line) <= room or sum(mins) > room:
        return table  # fits as it is; or not even the words fit: rich's own layout
    grow = [line - low for line, low in zip(longest_line, mins)]
    extra, total = room - sum(mins), sum(grow) or 1
    widths = [low + g * extra // total for low, g in zip(mins, grow)]
    for col, w in zip(cols, widths):
        col.width = w
    return table


def column_groups(headers: list[str], rows: list[list[str]], keys: int, width: int) -> list[list[int]]:
    """Split a table's columns (after the first `keys`, repeated in each part) into parts that each fit `width`
    when every column is as narrow as its longest word (rule-less table: 2 of padding + 1 between columns)."""
    words = [max((len(w) for t in [h, *(r[i] for r in rows)] for w in t.split()), default=1)
             for i, h in enumerate(headers)]
    cost = [w + 3 for w in words]
    base = sum(cost[:keys])
    groups: list[list[int]] = []
    current: list[int] = []
    for i in range(keys, len(headers)):
        if current and base + sum(cost[j] for j in current) + cost[i] > width + 1:
            groups.append(current)
            current = []
        current.append(i)
    return [list(range(keys)) + g for g in groups + [current]]
