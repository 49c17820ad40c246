"""The verl backend: the config ``persetrain grpo --backend verl`` writes is read by verl's own code.

verl 0.9 needs transformers<5.11, so it lives in ``.venv-verl`` (``make verl-env``, built here when
missing). The check runs there, in a subprocess: Hydra composes the written file over verl's
``ppo_trainer.yaml`` exactly as ``python -m verl.trainer.main_ppo --config-path --config-name`` does,
``verl.utils.config.validate_config`` (what ``main_ppo`` runs first) accepts it, verl's dataclass
configs are built from it, and the PARL reward is called through verl's own loader
(``load_reward_manager``) and reward manager on a CPU batch made from the parquet that ``persetrain
prepare parl`` exports, read the way verl's dataset reads it.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path

import pytest
import yaml

from data_prep.parl.prepare import prepare_parl
from data_prep.synthetic.parl import write_parl_sample
from persetrain.train.verl import REWARD_FUNCTION, REWARD_MODULE, VERL_VENV_PYTHON
from persetrain.train.verl import main as write_verl_config

pytestmark = pytest.mark.slow  # every test here starts processes or trains

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "recipes" / "parl" / "qwen3-8b_amazon_parl-a.yaml"

CHECK = textwrap.dedent("""
    import json, sys
    from pathlib import Path

    import numpy as np
    import torch
    from datasets import load_dataset
    from hydra import compose, initialize_config_dir
    from transformers import AutoTokenizer
    from verl import DataProto
    from verl.trainer.ppo.reward import load_reward_manager
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config

    config_file, judge_dir = Path(sys.argv[1]), sys.argv[2]
    kwargs = "reward.custom_reward_function.reward_kwargs"
    with initialize_config_dir(config_dir=str(config_file.parent), version_base=None):
        config = compose(config_name=config_file.stem, overrides=[  # the judge: the tiny model, in-process
            f"{kwargs}.judge_model={judge_dir}", f"{kwargs}.judge_backend=hf", f"{kwargs}.judge_base_url=null"])
    validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
    actor = omega_conf_to_dataclass(config.actor_rollout_ref.actor)
    rollout = omega_conf_to_dataclass(config.actor_rollout_ref.rollout)
    out = {"actor_class": type(actor).__name__, "use_kl_loss": actor.use_kl_loss, "kl_loss_coef": actor.kl_loss_coef,
           "kl_loss_type": actor.kl_loss_type, "loss_agg_mode": actor.loss_agg_mode, "lr": actor.optim.lr,
           "min_lr_ratio": actor.optim.min_lr_ratio, "lr_scheduler_type": actor.optim.lr_scheduler_type,
           "param_offload": actor.fsdp_config.param_offload, "optimizer_offload": actor.fsdp_config.optimizer_offload,
           "ppo_mini_batch_size": actor.ppo_mini_batch_size, "n": rollout.n, "rollout": rollout.name,
           "temperature": rollout.temperature, "top_p": rollout.top_p, "top_k": rollout.top_k,
           "train_batch_size": config.data.train_batch_size, "max_prompt_length": config.data.max_prompt_length,
           "max_response_length": config.data.max_response_length, "adv_estimator": config.algorithm.adv_estimator,
           "model_path": config.actor_rollout_ref.model.path, "n_gpus_per_node": config.trainer.n_gpus_per_node,
           "total_epochs": config.trainer.total_epochs, "reward_manager": config.reward.reward_manager.name}
    tokenizer = AutoTokenizer.from_pretrained(judge_dir)
    manager = load_reward_manager(config, tokenizer)
    rows = load_dataset("parquet", data_files=config.data.train_files)["train"].select(range(3))
    completions = ['[{"rule": "The headline is written entirely in lowercase letters."}, '
                   '{"rule": "The headline ends with a question mark or an exclamation mark."}]',
                   '[{"rule": "Too short."}, {"rule": "The headline is written in lowercase."}]', "no rubric here"]
    out["scores"] = []
    for row, text in zip(rows, completions):
        prompt, response = torch.tensor([tokenizer.encode("prompt")]), torch.tensor([tokenizer.encode(text)])
        batch = DataProto.from_dict(
            tensors={"prompts": prompt, "responses": response,
                     "attention_mask": torch.ones(1, prompt.shape[1] + response.shape[1], dtype=torch.long)},
            non_tensors={key: np.array([row[key]], dtype=object)
                         for key in ("data_source", "reward_model", "extra_info")})
        result = manager.loop.run_until_complete(manager.run_single(batch))
        out["scores"].append({"score": result["reward_score"], "info": result["reward_extra_info"]})
    print(json.dumps(out, default=str))
""")


@pytest.fixture(scope="module")
def verl_python() -> Path:
    """``.venv-verl``'s interpreter (`make test` builds it first; built here when a test runs without make)."""
    if not VERL_VENV_PYTHON.exists():
        subprocess.run(["make", "verl-env"], cwd=REPO, check=True)
    return VERL_VENV_PYTHON


def test_verl_config_loads_in_verl_and_scores_through_verls_reward_loader(verl_python, tiny_llama_dir, tmp_path):
    write_parl_sample(tmp_path / "raw", seed=0)
    prepare_parl(tmp_path / "raw", tmp_path / "data", tasks=("news",))
    parquet = tmp_path / "data" / "parl_news" / "verl" / "train.parquet"
    command = write_verl_config(
        ["--config", str(RECIPE), "--output_dir", str(tmp_path / "run"), "--verl_train_files", str(parquet)],
        python=str(verl_python),
    )
    config_file = tmp_path / "run" / "verl" / f"{RECIPE.stem}.yaml"
    assert command[1:4] == ["-m", "verl.trainer.main_ppo", "--config-path"] and command[-1] == RECIPE.stem
    written = yaml.safe_load(config_file.read_text())
    # verl 0.9 silently ignores the pre-0.9 top-level reward keys: they must not be where the reward is.
    assert "custom_reward_function" not in written and "reward_model" not in written
    assert written["reward"]["custom_reward_function"]["path"] == REWARD_MODULE
    assert written["reward"]["custom_reward_function"]["name"] == REWARD_FUNCTION

    script = tmp_path / "check.py"
    script.write_text(CHECK)
    done = subprocess.run(
        [str(verl_python), str(script), str(config_file), str(tiny_llama_dir)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    scores = seen.pop("scores")
    assert seen == {
        "actor_class": "FSDPActorConfig",
        "use_kl_loss": True,
        "kl_loss_coef": 0.001,
        "kl_loss_type": "low_var_kl",
        "loss_agg_mode": "token-mean",
        "lr": 1e-5,
        "min_lr_ratio": 0.1,
        "lr_scheduler_type": "cosine",
        "param_offload": True,
        "optimizer_offload": True,
        "ppo_mini_batch_size": 8,
        "n": 5,
        "rollout": "vllm",
        "temperature": 0.6,
        "top_p": 0.95,
        "top_k": 20,
        "train_batch_size": 8,
        "max_prompt_length": 10240,
        "max_response_length": 2048,
        "adv_estimator": "grpo",
        "model_path": "Qwen/Qwen3-8B",
        "n_gpus_per_node": 8,
        "total_epochs": 4,
        "reward_manager": "naive",
    }
    # verl stacks every key across samples: the same keys for a scored, a too-short and an unparsable set.
    assert len({tuple(sorted(s["info"])) for s in scores}) == 1
    scored, too_few, unparsable = scores
    assert unparsable["score"] == 0.0 and unparsable["info"]["parsed"] == 0
    assert too_few["score"] == 0.1 and too_few["info"]["valid_rules"] <= 1
    assert scored["info"]["total_rules"] == 2 and scored["info"]["parsed"] == 1 and scored["score"] >= 0.1
