"""A recipe or flag the trainers cannot use fails before any work: one line naming the file (or the command line)
and the key, a non-zero exit, never argparse's usage or a traceback.

The recipes are real files and the commands real processes (``persetrain sft|rm|grpo``, ``python -m
persetrain.train.rm``), as a user runs them: what reaches a user's terminal is the process's stderr.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from persetrain.train import grpo, rm, sft
from persetrain.train.recipe import LAUNCH_KEYS, RecipeError, read_recipe

REPO = Path(__file__).resolve().parents[1]
PERSETRAIN = [sys.executable, "-m", "persetrain.cli"]


def _failure(command: list[str], cwd: Path) -> str:
    """The stderr of a command that must fail in one line (at most 3 lines on stderr, no traceback)."""
    result = subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=300)
    assert result.returncode != 0, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert 1 <= len(lines) <= 3 and "Traceback" not in result.stderr and "usage:" not in result.stderr, result.stderr
    return lines[-1]


@pytest.mark.slow
def test_a_value_of_the_wrong_type_names_the_file_and_the_key(tmp_path):
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "fast.yaml").write_text("output_dir: runs/x\nlearning_rate: fast\n")
    line = _failure([*PERSETRAIN, "sft", "--config", "recipes/fast.yaml"], tmp_path)
    assert line == "error: recipes/fast.yaml: key 'learning_rate': expected a float, got 'fast'"

    # YAML reads [2] as a list: TrainingArguments would end in a TypeError traceback
    (recipes / "steps.yaml").write_text("output_dir: runs/x\nmax_steps: [2]\n")
    line = _failure([sys.executable, "-m", "persetrain.train.rm", "--config", "recipes/steps.yaml"], tmp_path)
    assert line == "error: recipes/steps.yaml: key 'max_steps': expected an integer, got [2]"


@pytest.mark.slow
def test_an_unknown_key_names_the_file_and_the_closest_key(tmp_path):
    recipe = tmp_path / "typo.yaml"
    recipe.write_text("output_dir: runs/x\nnum_generation: 4\n")
    line = _failure([*PERSETRAIN, "grpo", "--config", str(recipe)], tmp_path)
    assert line == f"error: {recipe}: unknown key 'num_generation'; did you mean 'num_generations'?"


@pytest.mark.slow
def test_a_renamed_key_names_its_new_name_with_exit_code_2(tmp_path):
    """PARL's reward judge keys are named for the reward; a recipe with the old name is refused, not read as unknown
    (whose closest key would be another one)."""
    recipe = tmp_path / "old.yaml"
    recipe.write_text("output_dir: runs/x\njudge_model: runs/verifier/merged\n")
    result = subprocess.run([*PERSETRAIN, "grpo", "--config", str(recipe)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip() == f"error: {recipe}: key 'judge_model' is now 'reward_judge_model'"


@pytest.mark.parametrize("old", ["judge_model", "judge_backend", "judge_base_url", "judge_cache"])
def test_each_renamed_reward_judge_key_is_refused_in_a_recipe_and_on_the_command_line(tmp_path, old):
    path = tmp_path / "old.yaml"
    path.write_text(f"{old}: x\n")
    with pytest.raises(RecipeError) as err:
        grpo.make_parser().parse_args_and_config(["--config", str(path)])
    assert str(err.value) == f"{path}: key '{old}' is now 'reward_{old}'"
    with pytest.raises(RecipeError) as err:
        grpo.make_parser().parse_args_and_config([f"--{old}", "x"])
    assert str(err.value) == f"command line: --{old} is now --reward_{old}"


@pytest.mark.parametrize(
    ("recipe", "message"),
    [
        ("use_peft: maybe", "key 'use_peft': expected true or false, got 'maybe'"),
        ("lr_scheduler_type: cosinus", "key 'lr_scheduler_type': expected one of linear, cosine,"),
        ("per_device_train_batch_size: 2.5", "key 'per_device_train_batch_size': expected an integer, got 2.5"),
        ("learning_rate: true", "key 'learning_rate': expected a float, got True"),
        ("dataset_train_split: null", "key 'dataset_train_split': expected a string, got null"),
    ],
)
def test_every_kind_of_value_is_checked_before_the_config_is_built(tmp_path, recipe, message):
    path = tmp_path / "bad.yaml"
    path.write_text(recipe + "\n")
    with pytest.raises(RecipeError) as err:
        sft.make_parser().parse_args_and_config(["--config", str(path)])
    assert str(err.value).startswith(f"{path}: {message}")


def test_a_bad_flag_is_one_line_naming_the_flag():
    with pytest.raises(RecipeError) as err:
        rm.make_parser().parse_args_and_config(["--learning_rate", "fast"])
    assert str(err.value) == "command line: --learning_rate: expected a float, got 'fast'"
    with pytest.raises(RecipeError) as err:
        rm.make_parser().parse_args_and_config(["--learnig_rate", "1e-4"])
    assert str(err.value) == "command line: unknown option '--learnig_rate'; did you mean '--learning_rate'?"


def test_yaml_strings_are_converted_as_flags_are():
    """PyYAML reads 2e-5 (no dot) as a string; the key's type turns it into the float a flag would give."""
    parser = sft.make_parser()
    values = parser.check_recipe_values("r.yaml", {"learning_rate": "2e-5", "use_peft": "yes", "max_steps": 3.0})
    assert values == {"learning_rate": 2e-5, "use_peft": True, "max_steps": 3}


@pytest.mark.parametrize("recipe", sorted((REPO / "recipes").rglob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_recipe_passes_the_checks_unchanged(recipe):
    values = read_recipe(recipe)
    for key in LAUNCH_KEYS:
        values.pop(key, None)
    parser = {"perse": sft, "verifier": sft, "rm": rm, "parl": grpo, "verdict": grpo}[recipe.parent.name].make_parser()
    assert parser.check_recipe_values(str(recipe), values) == values
