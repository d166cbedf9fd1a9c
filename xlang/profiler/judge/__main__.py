"""`python -m xlang.profiler.judge SPEC.json` (stages/launch.py starts it): the judge process of one GPU stage."""

import sys

from xlang.profiler.judge.main import main

main(sys.argv[1:])
