"""teamplay: train teams of cooperating LLM agents with fair per-agent and per-utterance credit."""

__version__ = "0.1.0"
