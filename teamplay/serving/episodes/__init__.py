"""Requests turned into team episodes: one request -> its episodes (``engine``), and continuous
batching, where requests join the running lock-step turns (``scheduler``).

The bottom floor of ``teamplay.serving`` with ``files``: it imports no other room.
"""
