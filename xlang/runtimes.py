"""The Runtime value: where a candidate's run-time verdict is made (this machine's GPU, a Ray cluster, nowhere).

Its own module so that both sides can name it without an import circle: xlang.agent.runtime registers and picks
runtimes (and imports xlang.scaleout for Ray), xlang.scaleout makes Ray's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass
class Runtime:
    name: str
    available: bool
    note: str = ""  # why it does not run, e.g. "not run (no sm_100a device)"
    evaluate: Callable | None = None  # (source, build, lang, task, arch, shape, options) -> Verdict
    info: dict = field(default_factory=dict)
    build: Callable | None = None  # (code, lang, task, arch, shape, workdir=...) -> BuildResult; None: build here
