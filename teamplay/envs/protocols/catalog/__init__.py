"""The built-in protocols, one rule book per module, each registered by name with ``@register_protocol``.

They build on the protocol interface (``teamplay.envs.protocols.base``), judge verdicts with
``teamplay.envs.protocols.verdicts`` and declare their traits (``teamplay.envs.protocols.traits``);
importing ``teamplay.envs.protocols`` registers them.
"""
