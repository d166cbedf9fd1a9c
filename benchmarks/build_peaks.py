"""Peak memory and task count of honest builds in the jail (issue 46): what sandbox.BUILD_MEMORY and TASKS leave
room above. Builds experts with the real jail while polling /proc for every process of the build uid range:
the largest VmPeak (address space, what RLIMIT_AS caps) and VmHWM (resident) of any one process, and the most
tasks (threads) the uid had at once (what RLIMIT_NPROC counts).

    python3 benchmarks/build_peaks.py [task:lang:arch ...]     (default: the GEMM experts, an attention one)
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from pathlib import Path

from xlang.archs import get_arch
from xlang.backend import build_candidate
from xlang.sandbox import BUILD_UID_BASE, BUILD_UID_COUNT, proc_statuses
from xlang.task import get_task

DEFAULT = ["gemm:triton:h100", "gemm:cutedsl:h100", "gemm:cuda_ptx:h100", "gemm:cuda_ptx:b200",
           "attn_fwd:cuda_ptx:h100", "attn_fwd:triton:h100", "attn_fwd:cutedsl:b200"]


def _poll(stop: threading.Event, peaks: dict) -> None:
    while not stop.is_set():
        tasks: dict[int, int] = {}
        for _pid, fields in proc_statuses():
            try:
                uid = int(fields["Uid"].split()[0])
                if not BUILD_UID_BASE <= uid < BUILD_UID_BASE + BUILD_UID_COUNT:
                    continue
                name = fields["Name"].strip()
                peak = int(fields.get("VmPeak", "0 kB").split()[0]) << 10
                hwm = int(fields.get("VmHWM", "0 kB").split()[0]) << 10
                tasks[uid] = tasks.get(uid, 0) + int(fields["Threads"])
                if peak > peaks["as"][0]:
                    peaks["as"] = (peak, name)
                if hwm > peaks["rss"][0]:
                    peaks["rss"] = (hwm, name)
            except (KeyError, ValueError):
                pass
        peaks["tasks"] = max([peaks["tasks"], *tasks.values()])
        time.sleep(0.05)


def main(which: list[str]) -> int:
    rows = []
    for item in which or DEFAULT:
        task_name, lang, arch_name = item.split(":")
        task, arch = get_task(task_name), get_arch(arch_name)
        solution = task.solution(lang, arch.generation, ".cu" if lang == "cuda_ptx" else ".py")
        if solution is None:
            rows.append((item, "no expert", "", "", "", ""))
            continue
        peaks = {"as": (0, ""), "rss": (0, ""), "tasks": 0}
        stop = threading.Event()
        poller = threading.Thread(target=_poll, args=(stop, peaks), daemon=True)
        poller.start()
        start = time.monotonic()
        build = build_candidate(solution.text, lang, task, arch, task.shape(), workdir=Path(tempfile.mkdtemp()),
                                cache=False, timeout_s=600)
        seconds = time.monotonic() - start
        stop.set()
        poller.join()
        rows.append((item, "ok" if build.ok else (build.error or "")[:60], f"{seconds:.1f}",
                     f"{peaks['as'][0] / 2**30:.2f} ({peaks['as'][1]})", f"{peaks['rss'][0] / 2**30:.2f} ({peaks['rss'][1]})",
                     str(peaks["tasks"])))
    print(f"{'build':28} {'result':6} {'s':>6}  {'VmPeak GiB':24} {'VmHWM GiB':24} tasks")
    for r in rows:
        print(f"{r[0]:28} {r[1]:6} {r[2]:>6}  {r[3]:24} {r[4]:24} {r[5]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
