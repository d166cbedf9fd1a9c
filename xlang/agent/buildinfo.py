"""What the feedback says about a build beyond pass/fail: registers, spills and local memory per kernel, and the
source lines memcheck pointed at; and the toolchain a verdict was made with.

Registers and spills come from ptxas's `-v` report when the build log carries one ("Used N registers",
"N bytes spill stores, N bytes spill loads"); otherwise from `cuobjdump -res-usage` on each compiled kernel's
binary (REG, LOCAL, STACK, SHARED per function; LOCAL is per-thread local memory, where spills go). Needs no GPU.

Memcheck source lines: compute-sanitizer prints `... in FILE:LINE` for code built with -lineinfo; any such
location found in the verdict's memcheck report that names the candidate's file is quoted from the candidate.
"""

from __future__ import annotations

import functools
import importlib.metadata
import re
import shutil
import subprocess

from xlang import toolchain
from xlang.backend import toolchain_packages

_PTXAS_FUNC = re.compile(r"ptxas info\s*:\s*(?:Function properties for|Compiling entry function)\s+'?([\w$.]+)'?")
_PTXAS_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_USED = re.compile(r"ptxas info\s*:\s*Used (\d+) registers")
_RES_FUNC = re.compile(r"^\s*Function\s+([^:\s]+):\s*$")
_RES_FIELDS = re.compile(r"\b(REG|STACK|SHARED|LOCAL):(\d+)")
_LOCATION = re.compile(r"([\w./\\-]+\.(?:cu|cuh|hpp|h|cpp|py|ptx)):(\d+)")


def parse_ptxas_v(log: str | None) -> list[dict]:
    """ptxas -v output -> [{kernel, registers, spill_stores, spill_loads, stack}] (bytes), in order."""
    out: dict[str, dict] = {}
    current = None
    for line in (log or "").splitlines():
        m = _PTXAS_FUNC.search(line)
        if m:
            current = out.setdefault(m.group(1), {"kernel": m.group(1), "source": "ptxas -v"})
            continue
        if current is None:
            continue
        m = _PTXAS_FRAME.search(line)
        if m:
            current.update(stack=int(m.group(1)), spill_stores=int(m.group(2)), spill_loads=int(m.group(3)))
            continue
        m = _PTXAS_USED.search(line)
        if m:
            current["registers"] = int(m.group(1))
    return [k for k in out.values() if "registers" in k]


def parse_res_usage(text: str | None) -> list[dict]:
    """cuobjdump -res-usage output -> [{kernel, registers, local, stack, shared}] (bytes)."""
    out, current = [], None
    for line in (text or "").splitlines():
        m = _RES_FUNC.match(line)
        if m:
            current = {"kernel": m.group(1), "source": "cuobjdump -res-usage"}
            continue
        if current is not None:
            fields = dict(_RES_FIELDS.findall(line))
            if "REG" in fields:
                current.update(registers=int(fields["REG"]), local=int(fields.get("LOCAL", 0)),
                               stack=int(fields.get("STACK", 0)), shared=int(fields.get("SHARED", 0)))
                out.append(current)
                current = None
    return out


def kernel_resources(build: dict | None) -> list[dict]:
    """Registers and spills of each kernel of a build (BuildResult.to_dict()); [] when none can be read."""
    if not build or not build.get("ok"):
        return []
    from_log = parse_ptxas_v(build.get("log"))
    if from_log:
        return from_log
    tool = toolchain.find_tool("cuobjdump")
    if tool is None:
        return []
    out, seen = [], set()
    for k in build.get("kernels") or []:
        path = k.get("cubin")
        if not path or path in seen:
            continue
        seen.add(path)
        try:
            proc = subprocess.run([str(tool), "-res-usage", path], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            continue
        out += parse_res_usage(proc.stdout)
    return out


def resources_text(resources: list[dict] | None, limit: int = 6) -> str:
    if not resources:
        return ""
    lines = []
    for r in resources[:limit]:
        parts = [f"{r['registers']} registers"]
        if "spill_stores" in r:
            parts.append(f"{r['spill_stores']} bytes spill stores, {r['spill_loads']} bytes spill loads")
        if "local" in r:
            parts.append(f"{r['local']} bytes local memory per thread (spills land here)")
        if r.get("stack"):
            parts.append(f"{r['stack']} bytes stack")
        lines.append(f"- {r['kernel'][:80]}: {', '.join(parts)}")
    more = f"\n- ... and {len(resources) - limit} more kernels" if len(resources) > limit else ""
    source = resources[0].get("source", "")
    return f"Registers and spills per kernel ({source}):\n" + "\n".join(lines) + more


def _strings(obj):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _strings(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _strings(v)


def memcheck_locations(memcheck: dict | None) -> list[tuple[str, int]]:
    """(file, line) pairs named anywhere in a memcheck report, in order, without repeats."""
    found: list[tuple[str, int]] = []
    for r in (memcheck or {}).get("reports") or []:
        if isinstance(r, dict) and r.get("file") and r.get("line"):
            found.append((str(r["file"]), int(r["line"])))
    for text in _strings(memcheck or {}):
        for f, line in _LOCATION.findall(text):
            found.append((f, int(line)))
    return list(dict.fromkeys(found))


def memcheck_source_lines(memcheck: dict | None, code: str | None, limit: int = 5) -> str:
    """The candidate's lines memcheck pointed at, quoted; "" when the report names none."""
    locations = memcheck_locations(memcheck)
    if not locations:
        return ""
    lines = (code or "").splitlines()
    out = []
    for f, n in locations[:limit]:
        name = re.split(r"[/\\]", f)[-1]
        quoted = lines[n - 1].strip() if name.startswith("candidate") and 0 < n <= len(lines) else None
        out.append(f"- {name}:{n}" + (f": `{quoted}`" if quoted else ""))
    return "memcheck points at:\n" + "\n".join(out)


def _tool_release(name: str) -> str | None:
    tool = toolchain.find_tool(name)
    if tool is None:
        return None
    try:
        out = subprocess.run([str(tool), "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"release [\d.]+, (V[\w.]+)", out)
    return m.group(1) if m else (out.strip().splitlines() or [None])[-1]


def _driver() -> str:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return "none (no nvidia-smi)"
    try:
        out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    versions = sorted({line.strip() for line in out.stdout.splitlines() if line.strip()})
    return ", ".join(versions) if out.returncode == 0 and versions else "none (no GPU answered)"


def package_version(dist: str) -> str | None:
    """The installed version of a Python distribution, None when absent: the one place every toolchain record and
    every cell identity (xlang.identity) reads package versions from."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.cache
def tool_release(name: str) -> str | None:
    """An NVIDIA tool's release (e.g. 'V13.0.88' for nvcc or ptxas; cuobjdump's last version line), None when absent."""
    return _tool_release(name)


@functools.cache
def driver_version() -> str:
    return _driver()


@functools.cache
def toolchain_versions() -> dict:
    """The toolchain a verdict was made with: nvcc, ptxas, cuobjdump, every language's packages (under their short
    names, Backend.fingerprint_packages), torch and the NVIDIA driver. Absent tools and packages are named as
    absent (None), not left out."""
    out: dict = {"nvcc": tool_release("nvcc"), "ptxas": tool_release("ptxas"), "cuobjdump": tool_release("cuobjdump")}
    for dist, key in (*toolchain_packages().items(), ("torch", "torch")):
        out[key] = package_version(dist)
    out["driver"] = driver_version()
    return out
