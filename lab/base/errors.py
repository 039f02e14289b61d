"""One exception type for every mistake a user can make.

The CLI catches `LabError`, prints its message as one sentence and exits non-zero, so a bad stage
name, a bad size or a compile error never shows a Python traceback. Anything else is a bug in the
lab and is allowed to raise normally.
"""


class LabError(Exception):
    """A user-facing error: the message says what was wrong and what to do."""


class CompileError(LabError):
    """NVRTC rejected a CUDA source; the message carries the compiler's log (file:line: error)."""
