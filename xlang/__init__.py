"""xlang: how well can each kernel language reach a GPU architecture's own instructions?

Importing this package is cheap on purpose: torch, triton, CuTe DSL and litellm are imported only by the
code paths that need them (a GPU worker, a backend's build, the agent loop).
"""

__version__ = "0.1.0"
# Bumped whenever a change can alter a verdict or a timing; stored with every result.
HARNESS_VERSION = "3"  # 3: judge/runner split, jail, CUPTI observer, drawn shapes
