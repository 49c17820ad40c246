"""Structured output for the ``hf`` backend: JSON schemas and regexes enforced while decoding.

We use xgrammar because it is the structured-generation engine that vLLM and SGLang use by
default: the grammar a local run enforces is the same one a served judge enforces through
guided decoding, so outputs agree across backends. It precompiles per-token masks in C++,
applies them on CPU or GPU, and compiles both JSON schemas and regexes. (lm-format-enforcer is
pure Python and slower per token; outlines' index compilation is slow for large vocabularies.)
"""

from __future__ import annotations

import json
from functools import lru_cache

import torch
import xgrammar as xgr

from persetrain.engine.types import GenerationParams


class GrammarFactory:
    """Compiles grammars once per (schema | regex) and hands out one matcher per batch row."""

    def __init__(self, tokenizer, vocab_size: int):
        self._info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size)
        self._compiler = xgr.GrammarCompiler(self._info)
        self.vocab_size = vocab_size
        self._compile = lru_cache(maxsize=64)(self._compile_uncached)

    def _compile_uncached(self, kind: str, source: str) -> xgr.CompiledGrammar:
        if kind == "json":
            # One-line JSON: with free whitespace allowed, small models spend their token budget on
            # newlines and indentation. Properties keep the schema's order (the source is not key-sorted),
            # so a schema can ask for the name before the new name.
            return self._compiler.compile_json_schema(source, any_whitespace=False)
        return self._compiler.compile_regex(source)

    def matcher(self, params: GenerationParams) -> xgr.GrammarMatcher | None:
        if params.json_schema is not None and params.regex is not None:
            raise ValueError("give either json_schema or regex, not both")
        if params.json_schema is not None:
            return xgr.GrammarMatcher(self._compile("json", json.dumps(params.json_schema)))
        if params.regex is not None:
            return xgr.GrammarMatcher(self._compile("regex", params.regex))
        return None

    def matchers(self, row_params: list[GenerationParams]) -> list[xgr.GrammarMatcher | None] | None:
        """One matcher per batch row (None for a row without a grammar), or None when no row has one."""
        found = [self.matcher(p) for p in row_params]
        return found if any(m is not None for m in found) else None

    def mask(self, logits: torch.Tensor, matchers: list[xgr.GrammarMatcher | None]) -> torch.Tensor:
        """Set the logits of tokens the grammar forbids to -inf, row by row (rows without one: untouched)."""
        bitmask = xgr.allocate_token_bitmask(len(matchers), self.vocab_size)  # all tokens allowed
        for row, matcher in enumerate(matchers):
            if matcher is not None:
                matcher.fill_next_token_bitmask(bitmask, row)
        device = logits.device
        logits = logits.to("cpu") if device.type not in {"cpu", "cuda"} else logits
        xgr.apply_token_bitmask_inplace(logits, bitmask.to(logits.device))
        return logits.to(device)
