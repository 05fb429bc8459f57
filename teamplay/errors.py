"""User-facing errors.

Every error a user can cause (bad config, missing file, malformed data, unknown name) is a
``TeamplayError`` with a message that says what was wrong and what to do; the CLI prints it as one
line and exits with status 2 instead of showing a traceback.
"""


class TeamplayError(Exception):
    """An error the user can act on; its message is shown as is."""


class ConfigError(TeamplayError, ValueError):
    """A configuration value is invalid; the message names the field and the allowed values."""


class DataError(TeamplayError, ValueError):
    """A data source is missing or malformed; the message names the path/row/field."""


class ModelLoadError(TeamplayError):
    """A model could not be loaded; the message names what was tried."""


class TeamplayWarning(UserWarning):
    """Something the user should know that did not stop the run (a damaged checkpoint skipped on
    resume); the CLI shows it as one ``warning:`` line."""
