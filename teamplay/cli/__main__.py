"""``python -m teamplay.cli``: the ``teamplay`` command."""

from teamplay.cli import app

app()
