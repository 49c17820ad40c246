"""The one shared-prefix packer: rows that share a head attend to one copy of it, each row seeing exactly the tokens
and positions it would see alone.

Three users, one layout rule. The engine's scoring (``persetrain.engine.hf.pack``) runs tails end to end in one row
after their prefix's cached states (:func:`chains_visible`); SFT's ``shared_prefix_packing`` merges a batch's rows
into a prefix trie (:func:`prefix_trie`); a reward model's listwise batch (``persetrain.reward_model.batches``) runs
its options after their question's cached context. Each builds which key a token may see, and :func:`attention_mask`
turns that into the mask the model takes, with the model's sliding window applied by position: a mask given to the
model replaces its own, so the window must be applied here or a windowed model (Mistral, Qwen2 with
``use_sliding_window``, Gemma 2/3) would attend further back than it does alone.

Why a trie for SFT: a yes/no verifier is trained on many checks of one text. PARL's judge prompt is the system
message, the task input and the text (~200 tokens), then the rule and the answer (~30), and the verifier data asks
every rule of a text in that prompt. Per-row SFT computes the ~200 shared tokens once per rule; here each distinct
token path is computed once per batch.

How: the batch's rows (prompt + completion token ids) are merged into a prefix trie. Every trie node is one
position of a single packed row; a position attends to itself and its ancestors (a 4-D attention mask,
which every transformers attention path takes as is), and its position id is its depth, so each row sees
exactly the tokens and positions it would see alone. Each (row, completion token) is predicted from its
parent's position: a token two rows share is predicted once but counted once per row, so the loss, the
normalisation by ``num_items_in_batch`` and the gradients equal per-row SFT's (``tests/test_prefix_pack.py``).
Rows are batched in token order (:class:`PrefixGroupedSampler`) so that rows sharing a head share a batch.

The mask is ``N x N`` for the ``N`` packed tokens: batches of a few thousand distinct tokens, the sizes a
CPU or one GPU trains, cost far less in attention than the repeated heads cost in the rest of the model.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch


def sliding_window(config: Any) -> int | None:
    """The model's attention window in positions, or None when it attends to every earlier position."""
    if not getattr(config, "use_sliding_window", True):  # Qwen2 declares a window it does not use by default
        return None
    return getattr(config, "sliding_window", None) or None


def attention_mask(
    visible: torch.Tensor, query_positions: torch.Tensor, key_positions: torch.Tensor, config: Any, dtype: torch.dtype
) -> torch.Tensor | dict[str, torch.Tensor]:
    """The additive mask a model takes for ``visible`` (bool ``[B, 1, Q, K]``: query attends to key), with the model's
    sliding window applied: a query sees no key ``sliding_window`` or more positions back (positions ``[B, Q]`` and
    ``[B, K]``). A model whose layers mix windowed and full attention (``layer_types``) gets one mask per layer type."""
    full = torch.zeros(visible.shape, dtype=dtype, device=visible.device).masked_fill(~visible, torch.finfo(dtype).min)
    window = sliding_window(config)
    if not window:
        return full
    too_far = query_positions[:, None, :, None] - key_positions[:, None, None, :] >= window
    sliding = full.masked_fill(too_far, torch.finfo(dtype).min)
    if "sliding_attention" in (getattr(config, "layer_types", None) or []):
        return {"full_attention": full, "sliding_attention": sliding}
    return sliding


def chains_visible(lengths: Sequence[int], device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Tails of ``lengths`` laid end to end: ``[T, T]`` bool (a token sees its own tail's earlier tokens and itself)
    and each token's offset in its tail ``[T]`` (its position after the shared prefix)."""
    segment = torch.repeat_interleave(torch.arange(len(lengths), device=device), torch.tensor(lengths, device=device))
    offset = torch.cat([torch.arange(n, device=device) for n in lengths])
    return (segment[:, None] == segment[None, :]) & (offset[:, None] >= offset[None, :]), offset


def prefix_trie(rows: Sequence[tuple[Sequence[int], Sequence[int]]]) -> dict[str, torch.Tensor]:
    """Pack ``(input_ids, labels)`` rows (TRL's: ``labels`` is -100 where a token carries no loss) into a trie.

    Returns ``input_ids`` ``[1, N]`` (one token per node, parents before children), ``position_ids``
    ``[1, N]`` (depths), ``tree_mask`` ``[1, 1, N, N]`` (bool: query attends to key), and one entry per
    (row, completion token): ``label_positions`` ``[M]`` (the position that predicts it) and ``labels``
    ``[1, M]`` (the token).
    """
    children: dict[tuple[int, int], int] = {}
    tokens: list[int] = []
    parents: list[int] = []
    depths: list[int] = []
    label_positions: list[int] = []
    labels: list[int] = []
    for ids, row_labels in rows:
        node = -1
        for depth, (token, label) in enumerate(zip(ids, row_labels, strict=True)):
            if label != -100 and node >= 0:
                label_positions.append(node)
                labels.append(label)
            child = children.get((node, token))
            if child is None:
                child = children[(node, token)] = len(tokens)
                tokens.append(token)
                parents.append(node)
                depths.append(depth)
            node = child
    n = len(tokens)
    mask = torch.zeros((n, n), dtype=torch.bool)
    for i, parent in enumerate(parents):
        if parent >= 0:
            mask[i] = mask[parent]
        mask[i, i] = True
    return {
        "input_ids": torch.tensor([tokens]),
        "position_ids": torch.tensor([depths]),
        "tree_mask": mask[None, None],
        "label_positions": torch.tensor(label_positions, dtype=torch.long),
        "labels": torch.tensor([labels], dtype=torch.long),
    }


class SharedPrefixCollator:
    """TRL-tokenized rows (``input_ids``, ``labels``) to one :func:`prefix_trie` batch.

    ``shift_labels`` repeats ``labels``: the trainer counts ``num_items_in_batch`` from it as it stands (the
    labels are already aligned with the positions that predict them), one item per (row, completion token).
    """

    def __call__(self, examples: list[dict]) -> dict[str, torch.Tensor]:
        batch = prefix_trie([(e["input_ids"], e["labels"]) for e in examples])
        batch["shift_labels"] = batch["labels"]
        return batch


class PrefixGroupedSampler(torch.utils.data.Sampler[int]):
    """Rows in token order, cut into batches, the batches shuffled each epoch (seeded).

    Token order puts rows with a common head next to each other, so they land in one batch and share it; the
    shuffle keeps the order of batches random, as ``group_by_length`` does for lengths.
    """

    def __init__(self, input_ids: Sequence[Sequence[int]], batch_size: int, seed: int):
        rows = [list(ids) for ids in input_ids]  # one pass: a datasets Column read row by row costs ~0.4 ms a row
        order = sorted(range(len(rows)), key=rows.__getitem__)
        self.batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        return sum(len(b) for b in self.batches)

    def __iter__(self) -> Iterator[int]:
        generator = torch.Generator().manual_seed(self.seed + self.epoch)
        for k in torch.randperm(len(self.batches), generator=generator).tolist():
            yield from self.batches[k]
