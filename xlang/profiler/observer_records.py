"""The records of the GPU observer (xlang/profiler/observer.py): one class per line kind of the CUPTI library's
record pipe, the strict parser of a line and of its HMAC frame, and the views the stages take of a call's records
(its kernels, copies, span, GPU work). Nothing here trusts a line: a malformed one is a RecordError."""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass

from xlang.errors import XlangError

MAX_LINE_BYTES = 2048  # the library's own lines are < 1100 bytes
MODULE_UNKNOWN = "-"
MAC_HEX = 16
MAX_NAME = 200


class ObserverError(XlangError):
    """The observer's record of a stage cannot be trusted (error record, timeout, forged or malformed line).
    `records` holds the flush's records when they arrived intact but contained X (error) records."""

    def __init__(self, message: str, records: list | None = None):
        super().__init__(message)
        self.records = records or []


class RecordError(ValueError):
    """One record line that does not parse."""


# ---------------------------------------------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class KernelRecord:
    start: int
    end: int
    device: int
    ctx: int
    stream: int
    corr: int
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    dyn_smem: int
    graph_id: int
    device_launched: bool
    module: str  # sha256 hex of the module's cubin, or MODULE_UNKNOWN
    name: str
    kind: str = "K"

    @property
    def duration(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class CopyRecord:
    start: int
    end: int
    device: int
    ctx: int
    stream: int
    corr: int
    bytes: int
    copy_kind: int
    kind: str = "C"


@dataclass(frozen=True)
class SetRecord:
    start: int
    end: int
    device: int
    ctx: int
    stream: int
    corr: int
    bytes: int
    kind: str = "S"


@dataclass(frozen=True)
class ModuleRecord:
    module: str
    size: int
    ctx: int
    module_id: int
    kind: str = "M"


@dataclass(frozen=True)
class ErrorRecord:
    what: str
    code: int
    kind: str = "X"


@dataclass(frozen=True)
class WarningRecord:
    what: str
    code: int
    kind: str = "W"


@dataclass(frozen=True)
class EndRecord:
    flush_no: int
    cupti_ns: int
    monotonic_ns: int
    launches: int
    kernels: int
    kind: str = "E"


Record = KernelRecord | CopyRecord | SetRecord | ModuleRecord | ErrorRecord | WarningRecord | EndRecord

_U64 = 2**64
_U32 = 2**32
_I32 = 2**31
_DIGITS = re.compile(r"[0-9]{1,20}")
_SIGNED = re.compile(r"-?[0-9]{1,20}")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_NAME = re.compile(r"[!-~]{1,%d}" % MAX_NAME)
_WHAT = re.compile(r"[A-Za-z0-9_]{1,64}")
_FRAME = re.compile(rb"([0-9]{1,20}) ([!-~][ -~]*) ([0-9a-f]{%d})" % MAC_HEX)

_FIELDS = {"K": 18, "C": 9, "S": 8, "M": 5, "W": 3, "X": 3, "E": 6}


def _uint(text: str, limit: int = _U64) -> int:
    if not _DIGITS.fullmatch(text):
        raise RecordError(f"not an unsigned integer: {text[:40]!r}")
    value = int(text)
    if value >= limit:
        raise RecordError(f"out of range: {text}")
    return value


def _dim(text: str) -> int:
    value = _uint(text, _I32)
    if value < 1:
        raise RecordError(f"launch dimension {value} < 1")
    return value


def _module(text: str) -> str:
    if text != MODULE_UNKNOWN and not _HEX64.fullmatch(text):
        raise RecordError(f"bad module hash: {text[:80]!r}")
    return text


def _interval(start: int, end: int) -> None:
    if end < start:
        raise RecordError(f"end {end} before start {start}")


def parse_line(body: str) -> Record:
    """One record body (the frame's seq and mac already removed) -> a record; RecordError if malformed."""
    if not isinstance(body, str) or len(body) > MAX_LINE_BYTES or not body.isascii():
        raise RecordError("not a short ASCII line")
    fields = body.split(" ")
    kind = fields[0]
    want = _FIELDS.get(kind)
    if want is None:
        raise RecordError(f"unknown record type {kind[:20]!r}")
    if len(fields) != want:
        raise RecordError(f"{kind} record with {len(fields)} fields, want {want}")
    f = fields[1:]
    if kind == "K":
        start, end = _uint(f[0]), _uint(f[1])
        _interval(start, end)
        if not _NAME.fullmatch(f[16]):
            raise RecordError(f"bad kernel name {f[16][:80]!r}")
        if f[14] not in ("0", "1"):
            raise RecordError(f"bad device-launched flag {f[14][:20]!r}")
        return KernelRecord(start=start, end=end, device=_uint(f[2], _U32), ctx=_uint(f[3], _U32),
                            stream=_uint(f[4], _U32), corr=_uint(f[5], _U32),
                            grid=(_dim(f[6]), _dim(f[7]), _dim(f[8])), block=(_dim(f[9]), _dim(f[10]), _dim(f[11])),
                            dyn_smem=_uint(f[12], _I32), graph_id=_uint(f[13], _U32), device_launched=f[14] == "1",
                            module=_module(f[15]), name=f[16])
    if kind in ("C", "S"):
        start, end = _uint(f[0]), _uint(f[1])
        _interval(start, end)
        common = dict(start=start, end=end, device=_uint(f[2], _U32), ctx=_uint(f[3], _U32),
                      stream=_uint(f[4], _U32), corr=_uint(f[5], _U32), bytes=_uint(f[6]))
        if kind == "C":
            return CopyRecord(**common, copy_kind=_uint(f[7], 256))
        return SetRecord(**common)
    if kind == "M":
        return ModuleRecord(module=_module(f[0]), size=_uint(f[1]), ctx=_uint(f[2], _U32), module_id=_uint(f[3], _U32))
    if kind in ("W", "X"):
        if not _WHAT.fullmatch(f[0]):
            raise RecordError(f"bad {kind} record subject {f[0][:80]!r}")
        if not _SIGNED.fullmatch(f[1]):
            raise RecordError(f"bad {kind} record code {f[1][:40]!r}")
        cls = ErrorRecord if kind == "X" else WarningRecord
        return cls(what=f[0], code=int(f[1]))
    return EndRecord(flush_no=_uint(f[0]), cupti_ns=_uint(f[1]), monotonic_ns=_uint(f[2]), launches=_uint(f[3]),
                     kernels=_uint(f[4]))


def frame_mac(key: bytes, seq: int, body: str) -> str:
    """The mac the library appends to line `seq` (first MAC_HEX hex digits of HMAC-SHA256)."""
    return hmac.new(key, f"{seq} {body}".encode("ascii"), hashlib.sha256).hexdigest()[:MAC_HEX]


def unframe(key: bytes, line: bytes, expected_seq: int) -> str:
    """Check one framed line (no newline) and return its body; RecordError if forged, out of order or malformed."""
    if len(line) > MAX_LINE_BYTES:
        raise RecordError(f"line of {len(line)} bytes")
    m = _FRAME.fullmatch(line)
    if not m:
        raise RecordError(f"unframed line {line[:80]!r}")
    seq, body, mac = int(m.group(1)), m.group(2).decode("ascii"), m.group(3).decode("ascii")
    if not hmac.compare_digest(mac, frame_mac(key, seq, body)):
        raise RecordError(f"bad mac on line {seq}")
    if seq != expected_seq:
        raise RecordError(f"line {seq} where {expected_seq} was due")
    return body


def gpu_work(records) -> list:
    """The records that took GPU time (kernels, copies, sets), in start order."""
    return sorted((r for r in records if isinstance(r, (KernelRecord, CopyRecord, SetRecord))), key=lambda r: r.start)


def span(records) -> int:
    """GPU time of one call, in ns: latest end - earliest start over its kernels, copies and sets (0 if none)."""
    timed = gpu_work(records)
    if not timed:
        return 0
    if any(r.start == 0 or r.end == 0 for r in timed):
        raise ObserverError("a GPU activity record has no timestamps (CUPTI could not time it)")
    return max(r.end for r in timed) - min(r.start for r in timed)


# CUpti_ActivityMemcpyKind (cupti_activity.h): the direction of a copy as CUPTI records it (copy_kind).
COPY_KINDS = {0: "unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA", 8: "DtoD",
              9: "HtoH", 10: "PtoP"}
TO_HOST = ("DtoH", "AtoH")  # copies that bring device data to the host


def copy_label(r: CopyRecord) -> str:
    """'memcpy DtoH 33,554,432 B': a copy's direction and size, as a call profile lists it."""
    return f"memcpy {COPY_KINDS.get(r.copy_kind, str(r.copy_kind))} {r.bytes:,} B"


def copied_bytes(records) -> dict[str, int]:
    """Bytes copied per direction ('DtoH', 'HtoD', ...) over one call's copy records."""
    out: dict[str, int] = {}
    for r in records:
        if isinstance(r, CopyRecord):
            kind = COPY_KINDS.get(r.copy_kind, str(r.copy_kind))
            out[kind] = out.get(kind, 0) + r.bytes
    return out


def activities(records) -> list[tuple[str, int, int]]:
    """Where one call's span goes: its kernels, copies and sets in start order as (label, ns of the span before it
    in which nothing ran, its duration ns). The idle ns add up to the span minus the time something ran: launch
    gaps, host work between launches. A copy's label says its direction and size (copy_label)."""
    listed, reach = [], None
    for r in gpu_work(records):  # reach: the latest end so far (kernels of other streams may overlap)
        idle = 0 if reach is None else max(0, r.start - reach)
        label = copy_label(r) if isinstance(r, CopyRecord) else "memset" if isinstance(r, SetRecord) else r.name
        listed.append((label, idle, r.end - r.start))
        reach = r.end if reach is None else max(reach, r.end)
    return listed


def kernels(records) -> list[KernelRecord]:
    return [r for r in records if isinstance(r, KernelRecord)]


def errors(records) -> list[ErrorRecord]:
    return [r for r in records if isinstance(r, ErrorRecord)]
