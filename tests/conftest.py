"""Fixtures shared by the suite: a tiny random-weight LLaMA with the embedded model's tokenizer.

The tiny model makes engine and trainer logic testable in seconds; every pipeline also has an
end-to-end test on the real embedded model.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from persetrain.models import DEFAULT_MODEL, DTYPE_ENV, load_tokenizer

# `make test` runs the suite in two pytest-xdist workers (`-n 2 --dist loadgroup`): on two cores one process
# leaves most of a core idle while it imports, starts subprocesses or waits on them. A file's tests stay on one
# worker (its module fixtures are built once), and the files that start ranks of their own share one worker, so
# that no two of them run at once: they would meet on torch's default rendezvous port and each wants both cores.
RANK_FILES = {"test_distributed.py", "test_launch.py", "test_multiprocess.py", "test_slurm.py"}

if os.environ.get("PYTEST_XDIST_WORKER"):
    # One compute thread per worker, and per process it starts (the variables are inherited): two workers of two
    # threads each on two cores spin against each other.
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"
    torch.set_num_threads(1)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        name = item.path.name
        item.add_marker(pytest.mark.xdist_group("ranks" if name in RANK_FILES else name))


@pytest.fixture
def fp32_compute(monkeypatch):
    """The engine and the trainers compute in fp32 on every device (``PERSETRAIN_DTYPE``), for tests that hold
    numbers written on a CPU or exact equalities that bf16's rounding would break (``tests/numerics.py``)."""
    monkeypatch.setenv(DTYPE_ENV, "float32")


@pytest.fixture(scope="session")
def embedded_tokenizer():
    return load_tokenizer(DEFAULT_MODEL)


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory, embedded_tokenizer):
    """A 2-layer LLaMA (hidden 64) saved in HF layout, loadable by any model spec consumer."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(embedded_tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        pad_token_id=embedded_tokenizer.pad_token_id,
        eos_token_id=embedded_tokenizer.eos_token_id,
        bos_token_id=embedded_tokenizer.bos_token_id,
    )
    model = LlamaForCausalLM(config)
    # Random weights give near-uniform distributions; a larger init spread makes the test
    # probabilities far from uniform so that a wrong position or token would show.
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.2)
    path = tmp_path_factory.mktemp("tiny-llama")
    model.save_pretrained(path)
    embedded_tokenizer.save_pretrained(path)
    return path


@pytest.fixture
def moved_judge(tiny_llama_dir, tmp_path) -> Path:
    """The tiny model with every weight nudged: a 'judge' trained whole from it, with its tokenizer."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    torch.manual_seed(1)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    judge = tmp_path / "judge"
    model.save_pretrained(judge)
    for path in tiny_llama_dir.iterdir():
        if path.name.startswith(("tokenizer", "special_tokens", "chat_template")):
            (judge / path.name).write_bytes(path.read_bytes())
    return judge


@pytest.fixture(scope="session")
def prepared_root(tmp_path_factory):
    """A directory laid out as the README's first commands leave a checkout: SYNTHETIC raw files in
    ``data/raw`` and the PerSE datasets in ``data/perse``, written by ``persetrain prepare`` itself
    (``--no-llm``: raw synopses, so no model runs). Recipes' relative paths resolve against it."""
    from typer.testing import CliRunner

    from persetrain.cli import app

    root = tmp_path_factory.mktemp("prepared")
    for args in (
        ["prepare", "sample", "--out", str(root / "data" / "raw")],
        [
            "prepare",
            "perse",
            "--raw",
            str(root / "data" / "raw"),
            "--out",
            str(root / "data" / "perse"),
            "--no-llm",
            "--no-probe",
        ],
    ):
        result = CliRunner().invoke(app, ["--quiet", *args])
        assert result.exit_code == 0, result.output
    return root


@pytest.fixture(scope="session")
def parl_sample(tmp_path_factory):
    """The SYNTHETIC PARL users' raw files (``write_parl_sample`` with its defaults). Read-only: copy to edit."""
    from data_prep.synthetic.parl import write_parl_sample

    return write_parl_sample(tmp_path_factory.mktemp("parl-raw"))


@pytest.fixture(scope="session")
def parl_prepared(parl_sample, tmp_path_factory):
    """``persetrain prepare parl`` of ``parl_sample``, every task (``parl_amazon``, ``parl_reddit``, ``parl_news``)."""
    from data_prep.parl.prepare import prepare_parl

    out = tmp_path_factory.mktemp("parl")
    prepare_parl(parl_sample.root, out)
    return out
