"""Judge our hostile corpus (tests/kernels/hostile/MANIFEST.toml) on the GPU and check each verdict against what
a correct judge must conclude. Prints one line per candidate and a summary; writes JSON lines to --out.

  PYTHONPATH=. python3 benchmarks/hostile_corpus_run.py [--only NAME,...] [--shard K/N] [--also NAME,...] [--budget-s 500] [--out FILE]

Before and after the corpus it judges an honest expert and tests/kernels/bad/off_by_one.py: persistence
attacks must leave both verdicts unchanged. A planted secret (XLANG_TEST_API_KEY) sits in this process's
environment the whole time and must appear in no verdict.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOSTILE = ROOT / "tests" / "kernels" / "hostile"
SECRET = "sk-xlang-planted-secret-5d1e9b"
STAGE_S = float(os.environ.get("XLANG_HOSTILE_STAGE_S", 180))  # each stage's limit (a hang costs this much)
SURVIVOR_MARKERS = ("xlang-survivor", "hostile", "sleep 600")


def judge(path: Path, lang: str, task: str, label: str):
    from xlang.profiler.evaluate import EvalOptions, evaluate

    t0 = time.monotonic()
    v = evaluate(path, lang, task, "h100", None, EvalOptions(label=label, check_timeout_s=STAGE_S,
                                                            memcheck_timeout_s=STAGE_S, ncu_timeout_s=STAGE_S))
    return v, time.monotonic() - t0


def check(entry: dict, v, seconds: float) -> list[str]:
    problems = []
    want = [entry["expect"]] if "expect" in entry else list(entry.get("expect_any", []))
    if want and v.category not in want:
        problems.append(f"category {v.category}, expected {'/'.join(want)}")
    speed = (v.timing or {}).get("speedup")
    if speed is not None and entry.get("expect_speedup_max") and speed > entry["expect_speedup_max"]:
        problems.append(f"speedup {speed:.3f} > {entry['expect_speedup_max']}")
    if SECRET in json.dumps(v.to_dict(), default=str):
        problems.append("the planted secret is in the verdict")
    if entry.get("expect_max_seconds") and seconds > entry["expect_max_seconds"]:
        problems.append(f"took {seconds:.0f} s > {entry['expect_max_seconds']}")
    return problems


def survivors() -> list[str]:
    from xlang.sandbox import CANDIDATE_UID_BASE, jail_uid

    # With XLANG_GPUS naming one GPU, another corpus run may be judging on another GPU of this machine: only
    # this GPU's stage uids (4 per GPU) are ours to inspect, and builds (a fresh uid each, any run's) are not.
    only = os.environ.get("XLANG_GPUS")
    if only is not None and only.strip().isdigit():
        first = CANDIDATE_UID_BASE + 4 * int(only)
        ours = set(range(first, first + 4)).__contains__
    else:
        ours = jail_uid
    out = subprocess.run(["ps", "-eo", "pid,uid,args"], capture_output=True, text=True).stdout.splitlines()
    return [ln for ln in out[1:] if len(ln.split()) > 2 and ln.split()[1].isdigit()
            and ours(int(ln.split()[1])) and "<defunct>" not in ln]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="")
    ap.add_argument("--skip", default="")
    ap.add_argument("--also", default="", help="entries judged after the shard's (a re-run)")
    ap.add_argument("--budget-s", type=float, default=1e9)
    ap.add_argument("--shard", default="1/1", help="K/N: judge every N-th entry starting at the K-th (split a "
                                                    "run over several device calls)")
    ap.add_argument("--out", default=os.environ.get("OUT", "/tmp") + "/hostile.jsonl")
    args = ap.parse_args()
    os.environ["XLANG_TEST_API_KEY"] = SECRET
    entries = tomllib.loads((HOSTILE / "MANIFEST.toml").read_text())["candidate"]
    if args.only:
        keep = set(args.only.split(","))
        entries = [e for e in entries if e["file"] in keep or Path(e["file"]).stem in keep]
    if args.skip:
        drop = set(args.skip.split(","))
        entries = [e for e in entries if e["file"] not in drop and Path(e["file"]).stem not in drop]
    k, n = (int(x) for x in args.shard.split("/"))
    extra = [e for e in entries if args.also and (e["file"] in args.also.split(",")
                                                  or Path(e["file"]).stem in args.also.split(","))]
    entries = [e for e in entries[k - 1::n] if e not in extra] + extra
    end = time.monotonic() + args.budget_s
    probes = [(ROOT / "tests" / "kernels" / "bad" / "off_by_one.py", "triton", "gemm", "incorrect")]
    before = {str(p): judge(p, lang, task, "probe-before")[0].category for p, lang, task, _ in probes}
    failures, rows = 0, []
    with open(args.out, "a") as log:
        for e in entries:
            if time.monotonic() > end:
                print(f"SKIP {e['file']} (budget)")
                continue
            v, s = judge(HOSTILE / e["file"], e["lang"], e["task"], Path(e["file"]).stem)
            problems = check(e, v, s)
            left = survivors()
            if left and e.get("expect_no_survivor", True):
                problems.append(f"processes of the candidate's uid left: {left[:3]}")
            status = "PASS" if not problems else "FAIL"
            failures += bool(problems)
            speed = (v.timing or {}).get("speedup")
            line = (f"{status} {e['file']:<36} {e['class']:<22} {v.category:<16} "
                    f"{'' if speed is None else f'{speed:.3f}x':>7} {s:5.1f}s  {'; '.join(problems)}")
            print(line, flush=True)
            print(f"      {v.detail[:300]!r}", flush=True)
            rows.append(line)
            log.write(json.dumps({"entry": e, "verdict": v.to_dict(), "seconds": s, "problems": problems},
                                 default=str) + "\n")
    after = {str(p): judge(p, lang, task, "probe-after")[0].category for p, lang, task, _ in probes}
    for p, _, _, want in probes:
        ok = before[str(p)] == after[str(p)] == want
        failures += not ok
        print(f"{'PASS' if ok else 'FAIL'} probe {Path(p).name}: before {before[str(p)]}, after {after[str(p)]}, want {want}")
    print(f"{len(rows)} judged, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
