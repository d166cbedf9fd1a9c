# Hostile, for tests/test_containment.py: finds the expert of its task (tasks/gemm/solutions/triton.py) by
# walking its PYTHONPATH and sys.path (and the checkout's path, which it was told) and exports the expert's
# entry point as its own. Where the jail shows no expert, its import fails: a build failure, never static_ok.
import os
import sys

places = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) + sys.path if p] + ["__CHECKOUT__"]
for place in places:
    for up in (place, os.path.dirname(place), os.path.dirname(os.path.dirname(place))):
        expert = os.path.join(up, "tasks", "gemm", "solutions", "triton.py")
        if os.path.isfile(expert):
            scope = {"__name__": "expert", "__file__": expert}
            exec(compile(open(expert).read(), expert, "exec"), scope)
            xlang_entry = scope["xlang_entry"]
            break
    else:
        continue
    break
else:
    raise FileNotFoundError("no expert solution in view")
