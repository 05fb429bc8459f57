"""Using a trained team outside the trainer, in rooms whose imports run down: ``files`` (export it
as PEFT adapters with a ``team.yaml``, a model card and an lm-eval task) and ``episodes`` (a request
-> the team's episodes, continuously batched) at the bottom, then ``api`` (the OpenAI-compatible
chat-completions server). The package itself exports nothing: import from the rooms.
"""
