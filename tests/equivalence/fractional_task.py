"""The fractional-reward arith task (``tests.federated.fractional_task.FractionalArith``), named
by file path in the equivalence runs' configs.

A config names a user's task by file (``path.py:Class``), and the registry imports that file under
a module name of its own, which Ray workers cannot import. The class is imported here from a
module on the path instead, so it travels to the rollout workers by reference on any version of
the code (the workers get the repository on ``PYTHONPATH`` from the recorder's environment).
"""

from tests.federated.fractional_task import FractionalArith

__all__ = ["FractionalArith"]
