"""Entry point of every child process: `python -m xlang.child MODULE ARGS...` runs MODULE.main(ARGS)
(MODULE relative to xlang, e.g. backends.<lang>.static_build or profiler.judge, or a language plugin's own
module by its full name: resources.import_module)."""

import sys

from xlang import resources


def run() -> None:
    resources.forget_editable_checkout()
    module = resources.import_module(sys.argv[1])
    sys.exit(module.main(sys.argv[2:]) or 0)


if __name__ == "__main__":
    run()
