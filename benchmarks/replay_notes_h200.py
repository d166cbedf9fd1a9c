"""Issue 17 on a GPU: a replayed run with BM25 fix notes in its feedback, every verdict by the real judge.

No LLM is reachable from the GPU machine, so the trajectory is scripted and the notes' text is written by hand;
everything else is the product's own path:
  1. a source store holds one scripted sample of gemm in triton: turn 1 = tests/kernels/bad/off_by_one.py (an
     epilogue that writes every column one to the right), turn 2 = tests/kernels/triton/gemm_tma.py (correct);
     its model is named 'scripted:...' so it cannot pass for a model's run;
  2. `xlang run --model replay:SRC` judges both turns on this GPU (no notes) -> store A;
  3. `xlang fixit collect --store A` pairs the judged failure with its fix (the judge's real error text);
  4. each pair gets a hand-written explanation (explained_by says so), then `xlang fixit export` writes notes.jsonl;
  5. `xlang run --model replay:SRC --notes bm25 --notes-store notes.jsonl` judges the turns again, retrieves notes
     after the failed turn, and `xlang trajectory` shows them in the stored feedback and the turn's notes.
Usage (on the GPU machine, repository root): python3 benchmarks/replay_notes_h200.py OUT_DIR [--arch h200]
"""
import json
import subprocess
import sys
from pathlib import Path

from xlang.store import Store

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = [ROOT / "tests/kernels/bad/off_by_one.py", ROOT / "tests/kernels/triton/gemm_tma.py"]
HAND_NOTES = {  # category -> the note an engineer wrote after reading the pair (step 4)
    "incorrect": "The GEMM was numerically wrong although it compiled and used wgmma and TMA: the epilogue stored "
                 "each output tile at a column offset shifted by one (off-by-one in the store's column index), so "
                 "column 0 was never written and every other column held its neighbour. The fix stores the fp32 "
                 "accumulator, cast to bf16, through a TMA descriptor at exactly [pid_m * BM, pid_n * BN]; the "
                 "descriptor clips the ragged tail, so no hand-written mask or offset arithmetic is needed.",
}


def xlang(*args, out: Path, name: str) -> str:
    cmd = [sys.executable, "-m", "xlang", *map(str, args)]
    res = subprocess.run(cmd, capture_output=True, text=True, env=None, cwd=ROOT)
    (out / f"{name}.txt").write_text(f"$ {' '.join(cmd)}\n{res.stdout}\n{res.stderr}")
    print(f"== {name}: exit {res.returncode}\n{res.stdout[-3000:]}{res.stderr[-2000:]}", flush=True)
    if res.returncode != 0:
        sys.exit(f"{name} failed")
    return res.stdout


def main():
    out = Path(sys.argv[1]).resolve()
    arch = sys.argv[sys.argv.index("--arch") + 1] if "--arch" in sys.argv else "h200"
    out.mkdir(parents=True, exist_ok=True)
    src = out / "source.db"
    with Store(src) as s:
        model = "scripted:" + ",".join(p.name for p in SCRIPT)
        s.create_run("scripted", task="gemm", lang="triton", arch=arch, model=model, source="scripted",
                     turns_limit=len(SCRIPT), samples=1, config={"what": "benchmarks/replay_notes_h200.py"})
        s.start_sample("scripted", 0, seed=0)
        for turn, path in enumerate(SCRIPT, 1):
            s.add_turn("scripted", 0, turn, messages=[], reply=f"```python\n{path.read_text().rstrip()}\n```\n",
                       model=model)
        s.finish_run("scripted")
    common = ["--task", "gemm", "--lang", "triton", "--arch", arch, "--model", f"replay:{src}#scripted",
              "--turns", len(SCRIPT), "--concurrency", 1]
    xlang("run", *common, "--store", out / "judged.db", "--run-id", "judged", out=out, name="1_replay_without_notes")
    xlang("trajectory", "judged", "--store", out / "judged.db", out=out, name="1_trajectory")
    xlang("fixit", "collect", "--store", out / "judged.db", "--out", out / "fixit", out=out, name="2_collect")
    pairs_file = out / "fixit" / "pairs.jsonl"
    pairs = [json.loads(line) for line in pairs_file.read_text().splitlines() if line.strip()]
    if not pairs:
        sys.exit("no failure -> fix pair was collected: the judged run did not fail then fix")
    for p in pairs:
        p["explanation"] = HAND_NOTES[p["category"]]
        p["explained_by"] = "hand-written (benchmarks/replay_notes_h200.py; no LLM on the GPU machine)"
    pairs_file.write_text("".join(json.dumps(p) + "\n" for p in pairs))
    xlang("fixit", "export", out / "fixit", "--out", out / "export", out=out, name="3_export")
    xlang("run", *common, "--store", out / "with_notes.db", "--run-id", "with-notes", "--notes", "bm25",
          "--notes-store", out / "export" / "notes.jsonl", out=out, name="4_replay_with_notes")
    xlang("trajectory", "with-notes", "--store", out / "with_notes.db", out=out, name="5_trajectory")
    xlang("trajectory", "with-notes", "--store", out / "with_notes.db", "--turn", 1, "--show", "notes",
          out=out, name="5_turn1_notes")
    xlang("trajectory", "with-notes", "--store", out / "with_notes.db", "--turn", 1, "--show", "feedback",
          out=out, name="5_turn1_feedback")


if __name__ == "__main__":
    main()
