"""Rule-verifier SFT speed: shared-prefix packing against padded per-row batches, on the verifier's own data.

The data is what ``recipes/verifier/cpu_smollm2_parl_news.yaml`` trains on: PARL's judge prompt over the
SYNTHETIC sample users' headlines (``persetrain prepare sample`` -> ``prepare parl --task news`` ->
``prepare verifier --counterfactuals``). Both paths train the recipe's LoRA adapter on the same rows in the
same order (token order, which is what shared-prefix packing batches by), ``--rows`` rows per step:

- ``padded``: per-row SFT, each row its own padded sequence (``CompletionOnlySFTTrainer``);
- ``shared``: ``shared_prefix_packing: true`` (``persetrain.prefix_pack``): one packed trie per batch.

Each path times ``--steps`` optimizer steps after two warm-up steps and keeps its best; ``--rounds``
repeats both, interleaved, and keeps each one's best (a shared 2-core machine moves with its load).
Reported: rows/s, tokens computed per row (padding included), and ``shared_prefix_speedup`` (the rows/s
ratio of the same run). The last line printed is one JSON object.

    python benchmarks/verifier_sft.py [--rows 28] [--steps 3] [--rounds 2]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from common import StepTimer, emit  # beside this script

from persetrain.models import DEFAULT_MODEL
from persetrain.train.sft import build_sft_trainer
from persetrain.train.sft import make_parser as sft_parser

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes" / "verifier" / "cpu_smollm2_parl_news.yaml"


def verifier_data(root: Path) -> Path:
    from data_prep.parl.prepare import prepare_parl
    from data_prep.parl.rule_verifier import prepare_verifier
    from data_prep.synthetic.parl import write_parl_sample

    prepare_parl(write_parl_sample(root / "raw").root, root / "parl", tasks=("news",))
    prepare_verifier(root / "verifier", parl=[root / "parl" / "parl_news"], counterfactuals=True)
    return root / "verifier"


def measure(data: Path, model: str, shared: bool, rows: int, steps: int, warmup: int = 2) -> dict:
    """Best rows/s over ``steps`` timed steps, and the tokens one step computes per row."""
    with tempfile.TemporaryDirectory(prefix="verifier-bench-") as out:
        argv = ["--config", str(RECIPE), "--model_name_or_path", model, "--dataset_path", str(data)]
        argv += ["--output_dir", out, "--max_steps", str(warmup + steps), "--per_device_train_batch_size", str(rows)]
        argv += ["--save_strategy", "no", "--logging_steps", "1", "--disable_tqdm", "true"]
        argv += ["--shared_prefix_packing", "true"]  # the same row order for both paths: token order
        timer = StepTimer()
        trainer = build_sft_trainer(*sft_parser().parse_args_and_config(argv), [timer])
        if not shared:
            from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

            trainer.data_collator = DataCollatorForLanguageModeling(pad_token_id=trainer.processing_class.pad_token_id)
        batch = trainer.data_collator([trainer.train_dataset[i] for i in range(rows)])
        tokens = batch["input_ids"].numel()  # padding included: the padded path computes it too
        trainer.train()
    return {"rows_per_s": rows / min(timer.seconds[warmup:]), "tokens_per_row": tokens / rows}


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument("--rows", type=int, default=28, help="rows per optimizer step")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per path (best one kept)")
    parser.add_argument("--rounds", type=int, default=2, help="repeat both paths, interleaved")
    return parser


def main() -> None:
    args = make_parser().parse_args()
    with tempfile.TemporaryDirectory(prefix="verifier-data-") as root:
        data = verifier_data(Path(root))
        best: dict[str, dict] = {}
        for _ in range(args.rounds):
            for name, shared in (("padded", False), ("shared", True)):
                got = measure(data, args.model, shared, args.rows, args.steps)
                if name not in best or got["rows_per_s"] > best[name]["rows_per_s"]:
                    best[name] = got
    figures = {
        "rows_per_step": args.rows,
        "padded_rows_per_s": round(best["padded"]["rows_per_s"], 3),
        "shared_rows_per_s": round(best["shared"]["rows_per_s"], 3),
        "padded_tokens_per_row": round(best["padded"]["tokens_per_row"], 1),
        "shared_tokens_per_row": round(best["shared"]["tokens_per_row"], 1),
        "shared_prefix_speedup": round(best["shared"]["rows_per_s"] / best["padded"]["rows_per_s"], 2),
    }
    for key, value in figures.items():
        print(f"{key:>24}: {value}")
    emit(figures)


if __name__ == "__main__":
    main()
