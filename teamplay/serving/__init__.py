"""Using a trained team outside the trainer: export it as PEFT adapters with a ``team.yaml`` and a
model card, and serve it behind an OpenAI-compatible chat-completions API."""
