"""The one error type a user sees: a single clear line and a non-zero exit, never our traceback."""


class XlangError(Exception):
    """Bad input or an unusable environment (unknown name, missing file, missing tool)."""
