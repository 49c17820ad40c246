"""The local transformers backend.

Three things make it more than a loop over ``model.generate``:

* **Shared-prefix KV reuse for scoring.** Evaluators score many requests that share a long head
  (system prompt + user history + the response under judgment) and differ in a short tail (one
  rubric rule, one aspect question). ``choice_probs`` sorts the token sequences, groups those
  sharing a prefix, runs each prefix once and continues its tails from its KV states, packed end
  to end in one row under a block-diagonal mask (``Forward.packed``). On a CPU, where batching alone buys
  nothing, the speed-up follows the token-count ratio.
* **Automatic prefix caching** (``prefix_cache.py``). Generation leaves each sequence's KV states
  behind, and scoring starts from the longest cached prefix: a judge that writes a review and then
  scores it pays for its prompt once.
* **Exact closed-set probabilities.** Choices are scored from the next-token distribution in a
  forward pass (multi-token choices by their full sequence log-probability), never by sampling.
  A choice that is a token-prefix of another ("1" and "10") is scored as "this choice and then
  stop", i.e. its probability excludes the mass of continuing into the longer choice, so the
  renormalised set is a proper partition of outcomes (the math, shared with the ``openai``
  backend, is in ``choices.py``).

One module per job:

* ``backend.py``: ``HFBackend``, prompts and tokens, and each call handed to the modules below.
* ``plan.py``: token-count planning: prefix groups, batch limits, and the one padding rule (``PADDING``).
* ``score.py``: the rows that score closed choices, their log-probs group by group, the probabilities.
* ``heads.py``: the KV states of the prefixes scoring continues, in waves, through the prefix cache.
* ``pack.py``: the forward passes of scoring (whole rows, or tails packed after their prefixes).
* ``decode.py``: generation, continuously batched.
* ``sampling.py``: the next-token draw (the engine's seeded one, and ``generate``'s processors for GRPO).
* ``kv.py``: KV caches: prefill, a decode step, and cutting, padding and joining cache rows.

GRPO's rollouts and log-prob passes (``persetrain.train.grpo``) use the KV functions (:func:`prefill`,
:func:`prefill_rows`, :func:`join`, :func:`step`, :func:`select_rows`), :func:`sampling_processors` and
:func:`length_chunks` from here.
"""

from persetrain.engine.hf.backend import ContextOverflowError, HFBackend, Truncation
from persetrain.engine.hf.kv import join, prefill, prefill_rows, select_rows, step
from persetrain.engine.hf.plan import PADDING, length_chunks, within_padding
from persetrain.engine.hf.sampling import sampling_processors

__all__ = [
    "PADDING",
    "ContextOverflowError",
    "HFBackend",
    "Truncation",
    "join",
    "length_chunks",
    "prefill",
    "prefill_rows",
    "sampling_processors",
    "select_rows",
    "step",
    "within_padding",
]
