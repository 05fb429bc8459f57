"""Worker process of ``MathVerifier``: answers "is PRED equal to GOLD?" with math_verify.

Run as a script (``runpy.run_path``) by ``teamplay.envs.tasks.answers.math_verifier``; it imports only
the standard library and math_verify so it starts in about a second and does not depend on
how teamplay was installed.

Protocol, one JSON object per line:
    start-up  -> {"ready": true}   (after one warm-up check)
    stdin     <- {"id": 7, "gold": "\\frac{1}{2}", "pred": "0.5"}
    stdout    -> {"id": 7, "equal": true}
With ``"raw": true`` the gold and pred are whole texts (a worked solution, a completion) that
math_verify searches for their answers itself, with its default settings: lm-eval's ``math_verify``
metric, ``verify(gold=parse(solution), target=parse(completion))``.
The worker exits when stdin closes (its parent died or closed it). It runs math_verify in its
main thread, so math_verify's own signal-based timeouts work here and stop most slow cases
cheaply; the parent's deadline and kill are the backstop for a hang inside C code.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
from collections import OrderedDict

# math_verify's own per-step time limits (whole seconds: it uses signal.alarm)
PARSE_TIMEOUT_S = 1
VERIFY_TIMEOUT_S = 1
GOLD_CACHE_SIZE = 4096


def _serve() -> None:
    from math_verify import parse, verify
    from math_verify.errors import TimeoutException  # a BaseException, so named explicitly below

    # math_verify logs every timeout as a warning; the parent logs what matters once per call
    logging.getLogger("math_verify").setLevel(logging.ERROR)

    def parse_answer(latex: str) -> list:
        # the answer is bare LaTeX; boxing it makes math_verify read all of it as one expression
        return parse("\\boxed{" + latex + "}", parsing_timeout=PARSE_TIMEOUT_S)

    gold_cache: OrderedDict[str, list] = OrderedDict()  # a reference is checked many times

    def parsed_gold(latex: str) -> list:
        if latex in gold_cache:
            gold_cache.move_to_end(latex)
            return gold_cache[latex]
        parsed = parse_answer(latex)
        gold_cache[latex] = parsed
        if len(gold_cache) > GOLD_CACHE_SIZE:
            gold_cache.popitem(last=False)
        return parsed

    # the first check pays sympy's lazy set-up (tenths of a second, more on a busy machine): paid here,
    # before "ready", under the parent's start-up deadline rather than the first real check's
    try:
        verify(parse_answer("\\frac{x^2}{2}"), parse_answer("x*x/2"), timeout_seconds=VERIFY_TIMEOUT_S)
    except (Exception, TimeoutException):
        pass  # a slow warm-up only leaves the set-up to the first check
    # Ctrl-C in a terminal reaches the whole process group; the parent decides when this worker
    # ends (by closing stdin or killing it), so an interrupt must not kill it with a traceback
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    out = sys.stdout
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        try:
            request = json.loads(line)
            request_id = request["id"]
        except (ValueError, KeyError, TypeError):
            continue  # not from our parent; nothing to answer
        try:
            if request.get("raw"):
                equal = bool(verify(gold=parse(request["gold"]), target=parse(request["pred"])))
                out.write(json.dumps({"id": request_id, "equal": equal}) + "\n")
                out.flush()
                continue
            gold = parsed_gold(request["gold"])
            pred = parse_answer(request["pred"])
            equal = bool(gold and pred and verify(gold, pred, timeout_seconds=VERIFY_TIMEOUT_S))
            reply = {"id": request_id, "equal": equal}
        except (Exception, TimeoutException) as exc:  # a failure on one answer is "not equal", never fatal
            reply = {"id": request_id, "equal": False, "error": f"{type(exc).__name__}: {exc}"[:500]}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    _serve()
