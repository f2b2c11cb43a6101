"""The two kinds of error: user mistakes (one clear line, exit 2) and everything else."""


class UserError(Exception):
    """A mistake the user can fix (bad config, unknown model, missing file).

    The CLI prints the message alone, on one line, and exits with status 2; no traceback.
    """

    exit_code = 2


class ConfigError(UserError):
    """The sweep file is invalid. Raised before anything is written."""
