"""The two kinds of error: user mistakes (one clear line, exit 2) and everything else."""


class UserError(Exception):
    """A mistake the user can fix (bad config, unknown model, missing file).

    The CLI prints the message alone, on one line, and exits with status 2; no traceback.
    """

    exit_code = 2


class ConfigError(UserError):
    """The sweep file is invalid. Raised before anything is written."""


class EngineUnsupported(Exception):
    """What an engine (or farm's path to it) cannot do with this model: an operator it lacks, a
    graph it cannot capture. The cell is `unsupported` with this one-line reason, which says what
    to do; never `failed`, which is for what should have worked."""


def first_line(exc: BaseException) -> str:
    """An error's message as one line, for a reason or a note: its first line; where that is only a
    heading (torch.compile's "from user code:" above the frames it was tracing), the innermost line
    under it too, so the reason says where. An error with no message: its type's name."""
    lines = [line.strip() for line in str(exc).strip().splitlines()]
    if not lines or not lines[0]:
        return type(exc).__name__
    block = lines[1:lines.index("", 1)] if "" in lines[1:] else lines[1:]  # the heading's block
    if lines[0].endswith(":") and block:
        return f"{lines[0]} {block[-1]} (the traceback has the rest)"
    return lines[0]


def describe(exc: BaseException) -> str:
    """`TypeName: first line of its message` (the type alone where it has no message)."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {first_line(exc)}" if text else type(exc).__name__

