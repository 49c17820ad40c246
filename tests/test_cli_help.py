"""The command line explains itself: the trainers' keys, the version, shell completion and each evaluator."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
from typer.main import get_command
from typer.testing import CliRunner

from persetrain.cli import app
from persetrain.data import read_split
from persetrain.evaluators.registry import registered
from persetrain.tasks import get_task, record_examples
from persetrain.train import grpo, rm, sft

REPO = Path(__file__).resolve().parents[1]
TRAINERS = {"sft": (sft, "SFTConfig"), "rm": (rm, "RMConfig"), "grpo": (grpo, "GRPOConfig")}
#: What doc markup would look like in a terminal: Sphinx roles, doc-builder links, double backquotes.
MARKUP = re.compile(r"``|:(class|func|mod|meth|attr):`|\[`[^`\]]+`\]")
runner = CliRunner()


def _help_of_key(text: str, key: str) -> str:
    """The help text under ``--key`` in a trainer's help, on one line."""
    match = re.search(rf"^  --{key} .*?(?=^  -|^\S|\Z)", text, re.M | re.S)
    assert match, key
    return " ".join(match.group(0).split())


@pytest.mark.parametrize("command", TRAINERS)
def test_trainer_help_lists_every_key_by_dataclass_with_type_and_default(command):
    module, config = TRAINERS[command]
    result = runner.invoke(app, [command, "--help"])
    assert result.exit_code == 0, result.output
    text = result.output
    assert text.startswith(f"usage: persetrain {command} [--config RECIPE.yaml]")
    # one group per dataclass, in TRL's order: script, training, model arguments
    groups = [text.index(f"\n{name}:\n") for name in ("ScriptArguments", config, "ModelConfig")]
    assert groups == sorted(groups)
    for dtype in module.make_parser().dataclass_types:
        for field in dataclasses.fields(dtype):
            assert re.search(rf"^  --{field.name} \S", text, re.M), f"{command} --help lacks {field.name}"
    assert "--learning_rate FLOAT" in text and "--max_steps INT" in text and "--use_peft [BOOL]" in text
    assert "(default: -1)" in _help_of_key(text, "max_steps")
    assert "persetrain's own keys:" in text and "auto_resume" in text.split("persetrain's own keys:")[2]
    assert not MARKUP.search(text), MARKUP.search(text).group(0)


def test_each_trainer_says_which_columns_it_reads():
    dataset_help = {
        command: _help_of_key(runner.invoke(app, [command, "--help"]).output, "dataset_path") for command in TRAINERS
    }
    assert "`completion`" in dataset_help["sft"] and "`chosen`" not in dataset_help["sft"]
    assert (
        "`chosen`" in dataset_help["rm"] and "`gold`" in dataset_help["rm"] and "completion" not in dataset_help["rm"]
    )
    assert "reward functions" in dataset_help["grpo"] and "`chosen`" not in dataset_help["grpo"]


def test_rm_help_shows_its_own_keys_and_grpo_its_command_options():
    text = runner.invoke(app, ["rm", "--help"]).output
    assert "(default: listwise)" in _help_of_key(text, "loss") and "--loss {listwise,bradley_terry}" in text
    text = runner.invoke(app, ["grpo", "--help"]).output
    assert "persetrain grpo options:" in text and "--backend BACKEND" in text and "(default: trl)" in text


def test_help_with_a_recipe_shows_the_recipe_values_as_defaults():
    recipe = REPO / "recipes" / "perse" / "cpu_smollm2_per-mpst-k3.yaml"
    result = runner.invoke(app, ["sft", "--config", str(recipe), "--help"])
    assert result.exit_code == 0, result.output
    assert "(default: 0.001)" in _help_of_key(result.output, "learning_rate")  # the recipe's 1.0e-3, not TRL's 2e-5


def test_every_command_and_option_help_is_plain_text():
    def helps(command, path):
        yield path, command.help or ""
        for param in command.params:
            yield f"{path} {param.name}", getattr(param, "help", None) or ""
        for name, sub in getattr(command, "commands", {}).items():
            yield from helps(sub, f"{path} {name}")

    shown = list(helps(get_command(app), "persetrain"))
    assert len(shown) > 100  # every command and option, not only the top level
    for path, text in shown:
        assert not MARKUP.search(text), (path, text)


def test_version_is_the_installed_package_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output == f"persetrain {version('persetrain')}\n"


@pytest.mark.slow
def test_bash_completion_completes_commands_and_options():
    """The script ``--show-completion`` prints, sourced into a real bash, completes through the console script."""
    bin_dir = Path(sys.executable).parent
    script = (
        "source <(persetrain --show-completion bash)\n"
        'COMP_WORDS=(persetrain evalu); COMP_CWORD=1; _persetrain_completion persetrain; echo "${COMPREPLY[*]}"\n'
        "COMP_WORDS=(persetrain evaluate --max-e); COMP_CWORD=2; _persetrain_completion persetrain; "
        'echo "${COMPREPLY[*]}"\n'
    )
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["evaluate evaluators", "--max-examples"]


@pytest.mark.parametrize("name", sorted(registered()))
def test_evaluators_name_documents_every_option_and_the_records_it_reads(name, tmp_path):
    evaluator = registered()[name]
    result = runner.invoke(app, ["evaluators", name])
    assert result.exit_code == 0, result.output
    text = result.output
    assert "(undocumented)" not in text and not MARKUP.search(text)
    for field in dataclasses.fields(evaluator.Config):
        assert re.search(rf"^  {field.name} = ", text, re.M), field.name
    for kind in evaluator.tasks:
        assert f"reads {kind} records ({get_task(kind).example.__name__})" in text
    # each printed example is two lines that `persetrain evaluate` reads as records of the kind
    examples = re.findall(r'^  example \(.*\), .*\{"task": "(\w+)"\}:\n    (.*)\n    (.*)$', text, re.M)
    assert len(examples) == sum(len(record_examples(kind)) for kind in evaluator.tasks)
    for i, (kind, *lines) in enumerate(examples):
        folder = tmp_path / str(i)
        folder.mkdir()
        (folder / "dataset.json").write_text(json.dumps({"task": kind}))
        (folder / "test.jsonl").write_text("\n".join(lines) + "\n")
        task, records = read_split(folder)
        assert task.name == kind and len(records) == 2


def test_evaluators_lists_all_and_refuses_an_unknown_name_in_one_line():
    listed = runner.invoke(app, ["evaluators"]).output.splitlines()
    assert [line.split()[0] for line in listed] == sorted(registered())
    result = runner.invoke(app, ["evaluators", "verdikt"])
    assert result.exit_code == 2 and result.output.startswith("error: unknown evaluator 'verdikt'")
