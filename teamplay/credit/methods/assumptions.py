"""The assumptions several methods' cards share, written once (each card is beside its method)."""

BROADCAST = ("every spoken message of an episode gets the same value: a message's own contribution is "
             "identified only if every agent and message contributed equally (broadcast)")
MASKING = ("masking regenerates nothing: later messages stay as they were written, so influence through "
           "later turns is invisible (withholding a review leaves the revision it caused in place)")
REPLAY = ("replay needs restorable state (the protocol re-runs from a recorded transcript prefix) and a "
          "fixed policy for the other agents (the current adapters, the same seed per sample index); "
          "the value depends on the removal rule (skip, null_message, base_policy)")
GROUP_BASELINE = ("the G episodes are independent draws of the same team policy on the same problem, so the "
                  "group mean is a baseline for that problem")
