"""``SharedPromptGRPOTrainer``: TRL's ``GRPOTrainer`` that computes each prompt once for all its rollouts.

Nothing in it is PARL's: any GRPO run whose rollouts share long prompts gains, and PARL supplies only the
reward and the data (``persetrain.train.grpo``). The overridden methods are TRL-private, so the installed
TRL's signatures are checked at import (``persetrain.train.trl_compat``) and :data:`GRPO_TRAINER` is the stock
``GRPOTrainer`` when they changed; ``tests/test_trl_overrides.py`` trains with both and compares what they log and
the weights they end with.
"""

from __future__ import annotations

import time

import torch
import trl
from transformers import DynamicCache
from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled
from trl import GRPOTrainer
from trl.extras.profiling import profiling_context
from trl.models import unwrap_model_for_generation

from persetrain.engine.hf import join, length_chunks, prefill, prefill_rows, sampling_processors, select_rows, step
from persetrain.models import cache_argument
from persetrain.train.trl_compat import pick_trainer


class SharedPromptGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` that computes each prompt once for all its rollouts and logs the reward's wall time per
    generation batch (``time/reward_s``).

    Next to TRL's ``step_time`` it shows what share of a step the judge takes, the cost that decides
    whether a judge fits a training budget at all.
    """

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        """TRL's transformers rollouts, each distinct prompt prefilled once and each rollout dropped when it ends.

        TRL left-pads the ``num_generations`` copies of a prompt, prefills every copy, and decodes every row until
        the longest rollout ends. On this CPU 4 copies of a 1,100-token prompt take 15.0 s to the first token,
        against 3.5 s prefilled once (the embedded model, greedy); a decode step of 4 rows costs 0.15 s and
        of 1 row 0.07 s, and a warm-started PARL policy ends most rubric sets after ~45 tokens while one
        rollout in a group may run to the 192-token limit. Here each distinct prompt is prefilled once and its
        cache repeated over its rollouts; the prompts' caches, left-padded to the longest, decode as one batch
        (one forward per token for the whole generation batch, as TRL's: decoding prompt after prompt made a step
        of 8 users 66-82 s on an H200, where one batched ``generate`` of 32 x 192 tokens took 4.7 s). Each step
        samples with ``generate``'s processors for TRL's generation config (:func:`sampling_processors`); a
        rollout leaves the batch at its end-of-sequence token, which it keeps, as TRL cuts it. Greedy rollouts
        equal TRL's (``tests/test_grpo.py``). vLLM, continuous batching, images, a configured cache
        implementation or ``generation_kwargs``, batches with no repeated prompt and weights that stay sharded
        while decoding (FSDP; ZeRO-3 without ``ds3_gather_for_generation``) take TRL's path: there every forward
        gathers the weights with every rank, and a rank whose rollouts all ended would stop forwarding while the
        others wait for it; ``generate`` keeps the ranks in step (``synced_gpus``), this loop does not.
        """
        groups = _rows_by_tokens(prompt_ids)
        if (
            self.use_vllm
            or self.use_transformers_continuous_batching
            or images is not None
            or multimodal_fields
            or self.generation_config.cache_implementation is not None
            or self.args.generation_kwargs
            or len(groups) == len(prompt_ids)
            or (self._weights_sharded() and not (self.is_deepspeed_enabled and self.args.ds3_gather_for_generation))
        ):
            return super()._generate_single_turn(
                prompt_ids, images, multimodal_fields, num_generations, has_tool_images
            )
        config, device = self.generation_config, self.accelerator.device
        processors = sampling_processors(config)
        eos = torch.tensor(self.eos_token_ids, device=device)
        completions: list[list[int]] = [[] for _ in prompt_ids]
        width = max(len(prompt) for prompt in groups)
        pad = config.pad_token_id if config.pad_token_id is not None else 0
        with (
            profiling_context(self, "transformers.generate"),
            unwrap_model_for_generation(
                self.model_wrapped,
                self.accelerator,
                gather_deepspeed3_params=self.args.ds3_gather_for_generation,
                generation_kwargs=self.generation_kwargs,
                gradient_checkpointing_kwargs=self.args.gradient_checkpointing_kwargs,
            ) as unwrapped_model,
            torch.no_grad(),
            self._dist.summon_full_params(self.model_wrapped, recurse=False),
        ):
            batch = None
            active: list[int] = []  # batch row b holds the rollout of row active[b]
            for prompt, rows in groups.items():
                group = prefill_rows(unwrapped_model, list(prompt), len(rows), device)
                batch = group if batch is None else join(batch, group)
                active += rows
            # the prompts left-padded, as generate() shows them to the processors (a repetition penalty reads them)
            sequences = torch.tensor(
                [[pad] * (width - len(prompt_ids[r])) + prompt_ids[r] for r in active], device=device
            )
            for position in range(config.max_new_tokens):
                scores = processors(sequences, batch.logits)
                tokens = (
                    torch.multinomial(scores.softmax(-1), 1) if config.do_sample else scores.argmax(-1, keepdim=True)
                )
                sequences = torch.cat([sequences, tokens], dim=1)
                ended = torch.isin(tokens[:, 0], eos) | (position == config.max_new_tokens - 1)
                for b in ended.nonzero()[:, 0].tolist():
                    completions[active[b]] = sequences[b, width:].tolist()
                if ended.all():
                    break
                if ended.any():
                    keep = (~ended).nonzero()[:, 0].tolist()
                    batch, sequences, tokens = select_rows(batch, keep), sequences[keep], tokens[keep]
                    active = [active[b] for b in keep]
                batch = step(unwrapped_model, batch, tokens)
        return completions, None

    def _get_per_token_logps_and_entropies(
        self,
        model,
        input_ids,
        attention_mask,
        logits_to_keep,
        batch_size=None,
        compute_entropy=False,
        compute_aux_loss=False,
        **multimodal,
    ):
        """TRL's per-token log-probs (and entropies) of the completions, each distinct prompt computed once.

        The ``num_generations`` rollouts of one prompt share it token for token, and the prompt is most of each row
        (PARL's induction prompts: 1,000-1,500 tokens, rubric sets: ~40-190). TRL runs every row whole, in the policy
        forward and backward, the reference forward and the old-policy forward; here a prompt's states are computed once
        and expanded over its rollouts (gradients sum back through the expansion, as they would over the copies), and
        only the rollouts' tokens run per row. Rollouts run in chunks of similar length, each cut to its longest
        (:func:`length_chunks`): TRL pads every completion to the batch's longest, and one rollout that runs to a
        192-token limit next to three of 45 tokens would more than double the completion tokens computed. Rollouts of
        one prompt that sampled the same completion run once and share its values. TRL shuffles a generation batch's
        rows over its gradient-accumulation steps, so a prompt is computed again in each micro-batch that holds one of
        its rollouts: where the rollouts fit one micro-batch, ``gradient_accumulation_steps: 1`` computes it once. A
        verdict judge's step (``benchmarks/grpo_verdict_loss.py``: 4 prompts of 160 tokens x 16 two-token rollouts, 27
        distinct rows of 64) ran its log-probs and backward in 3.6 s in one micro-batch, 7.0 s in two, and 44.0 s by
        TRL's path. Same values as TRL's path within float rounding (``tests/test_grpo.py``). Multimodal inputs, MoE
        auxiliary losses, activation checkpointing (which recomputes layers, so a layer's cache would be written twice),
        batches with no repeated prompt and sharded weights (ZeRO-3, FSDP) take TRL's path. Sharded weights because each
        forward there is a collective of every rank (ZeRO-3 gathers the weights, and checks that every rank asks for the
        same ones): this path runs one forward per distinct prompt and per length chunk, numbers that differ between
        ranks, and a rank with fewer went on to the loss's all-reduce while another waited in its next forward, a hang
        with no error. TRL's path runs ``rows / batch_size`` forwards on every rank.
        """
        prompt_ids, prompt_mask = input_ids[:, :-logits_to_keep], attention_mask[:, :-logits_to_keep]
        groups = _rows_by_tokens(ids[mask.bool()].tolist() for ids, mask in zip(prompt_ids, prompt_mask, strict=True))
        if (
            compute_aux_loss
            or any(v is not None for v in multimodal.values())
            or self.args.activation_checkpointing
            or len(groups) == input_ids.size(0)
            or min(len(prompt) for prompt in groups) < 2
            or self._weights_sharded()
        ):
            return super()._get_per_token_logps_and_entropies(
                model,
                input_ids,
                attention_mask,
                logits_to_keep,
                batch_size,
                compute_entropy,
                compute_aux_loss,
                **multimodal,
            )
        batch_size = batch_size or input_ids.size(0)
        completion_ids, completion_mask = input_ids[:, -logits_to_keep:], attention_mask[:, -logits_to_keep:]
        lengths = completion_mask.sum(-1).tolist()  # TRL right-pads completions
        config = self.accelerator.unwrap_model(model).config
        logps: dict[int, torch.Tensor] = {}
        entropies: dict[int, torch.Tensor] = {}
        for prompt, rows in groups.items():
            with self.accelerator.autocast():
                cache = prefill(model, list(prompt[:-1]), config, input_ids.device)
            # rollouts that sampled the same completion run once (a verdict judge's 16 hold a few distinct ones)
            copies = [
                [rows[i] for i in same]
                for same in _rows_by_tokens(completion_ids[row, : lengths[row]].tolist() for row in rows).values()
            ]
            for chunk in length_chunks([same[0] for same in copies], lengths, batch_size):
                width = max(1, max(lengths[row] for row in chunk))
                found = self._shared_prompt_logps(
                    model, cache, prompt[-1], completion_ids[chunk, :width], completion_mask[chunk, :width]
                )
                pad = (0, logits_to_keep - width)  # zeros where TRL's rows hold padding, which its loss masks
                logps.update(zip(chunk, torch.nn.functional.pad(found.log_probs[:, -width:], pad), strict=True))
                if compute_entropy:
                    entropies.update(zip(chunk, torch.nn.functional.pad(found.entropy[:, -width:], pad), strict=True))
            for first, *others in copies:
                for row in others:
                    logps[row] = logps[first]
                    if compute_entropy:
                        entropies[row] = entropies[first]
        order = range(input_ids.size(0))
        return (
            torch.stack([logps[row] for row in order]),
            torch.stack([entropies[row] for row in order]) if compute_entropy else None,
            None,
        )

    def _shared_prompt_logps(self, model, cache: DynamicCache, last: int, completion_ids, completion_mask):
        """TRL's fused-head output over ``completion_ids`` (rows of one prompt) after the prompt.

        ``cache`` holds the prompt less its ``last`` token, computed once; it is expanded over the rows (and
        left as it is, for the next chunk), and the rows run ``last`` and their completions, so the fused
        head scores every completion token as TRL's path does.
        """
        n, length = completion_ids.size(0), cache.get_seq_length() + 1
        expanded = DynamicCache(
            ddp_cache_data=[
                (layer.keys.expand(n, -1, -1, -1), layer.values.expand(n, -1, -1, -1)) for layer in cache.layers
            ],
            config=self.accelerator.unwrap_model(model).config,
        )
        ids = torch.cat([completion_ids.new_full((n, 1), last), completion_ids], dim=1)
        mask = torch.cat([completion_mask.new_ones((n, length)), completion_mask], dim=1)
        labels = ids.masked_fill(mask[:, length - 1 :] == 0, -100)  # the head scores labels[:, 1:]
        with self.accelerator.autocast():
            return model(
                input_ids=ids, attention_mask=mask, **cache_argument(model, expanded), labels=labels, fused_lm_head=True
            )

    def _weights_sharded(self) -> bool:
        """Whether each rank holds only a shard of the weights (ZeRO-3, FSDP), so that every forward is a collective."""
        return self.is_fsdp_enabled or (self.is_deepspeed_enabled and is_deepspeed_zero3_enabled())

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        start = time.perf_counter()
        rewards = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._metrics["train" if self.model.training else "eval"]["time/reward_s"].append(time.perf_counter() - start)
        return rewards


#: The trainer runs use: SharedPromptGRPOTrainer where the installed TRL has the private methods it overrides.
GRPO_TRAINER = pick_trainer(SharedPromptGRPOTrainer, GRPOTrainer, trl.__version__)


def _rows_by_tokens(sequences) -> dict[tuple[int, ...], list[int]]:
    """Row indices per distinct token sequence (a prompt or a completion, without padding), in order of first
    appearance."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for row, tokens in enumerate(sequences):
        groups.setdefault(tuple(tokens), []).append(row)
    return groups
