"""The built-in tasks, one module per benchmark, each registered by name with ``@register_task``.

They build on the task interface (``teamplay.envs.tasks.base``), read their rows through
``teamplay.envs.tasks.sources`` and score with ``teamplay.envs.tasks.answers``; importing
``teamplay.envs.tasks`` registers them.
"""
