"""compute-sanitizer memcheck: the command line, and a pure parser of what it prints."""

from __future__ import annotations

import re

ERROR_EXIT_CODE = 86

_PREFIX = re.compile(r"^=========\s?")
_SUMMARY = re.compile(r"ERROR SUMMARY:\s*([0-9,]+)\s+errors?")
_ERROR_HEAD = re.compile(
    r"^(Invalid\s+__\w+__\s+(?:read|write|atomic)[^\n]*|Misaligned[^\n]*|Out-of-range[^\n]*|"
    r"Malloc/Free error[^\n]*|Cuda API error[^\n]*|Barrier error[^\n]*|Invalid[^\n]*access[^\n]*|"
    r"Illegal[^\n]*|Hardware exception[^\n]*|Warp [^\n]*error[^\n]*|Device heap[^\n]*)$",
    re.I,
)
_AT = re.compile(r"^\s*at\s+(?:0x[0-9a-f]+\s+in\s+)?(\S+?)(?:\+0x[0-9a-f]+)?(?:\s+in\s+\S+)?$", re.I)
_BY = re.compile(r"by thread \(([^)]*)\) in block \(([^)]*)\)")
_API = re.compile(r"^Program hit (\S+)")


def command(sanitizer: str, child: list[str]) -> list[str]:
    return [sanitizer, "--tool", "memcheck", "--report-api-errors", "no", "--print-limit", "50",
            "--error-exitcode", str(ERROR_EXIT_CODE), "--target-processes", "all", *child]


def parse_memcheck(text: str) -> dict:
    """compute-sanitizer memcheck output -> {errors, summary_found, reports: [{kind, kernel, thread, block,
    address}], kinds: {kind: n}, api_errors}."""
    reports: list[dict] = []
    summary = None
    api_errors = 0
    current: dict | None = None
    for raw in text.splitlines():
        if not raw.startswith("========="):
            continue
        line = _PREFIX.sub("", raw).rstrip()
        m = _SUMMARY.search(line)
        if m:
            summary = int(m.group(1).replace(",", ""))
            current = None
            continue
        stripped = line.strip()
        if _API.match(stripped):
            api_errors += 1
            current = None
            continue
        head = _ERROR_HEAD.match(stripped) if not line.startswith(" ") else None
        if head:
            current = {"kind": stripped, "kernel": None, "thread": None, "block": None, "address": None}
            reports.append(current)
            continue
        if current is None:
            continue
        if current["kernel"] is None:
            m = _AT.match(stripped)
            if m:
                current["kernel"] = m.group(1)
                continue
        m = _BY.search(stripped)
        if m and current["thread"] is None:
            current["thread"], current["block"] = m.group(1), m.group(2)
            continue
        if stripped.startswith(("Address", "Access to")) and current["address"] is None:
            current["address"] = stripped
        elif current["address"] and stripped.startswith("and is") and "nearest allocation" in stripped:
            current["address"] += " " + stripped
    kinds: dict[str, int] = {}
    for r in reports:
        key = re.sub(r"\s+of size \d+ bytes?", "", r["kind"])
        kinds[key] = kinds.get(key, 0) + 1
    return {
        "errors": summary if summary is not None else len(reports),
        "summary_found": summary is not None,
        "reports": reports[:20],
        "kinds": kinds,
        "api_errors": api_errors,
    }


def describe(parsed: dict) -> str:
    """One line for a verdict: how many errors, the first one's kind, kernel, thread and address."""
    if not parsed["errors"]:
        return "memcheck clean"
    first = parsed["reports"][0] if parsed["reports"] else None
    text = f"compute-sanitizer memcheck: {parsed['errors']} error(s)"
    if first:
        text += f"; first: {first['kind']}"
        if first["kernel"]:
            text += f" in {first['kernel']}"
        if first["thread"]:
            text += f" by thread ({first['thread']}) in block ({first['block']})"
        if first["address"]:
            text += f"; {first['address']}"
    return text
