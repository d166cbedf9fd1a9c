"""Fixit: failure -> fix data mined from the results store, and fix-note retrieval for the agent loop.

  collect  failure -> fix pairs from one or more stores (a failed turn and a later turn of the same sample that fixed
           it), near-duplicates dropped, rebalanced by (category, task, lang, arch) with a cap per bucket
  repair   a teacher model (any litellm model) repairs failures that have no fix, in a loop of turns with the
           judge's feedback between them; every reply is judged by the loop's own judge (xlang.agent.runtime.assess)
           before it counts
  reason   a reasoning teacher writes a bounded reasoning trace per pair and per final kernel
  explain  a model writes a short note per pair (what was wrong, what changed, why)
  export   JSONL (and Parquet) for supervised fine-tuning: Fixit and KernelGen, a data card, and notes.jsonl, the
           notes `xlang run --notes bm25|bm25+kernel --notes-store notes.jsonl` retrieves from (xlang.fixit.notes);
           with --format, the ptxbench and ShareGPT layouts too (xlang.fixit.formats)
  build    a recipe (TOML) of datasets made from stores: all of the above, per dataset (xlang.fixit.recipe)

Files of a fixit folder (one per collection): collect.json (what was read, caps, dedup, counts), pairs.jsonl
(one pair per line), unfixed.jsonl (failures with no fix), repairs.jsonl (every repair attempt and its verdict).
The JSON Schemas of every file written are in xlang/fixit/schemas/.
"""
