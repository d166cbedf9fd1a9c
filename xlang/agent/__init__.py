"""The agent loop: multi-turn kernel generation by a model (any litellm provider), by the expert solutions
(`reference`) or by replaying a stored trajectory (`replay:DB[#RUN]`), judged turn by turn (build, static
census, runtime through the profiler) with structured feedback, every turn stored in the results database.

Modules: prompt (assembly, code extraction), feedback (what goes back to the model), runtime (the pluggable
evaluation step), llm (the only place litellm is imported), sources (model sources), loop (the loop and the run),
commands (the `xlang run` command).
"""
