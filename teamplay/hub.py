"""One quick question to the Hugging Face hub before anything waits on it.

``transformers`` and ``datasets`` retry an unreachable hub for about a minute before they give up,
and a misspelled model alias looks exactly like a hub id. ``probe_hub`` asks the hub once, with a
short timeout, whether a repository exists, so that a loader can refuse an unknown name or an
unreachable hub in seconds and say which it was. It honours ``HF_ENDPOINT`` (read at call time)
and the usual proxy variables, and is not called at all when ``HF_HUB_OFFLINE`` is set (then the
loaders read their local cache only, which is fast).
"""

from __future__ import annotations

import os
from typing import Literal

#: seconds the probe waits for the hub
PROBE_TIMEOUT = 5.0


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` asks every hub access to use the local cache only."""
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def hub_endpoint() -> str:
    from huggingface_hub import constants

    return os.environ.get("HF_ENDPOINT", constants.ENDPOINT).rstrip("/")


def probe_hub(repo_id: str, repo_type: Literal["model", "dataset"] = "model",
              timeout: float = PROBE_TIMEOUT) -> str | None:
    """None when ``repo_id`` exists on the hub (gated repositories count: access is checked by the
    download itself); otherwise why not, in a few words: ``"no such model on the hub"`` or
    ``"the hub at URL is unreachable (ConnectError: ...)"``. Never raises for a network problem."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, HFValidationError, RepositoryNotFoundError

    endpoint = hub_endpoint()
    try:
        HfApi(endpoint=endpoint).repo_info(repo_id, repo_type=repo_type, timeout=timeout)
    except GatedRepoError:
        return None
    except RepositoryNotFoundError:
        return f"no such {repo_type} on the hub at {endpoint}"
    except HFValidationError as exc:
        return f"not a valid hub id ({str(exc).splitlines()[0]})"
    except Exception as exc:  # noqa: BLE001 - httpx/requests/OS errors: all mean "no answer"
        first = str(exc).splitlines()[0] if str(exc) else ""
        return f"the hub at {endpoint} is unreachable ({type(exc).__name__}: {first})"
    return None
