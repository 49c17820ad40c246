"""Log-probabilities in OpenAI's and vLLM's records, computed by re-scoring rather than while sampling.

Prompt + completion go through one extra forward pass (``HFBackend.token_logprobs``), so the numbers are
exact: the same a local ``hf`` engine gives for those tokens.
"""

from __future__ import annotations

from persetrain.engine.hf import HFBackend
from persetrain.engine.types import Generation, GenerationParams


class Scorer:
    """Turns ``HFBackend.token_logprobs`` entries into OpenAI's and vLLM's log-prob records."""

    def __init__(self, backend: HFBackend):
        self.backend = backend
        self.tokenizer = backend.tokenizer

    def text(self, token_id: int) -> str:
        # vLLM's rendering of one token: the string it contributes, not its vocabulary entry ("Ġ7")
        return self.tokenizer.convert_tokens_to_string([self.tokenizer.convert_ids_to_tokens(token_id)])

    def _record(self, token_id: int, logprob: float) -> dict:
        token = self.text(token_id)
        return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8", errors="replace"))}

    def score(
        self,
        prompt: list[int],
        generation: Generation,
        params: GenerationParams,
        top_logprobs: int | None,
        prompt_logprobs: int | None,
    ) -> tuple[list | None, list | None]:
        """``(choices[0].logprobs.content, prompt_logprobs)``; ``None`` for what was not asked.

        The backend returns text, so the completion is re-tokenized: the scored tokens are the
        canonical tokenization of the returned text, which is what a greedy decode produces in
        all but rare cases. A sequence that ended on the end-of-sequence token gets an entry for
        it (as vLLM reports one) unless stop strings were set, since then the text does not tell
        whether a stop string or the end-of-sequence token ended it.
        """
        if top_logprobs is None and prompt_logprobs is None:
            return None, None
        completion: list[int] = []
        if top_logprobs is not None:
            completion = self.backend.encode(generation.text)
            if generation.finish_reason == "stop" and not params.stop:
                completion.append(self.tokenizer.eos_token_id)
        start = 1 if prompt_logprobs is not None else len(prompt)
        tokens = prompt + completion
        k = max(top_logprobs or 0, prompt_logprobs or 0)
        # the final entry predicts the token after the text, which no record describes
        entries = self.backend.token_logprobs(tokens, start, top_k=k)[:-1] if len(tokens) > start else []
        content = None
        if top_logprobs is not None:
            content = [
                {
                    **self._record(e["token_id"], e["logprob"]),
                    "top_logprobs": [self._record(t, lp) for t, lp in e.get("top", [])[:top_logprobs]],
                }
                for e in entries
                if e["position"] >= len(prompt)
            ]
        prompt_records = None
        if prompt_logprobs is not None:
            prompt_records = [None]  # the first token has no conditional probability
            for e in entries:
                if e["position"] >= len(prompt):
                    break
                # vLLM's layout: the actual token first, then the top-k (keys are token ids)
                record = {
                    str(e["token_id"]): {
                        "logprob": e["logprob"],
                        "rank": e["rank"],
                        "decoded_token": self.text(e["token_id"]),
                    }
                }
                for rank, (t, lp) in enumerate(e.get("top", [])[:prompt_logprobs], start=1):
                    record.setdefault(str(t), {"logprob": lp, "rank": rank, "decoded_token": self.text(t)})
                prompt_records.append(record)
        return content, prompt_records
