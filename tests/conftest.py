"""Shared pytest setup.

Its only job is to exist: because ``tests/`` is a package with this conftest, pytest puts the
repository root on ``sys.path`` before collecting, so every test file can ``from tests.tiny import
...`` whether or not its own folder is a package.
"""
