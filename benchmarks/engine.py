"""Engine speed, measured as ratios within one run on one machine.

1. The machine's fp32 matmul rate (the ceiling every utilization figure is taken against).
2. Forward throughput of the ``hf`` backend as a share of that rate (2·params FLOPs per token).
3. A PARL-shaped scoring workload — 8 prefixes of ~600 tokens (system prompt + item metadata + a
   response), each followed by 10 rubric-rule tails of ~40 tokens — scored with ``choice_probs``
   three ways: shared-prefix KV reuse (the engine's default), plain batching without reuse, and
   the naive way (one ``generate(max_new_tokens=1)`` per request, sequentially).

The last line printed is one JSON object with the figures.

    python benchmarks/engine.py [--model SPEC] [--prefixes 8] [--tails 10]
"""

from __future__ import annotations

import argparse
import random

import torch
from common import best_of, emit, matmul_rate  # beside this script

from persetrain.console import console, set_quiet
from persetrain.engine import ChatRequest, load_engine
from persetrain.models import DEFAULT_MODEL

WORDS = [
    "river",
    "lantern",
    "quiet",
    "harbor",
    "winter",
    "garden",
    "letter",
    "mountain",
    "stranger",
    "promise",
    "silver",
    "morning",
    "library",
    "journey",
    "shadow",
    "village",
    "ocean",
    "secret",
    "window",
    "thunder",
    "candle",
    "meadow",
    "bridge",
    "ember",
    "captain",
    "orchard",
    "whisper",
    "compass",
    "festival",
    "glacier",
]
SYSTEM = (
    "You are a careful judge. You read an item, a user's own response to it, and one rubric "
    "rule derived from that user's history. Decide whether the response satisfies the rule. "
    "Answer with a single word: yes or no."
)


def _text(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words)).capitalize() + "."


def parl_workload(tokenizer, n_prefixes: int, n_tails: int, seed: int = 0) -> list[ChatRequest]:
    rng = random.Random(seed)
    requests = []
    for i in range(n_prefixes):
        head = f"Item metadata: {_text(rng, 60)}\n\nResponse: {_text(rng, 420)}\n\nRule: "
        for j in range(n_tails):
            rule = _text(rng, 28) + " Does the response satisfy this rule?"
            requests.append(ChatRequest.of(head + rule, system=SYSTEM, id=f"{i}-{j}"))
    return requests


@torch.inference_mode()
def measure_forward_gflops(model, tokens: int = 512, batch: int = 2, repeats: int = 3) -> float:
    """A full forward pass (all logits), where 2·params FLOPs per token is the real work."""
    params = sum(p.numel() for p in model.parameters())
    ids = torch.randint(0, model.config.vocab_size, (batch, tokens))
    model(ids)  # warm-up
    seconds, _ = best_of(lambda: model(ids), repeats)
    return 2 * params * batch * tokens / seconds / 1e9


@torch.inference_mode()
def naive_choice_probs(backend, requests: list[ChatRequest], choices: list[str]) -> list[dict[str, float]]:
    """One ``generate(max_new_tokens=1)`` per request, reading the scores of the choice tokens."""
    tok = backend.tokenizer
    choice_ids = [tok(c, add_special_tokens=False)["input_ids"][0] for c in choices]
    out = []
    for request in requests:
        ids = torch.tensor([backend.encode(backend.render(request))])
        gen = backend.model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=1,
            do_sample=False,
            output_scores=True,
            return_dict_in_generate=True,
            pad_token_id=tok.pad_token_id,
        )
        logp = torch.log_softmax(gen.scores[0][0].float(), dim=-1)[choice_ids]
        probs = torch.softmax(logp, dim=-1).tolist()
        out.append(dict(zip(choices, probs, strict=True)))
    return out


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--prefixes", type=int, default=8)
    parser.add_argument("--tails", type=int, default=10)
    return parser


def main() -> None:
    args = make_parser().parse_args()
    set_quiet(True)

    shared = load_engine(args.model)
    batched = load_engine(args.model, prefix_sharing=False)
    batched.backend.model, batched.backend.tokenizer = shared.backend.model, shared.backend.tokenizer
    backend = shared.backend
    model = backend.model
    choices = ["yes", "no"]

    matmul = matmul_rate([(2048, 2048, 2048)], repeats=7) / 1e9
    forward = measure_forward_gflops(model)
    console.print(f"fp32 matmul: {matmul:.1f} GFLOP/s; full forward: {forward:.1f} GFLOP/s ({forward / matmul:.0%})")

    requests = parl_workload(backend.tokenizer, args.prefixes, args.tails)
    rows = backend._choice_rows(requests, choices).rows
    total_tokens = sum(len(r.tokens) for r in rows)
    computed = sum(
        group.prefix_len + sum(len(rows[k].tokens) - group.prefix_len for k in group.members)
        for group in backend._prefix_groups(rows)
    )
    ideal = total_tokens / computed

    timings = {}
    timings["shared"], fast = best_of(lambda: shared.choice_probs(requests, choices), 1)
    timings["batched"], plain = best_of(lambda: batched.choice_probs(requests, choices), 1)
    timings["naive"], naive = best_of(lambda: naive_choice_probs(backend, requests, choices), 1)

    diff = max(abs(f.probs[c] - n[c]) for f, n in zip(fast, naive, strict=True) for c in choices)
    diff_batched = max(abs(f.probs[c] - p.probs[c]) for f, p in zip(fast, plain, strict=True) for c in choices)
    console.print(
        f"{len(requests)} requests, {total_tokens} request tokens, {computed} computed with "
        f"prefix reuse (ideal speed-up {ideal:.2f}x)"
    )
    for name, seconds in timings.items():
        console.print(f"  {name:8s} {seconds:7.1f} s  {total_tokens / seconds:7.1f} request tokens/s")
    figures = {
        "matmul_gflops": round(matmul, 2),
        "forward_gflops": round(forward, 2),
        "forward_flop_utilization": round(forward / matmul, 3),
        "requests": len(requests),
        "request_tokens": total_tokens,
        "computed_tokens": computed,
        "ideal_speedup": round(ideal, 3),
        "speedup_vs_batched": round(timings["batched"] / timings["shared"], 3),
        "speedup_vs_naive": round(timings["naive"] / timings["shared"], 3),
        "share_of_ideal": round(timings["batched"] / timings["shared"] / ideal, 3),
        "max_abs_prob_diff": float(f"{diff:.3g}"),
        "max_abs_prob_diff_vs_batched": float(f"{diff_batched:.3g}"),
        "seconds": {k: round(v, 2) for k, v in timings.items()},
        "torch_threads": torch.get_num_threads(),
    }
    emit(figures)


if __name__ == "__main__":
    main()
