"""``python -m teamplay.cli``: the ``teamplay`` command."""

from teamplay.cli import app

if __name__ == "__main__":  # importing this module (a doctest collector, an import check) runs nothing
    app()
