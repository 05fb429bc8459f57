"""Training a team, in rooms whose imports run down: ``store``, ``learn`` and ``play`` at the
bottom, then ``wiring``, ``step``, ``run`` and ``experiments`` (``tests/test_import_floors.py``
checks it). The package itself exports nothing: import from the rooms.
"""
