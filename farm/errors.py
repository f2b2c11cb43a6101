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
