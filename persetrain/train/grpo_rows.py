"""GRPO's training rows shaped before TRL batches them: overlong prompts dropped, prefixed prompts rendered, and a
verdict judge's item layout checked against the batches TRL will cut.

TRL batches the unshuffled prompt stream as it comes, each prompt ``num_generations`` times in a row, and renders
every conversational prompt itself; what a reward compares within a batch (``verdict-consistent``: an item's variants)
and what the policy must see (an assistant prefix) is settled here, on the dataset, before the first step.
``persetrain.train.grpo`` calls these on every split it trains or evaluates on.
"""

from __future__ import annotations

from itertools import pairwise
from pathlib import Path

from datasets import Dataset
from trl import GRPOConfig

from persetrain.console import console
from persetrain.io import InputError
from persetrain.train.recipe import RecipeError
from persetrain.train.runner import item_rows


def drop_overlong_prompts(ds: Dataset, tokenizer, max_prompt_length: int | None) -> Dataset:
    """Keep the rows whose chat-formatted prompt fits ``max_prompt_length`` tokens; say how many were dropped.

    A judge item's variants (``item_id``: a question's orders, or its yes / no candidates, which differ in length)
    go together: a variant dropped alone would leave its item split and every later item shifted against the
    batch edges that ``verdict-consistent`` relies on (:func:`check_item_layout`)."""
    if max_prompt_length is None:
        return ds
    encoded = [
        tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=True, return_dict=True)
        for p in ds["prompt"]
    ]
    lengths = [len(e["input_ids"]) for e in encoded]
    items = ds["item_id"] if "item_id" in ds.column_names else list(range(len(ds)))
    overlong = {items[i] for i, n in enumerate(lengths) if n > max_prompt_length}
    keep = [i for i, item in enumerate(items) if item not in overlong]
    if len(keep) < len(ds):
        with_items = " (with the other variants of their items)" if "item_id" in ds.column_names else ""
        console.print(
            f"dropped {len(ds) - len(keep)} of {len(ds)} prompts longer than max_prompt_length "
            f"{max_prompt_length} tokens{with_items} (longest: {max(lengths)})"
        )
    if not keep:
        raise RecipeError(f"max_prompt_length: every prompt is longer than {max_prompt_length} tokens")
    return ds.select(keep)


def check_item_layout(ds: Dataset, path: str | Path, args: GRPOConfig, needs: str = "verdict-consistent") -> None:
    """Refuse, before any step, a run whose batches would split an item's variants; ``needs`` names what compares
    them (the ``verdict-consistent`` reward, ``advantage_group: item``) in the messages.

    The reward compares an item's variants within the batch one process scores (``persetrain.rewards.verdict``), and
    TRL hands each process, each generation, the next ``per_device_train_batch_size`` x ``steps_per_generation``
    completions of the unshuffled prompt stream, each prompt ``num_generations`` times in a row (measured on two
    ranks, ``tests/test_distributed.py``). So the variants of every item must be adjacent and complete, the data
    unshuffled, and that batch a multiple of an item's variants x ``num_generations``. A split item would be paid by
    its verdict alone, silently (``verdict/split_item_share`` shows it during training); with items of several sizes
    no batch keeps every item whole, which is said.
    """
    if args.shuffle_dataset:
        raise RecipeError(
            f"{needs} compares an item's orders within one batch: set shuffle_dataset: false (a shuffled "
            "sampler scatters them)"
        )
    if "item_id" not in ds.column_names:
        raise InputError(
            path,
            f"{needs} groups rows by the item_id column, which this dataset lacks; write it with `persetrain prepare "
            "verdict`",
            field="item_id",
        )
    ids = ds["id"] if "id" in ds.column_names else [f"row {i}" for i in range(len(ds))]
    items = ds["item_id"]
    rows = item_rows(items)
    apart = [b for indices in rows.values() for a, b in pairwise(indices) if b != a + 1]
    if apart:
        first = min(apart)
        raise InputError(
            path,
            f"the rows of item {items[first]!r} are not adjacent; {needs} needs an item's variants next to "
            "each other, as `persetrain prepare verdict` writes them",
            ids[first],
            "item_id",
        )
    if "n_orders" in ds.column_names:
        for row_id, item, n in zip(ids, items, ds["n_orders"], strict=True):
            if len(rows[item]) != n:
                raise InputError(
                    path,
                    f"item {item!r} has {len(rows[item])} of its {n} variants here; {needs} needs them all, "
                    "as `persetrain prepare verdict` writes them",
                    row_id,
                    "n_orders",
                )
    distinct = sorted({len(indices) for indices in rows.values()})
    if len(distinct) > 1:
        console.print(
            f"[yellow]{needs}: items have {', '.join(map(str, distinct))} variants, so some will be split "
            "at batch edges and paid by their verdict alone (verdict/split_item_share)[/yellow]"
        )
        return
    whole = distinct[0] * args.num_generations
    per_process = args.generation_batch_size // args.world_size
    if per_process % whole:
        raise RecipeError(
            f"{needs}: each process scores per_device_train_batch_size {args.per_device_train_batch_size} x "
            f"steps_per_generation {args.steps_per_generation} = {per_process} completions at a time, which must be a "
            f"multiple of an item's {distinct[0]} variants x num_generations {args.num_generations} = {whole}"
        )


def render_prefixed_prompts(ds: Dataset, tokenizer) -> Dataset:
    """Prompts that end with an assistant prefix (``mcq-letter``'s ``Answer: ``) as the text the engine renders.

    TRL renders every conversational prompt with a fresh generation prompt after its last message, so a prefix
    given as a last assistant message would be closed as a turn of its own, and the policy trained after tokens
    no evaluator shows it. Rendered here by the engine's own function (``render_prompt``), TRL takes the prompt
    as text and tokenizes it as it is. The prefix's trailing whitespace is left to the completion: a BPE tokenizer
    joins it to the next word (``Answer: A`` is ``Answer``, ``:``, `` A``), so the engine reads a choice after the
    prefix without it, and a policy trained after a lone space token would learn a verdict in a context no
    evaluator reads (the parser strips the space again). A chat template that writes a BOS token the tokenizer
    adds again loses its own.
    """
    from persetrain.engine.hf.backend import render_prompt
    from persetrain.prompts.verdict import request_of

    if not ds.num_rows or not any(isinstance(p, list) and p and p[-1]["role"] == "assistant" for p in ds["prompt"]):
        return ds
    bos = tokenizer.bos_token
    adds_bos = bos is not None and tokenizer("x")["input_ids"][:1] == [tokenizer.bos_token_id]

    def render(row: dict) -> dict:
        request = request_of(row["prompt"])
        text = render_prompt(
            tokenizer, request.model_copy(update={"assistant_prefix": request.assistant_prefix.rstrip()})
        )
        return {"prompt": text[len(bos) :] if adds_bos and text.startswith(bos) else text}

    return ds.map(render, desc="render prefixed prompts")
