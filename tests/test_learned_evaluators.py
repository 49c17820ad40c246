"""Trained judges in use: the reward-model scorer and the ``rm`` / ``verifier`` evaluators, the person probes
(blind, swap) and the odd-one-out baseline.

The reward model is a tiny random-weight ``LlamaForSequenceClassification`` with the embedded tokenizer;
its batched scores are checked against the plain transformers forward of each text alone.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from numerics import close
from typer.testing import CliRunner

from persetrain.cli import app
from persetrain.data import read_split
from persetrain.engine import load_engine
from persetrain.evaluators.base import JudgeContext
from persetrain.evaluators.learned import items_of
from persetrain.evaluators.odd_one_out import OddOneOut
from persetrain.evaluators.rm import RewardModelJudge, RMConfig
from persetrain.evaluators.verifier import Verifier
from persetrain.io import InputError
from persetrain.metrics.odd_one_out import oddness
from persetrain.person import NOT_STATED, blind_examples, derangement, has_person, swapped_examples
from persetrain.prompts.mcq_letter import letter_request
from persetrain.prompts.preference import VERIFIER, VERIFIER_BLIND, rm_context
from persetrain.reward_model.scorer import RewardModelScorer, check_reward_model
from persetrain.schema import McqExample, ProfileReview, ScalarExample

PREFEVAL = Path(__file__).resolve().parents[1] / "data" / "prefeval" / "dev"
MODEL = "embedded:smollm2-135m-instruct"


def _classifier(path: Path, tokenizer, num_labels: int = 1) -> Path:
    from transformers import LlamaConfig, LlamaForSequenceClassification

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        num_labels=num_labels,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForSequenceClassification(config)
    with torch.no_grad():  # a wide init spread, so that a token read at the wrong position would show
        for p in model.parameters():
            p.normal_(0, 0.2)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_rm_dir(tmp_path_factory, embedded_tokenizer):
    return _classifier(tmp_path_factory.mktemp("tiny-rm"), embedded_tokenizer)


@pytest.fixture(scope="session")
def scorer(tiny_rm_dir):
    return RewardModelScorer(str(tiny_rm_dir), device="cpu", batch_tokens=96)


def mcq(ex_id: str, preference: str, options: list[str], gold: int = 0, question: str = "What should I do?"):
    return McqExample(id=ex_id, preference=preference, question=question, options=options, gold=gold)


CONTEXTS = [
    rm_context("I am vegan.", "What should I cook tonight?"),
    rm_context(None, "Where should I travel?"),
    rm_context("I dislike crowds and prefer quiet places far from the city.", "Plan a weekend."),
]
CANDIDATES = ["A lentil curry.", "Paris in August, with every museum and the busiest markets on the way.", "Hiking."]


# --- the scorer ------------------------------------------------------------------------------------


def test_batched_scores_equal_the_plain_forward_of_each_text(scorer, tiny_rm_dir):
    """Length-sorted, right-padded batches (forced small here), and one pass per text, == each text alone through
    transformers."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(tiny_rm_dir, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_rm_dir)
    contexts, candidates = CONTEXTS * 3, CANDIDATES[1:] + CANDIDATES[:1] + CANDIDATES * 2
    batched = scorer.score(contexts, candidates)
    with torch.no_grad():
        alone = [
            model(**tokenizer(c + x + tokenizer.eos_token, return_tensors="pt")).logits[0, 0].item()
            for c, x in zip(contexts, candidates, strict=True)
        ]
    assert batched == pytest.approx(alone, abs=1e-5)
    assert len(set(round(s, 4) for s in batched)) > 3  # the texts really score differently
    assert scorer.score(contexts[:1], candidates[:1]) == pytest.approx(batched[:1], abs=1e-5)
    one_by_one = RewardModelScorer(str(tiny_rm_dir), device="cpu", batch_tokens=1)  # a chunk and a pass per text
    assert one_by_one.score(contexts, candidates) == pytest.approx(batched, abs=1e-5)


def test_candidates_sharing_a_context_score_as_each_text_alone(scorer, tiny_rm_dir):
    """A decoder computes a context once for all its candidates (the listwise trainer's forward): each score
    equals the text's plain forward, whatever the group's size, batch and order; a candidate that does not
    fit whole leaves the group and loses the start of its own context only."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    model = AutoModelForSequenceClassification.from_pretrained(tiny_rm_dir, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(tiny_rm_dir)
    options = [*CANDIDATES, "Stay home and read.", "A quiet cabin by a lake, far from any road."]
    contexts = [CONTEXTS[0]] * 4 + [CONTEXTS[2]] * 3 + [CONTEXTS[1]]
    candidates = [options[i % len(options)] for i in range(len(contexts))]
    order = [5, 0, 7, 2, 6, 1, 4, 3]  # the groups' members interleaved
    shared = scorer.score([contexts[i] for i in order], [candidates[i] for i in order])
    with torch.no_grad():
        alone = [
            model(**tokenizer(contexts[i] + candidates[i] + tokenizer.eos_token, return_tensors="pt")).logits.item()
            for i in order
        ]
    assert shared == pytest.approx(alone, abs=1e-5)
    long = "a long answer " * 12
    old, scorer.max_length = scorer.max_length, len(scorer.encode(CONTEXTS[0], CANDIDATES[0])[0]) + 2
    try:
        scored = scorer.score_detailed([CONTEXTS[0]] * 2, [CANDIDATES[0], long])
        ids, cut = scorer.encode(CONTEXTS[0], long)
    finally:
        scorer.max_length = old
    assert [s.truncated for s in scored] == [False, True] and cut
    with torch.no_grad():
        assert scored[1].score == pytest.approx(model(input_ids=torch.tensor([ids])).logits.item(), abs=1e-5)
    assert scored[0].score == pytest.approx(alone[order.index(0)], abs=1e-5)


def test_an_encoder_reward_model_scores_at_cls_and_keeps_its_trailing_sep(tmp_path):
    """A BERT-style backbone (the packaged MiniLM's tokenizer, no EOS): padding never changes a score, and a cut
    text still ends with the candidate and [SEP]."""
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    from persetrain.metrics.text_similarity import minilm_dir

    tokenizer = AutoTokenizer.from_pretrained(minilm_dir())
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=128,
        num_labels=1,
    )
    BertForSequenceClassification(config).save_pretrained(tmp_path / "bert-rm")
    tokenizer.save_pretrained(tmp_path / "bert-rm")
    encoder = RewardModelScorer(str(tmp_path / "bert-rm"), device="cpu", batch_tokens=64)
    batched = encoder.score(CONTEXTS, CANDIDATES)
    assert batched == pytest.approx(
        [encoder.score([c], [x])[0] for c, x in zip(CONTEXTS, CANDIDATES, strict=True)], abs=1e-5
    )
    encoder.max_length = 12
    ids, cut = encoder.encode(CONTEXTS[2], "hiking in the hills")
    assert cut and len(ids) == 12 and tokenizer.decode(ids).endswith("answer : [SEP] hiking in the hills [SEP]")
    assert ids[0] == tokenizer.cls_token_id
    pair = tokenizer(CONTEXTS[0], CANDIDATES[0], return_tensors="pt")  # the form training reads (reward_model.inputs)
    model = BertForSequenceClassification.from_pretrained(tmp_path / "bert-rm").eval()
    with torch.no_grad():
        assert batched[0] == pytest.approx(model(**pair).logits.item(), abs=1e-5)


def test_a_long_text_loses_the_start_of_its_context_and_keeps_the_candidate(scorer, embedded_tokenizer):
    context = rm_context("first-words " + "filler " * 400 + "last-words", "Which dish?")
    candidate = "A mild vegetable soup with bread."
    old, scorer.max_length = scorer.max_length, 40
    try:
        ids, cut = scorer.encode(context, candidate)
        short_ids, short_cut = scorer.encode(rm_context("I like soup.", "Which dish?"), candidate)
        [scored] = scorer.score_detailed([context], [candidate])
    finally:
        scorer.max_length = old
    text = embedded_tokenizer.decode(ids)
    assert cut and len(ids) == 40 and scored.truncated and scored.tokens == 40
    assert text.endswith(candidate + embedded_tokenizer.eos_token)
    assert "Question: Which dish?\nAnswer:" in text and "first-words" not in text
    assert not short_cut and len(short_ids) < 40


def test_a_checkpoint_of_the_wrong_kind_is_refused_before_it_loads(
    tiny_llama_dir, tiny_rm_dir, tmp_path, embedded_tokenizer
):
    with pytest.raises(InputError, match=r"config\.json: field 'architectures': \['LlamaForCausalLM'\]"):
        check_reward_model(str(tiny_llama_dir))
    with pytest.raises(InputError, match="field 'num_labels'"):
        check_reward_model(str(_classifier(tmp_path / "three", embedded_tokenizer, num_labels=3)))
    with pytest.raises(InputError, match="field 'architectures'.*causal language model"):
        RewardModelJudge().check_model(MODEL)
    with pytest.raises(InputError, match=r"config\.json: field 'architectures'.*rm evaluator"):
        Verifier().check_model(str(tiny_rm_dir))
    Verifier().check_model(str(tiny_llama_dir))  # a causal LM is what a verifier reads


@pytest.mark.parametrize(("evaluator", "model"), [("rm", "causal"), ("verifier", "rm")])
def test_the_command_line_reports_a_wrong_kind_in_one_line(evaluator, model, tiny_llama_dir, tiny_rm_dir, tmp_path):
    path = {"causal": tiny_llama_dir, "rm": tiny_rm_dir}[model]
    result = CliRunner().invoke(
        app,
        [
            "-q",
            "evaluate",
            "--evaluator",
            evaluator,
            "--model",
            str(path),
            "--data",
            str(PREFEVAL),
            "--out",
            str(tmp_path / "run"),
            "--max-examples",
            "2",
        ],
    )
    assert result.exit_code == 2
    assert result.output.startswith("error: ") and result.output.count("\n") == 1 and "Traceback" not in result.output
    assert f"{path}/config.json" in result.output and "architectures" in result.output
    assert not (tmp_path / "run").exists()  # nothing written


# --- the rm evaluator ----------------------------------------------------------------------------


def _context(tmp_path: Path, model: str | None = None) -> JudgeContext:
    return JudgeContext(data=tmp_path, split="test", system="judge", out=tmp_path, model=model)


def test_rm_picks_the_option_with_the_highest_reward(scorer, tiny_rm_dir, tmp_path):
    examples = [mcq(f"q{i}", "I am vegan.", CANDIDATES + [f"Option {i}"], gold=i % 4) for i in range(3)]
    judgments = RewardModelJudge(RMConfig(batch_tokens=64)).judge(examples, None, _context(tmp_path, str(tiny_rm_dir)))
    for ex, j in zip(examples, judgments, strict=True):
        direct = scorer.score([rm_context(ex.preference, ex.question)] * len(ex.options), ex.options)
        assert j.details["raw_scores"] == close(direct, abs=1e-5)
        assert j.choice == str(max(range(4), key=direct.__getitem__))
        assert sum(j.details["scores"]) == pytest.approx(10)  # a softmax over the options, on 0..10
        assert j.cost.calls == 4 and j.cost.prompt_tokens > 0


def test_rm_without_the_person_reads_the_blind_context(scorer, tiny_rm_dir, tmp_path):
    examples = [mcq("q0", "I am vegan.", CANDIDATES), mcq("q1", "I hate travel.", CANDIDATES[::-1])]
    blind = blind_examples(examples)
    assert not any(has_person(ex) for ex in blind) and all(has_person(ex) for ex in examples)
    assert all(it.person is None for it in items_of(blind, RMConfig()))
    judged = RewardModelJudge().judge(blind, None, _context(tmp_path, str(tiny_rm_dir)))
    for ex, j in zip(examples, judged, strict=True):
        assert j.details["raw_scores"] == close(scorer.score([rm_context(None, ex.question)] * 3, ex.options), abs=1e-5)
        assert j.details["raw_scores"] != pytest.approx(
            scorer.score([rm_context(ex.preference, ex.question)] * 3, ex.options), abs=1e-5
        )


def test_rm_on_a_scalar_task_calibrates_onto_the_dataset_scale(tiny_rm_dir, tmp_path):
    profile = [ProfileReview(plot_id="p0", plot="A quiet drama.", review="Slow.", score=2)]
    examples = [
        ScalarExample(
            id=f"s{i}",
            reviewer_id="r",
            profile=profile,
            query_plot_id=f"q{i}",
            query_plot=f"Plot number {i} " + "with twists " * i,
            score=1 + i % 5,
            score_max=5,
        )
        for i in range(8)
    ]
    raw = RewardModelJudge(RMConfig(calibration="none")).judge(examples, None, _context(tmp_path, str(tiny_rm_dir)))
    judge = RewardModelJudge()
    calibrated = judge.judge(examples, None, _context(tmp_path, str(tiny_rm_dir)))
    assert [j.details["raw_score"] for j in calibrated] == [j.score for j in raw]
    assert all(1 <= j.score <= 5 for j in calibrated)
    from persetrain.tasks import get_task

    assert judge.metrics(get_task("scalar"), examples, calibrated)["calibration"]["method"] == "quantile"


def test_rm_on_pairs_and_reference_outputs_and_profile_baselines_without_a_profile(scorer, tiny_rm_dir, tmp_path):
    from persetrain.evaluators.baselines import reviewer_average, reviewer_majority
    from persetrain.schema import PairwiseExample, PairwiseProfileItem, ReferenceExample

    seen = PairwiseProfileItem(
        premise="A heist.", plot_a="They win.", plot_b="They lose.", aspect="Ending", preferred="B"
    )
    pairs = [
        PairwiseExample(
            id=f"d{i}",
            annotator_id="u",
            aspect="Ending",
            profile=[seen],
            premise="A voyage.",
            plot_a=CANDIDATES[i],
            plot_b=CANDIDATES[i + 1],
            preferred="A",
        )
        for i in range(2)
    ]
    record = ReferenceExample(
        id="r",
        user_id="u",
        input="Review the cafe.",
        profile=["old text"] * 5,
        outputs={"gold": "great coffee.", "non": "A cafe."},
    )
    judge = RewardModelJudge()
    for j in judge.judge(pairs, None, _context(tmp_path, str(tiny_rm_dir))):
        a, b = j.details["raw_scores"]
        assert j.choice == ("A" if a > b else "B") and j.probs["A"] == pytest.approx(1 / (1 + math.exp(b - a)))
    outputs = judge.judge([record], None, _context(tmp_path, str(tiny_rm_dir)))
    person = items_of([record], RMConfig())[0].person
    assert person.count("Example") == 3  # the latest profile_items texts
    assert [j.target for j in outputs] == ["gold", "non"]
    assert [j.score for j in outputs] == close(
        scorer.score([rm_context(person, record.input, "User profile")] * 2, list(record.outputs.values())), abs=1e-5
    )
    scalar = ScalarExample(
        id="s",
        reviewer_id="r",
        query_plot_id="q",
        query_plot="x",
        score=3,
        profile=[ProfileReview(plot_id="p", plot="y", review="z", score=4)],
    )
    assert not reviewer_average(blind_examples([scalar]))[0].parsed
    assert not reviewer_majority(blind_examples(pairs))[0].parsed


def test_rm_judges_a_prefeval_sample_through_the_command_line(tiny_rm_dir, tmp_path):
    out = tmp_path / "run"
    result = CliRunner().invoke(
        app,
        [
            "-q",
            "evaluate",
            "--evaluator",
            "rm",
            "--model",
            str(tiny_rm_dir),
            "--data",
            str(PREFEVAL),
            "--out",
            str(out),
            "--max-examples",
            "8",
        ],
    )
    assert result.exit_code == 0, result.output
    metrics = json.loads((out / "metrics.json").read_text())
    [system] = metrics["systems"].values()
    assert metrics["n_examples"] == 8 and system["n"] == 8 and system["cost"]["calls"] == 32
    [written] = (out / "judgments").glob("*.jsonl")  # inside the run directory though the name is a path
    judgments = [json.loads(line) for line in written.read_text().splitlines()]
    assert len(judgments) == 8 and all(len(j["details"]["raw_scores"]) == 4 for j in judgments)


# --- the verifier ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_verifier_reads_p_yes_of_the_embedded_model(tmp_path):
    """The verifier asks exactly the VERIFIER question (VERIFIER_BLIND without the person): asked again by hand,
    every request is a hit in the engine's cache, which keys on the whole request."""
    _, examples = read_split(PREFEVAL)
    examples = examples[:2]
    engine = load_engine(MODEL, cache_path=tmp_path / "cache.sqlite")
    try:
        judgments = Verifier().judge(examples, engine, _context(tmp_path))
        blind = Verifier().judge(blind_examples(examples), engine, _context(tmp_path))
        hits = engine.cache_hits
        direct = [
            engine.choice_probs(
                [
                    VERIFIER.render(
                        person_label="User preference", person=ex.preference, request=ex.question, candidate=o
                    )
                    for o in ex.options
                ],
                ["yes", "Yes", "no", "No"],
            )
            for ex in examples
        ]
        direct_blind = [
            engine.choice_probs(
                [VERIFIER_BLIND.render(request=ex.question, candidate=o) for o in ex.options],
                ["yes", "Yes", "no", "No"],
            )
            for ex in examples
        ]
        assert engine.cache_hits - hits == 16
    finally:
        engine.close()
    for j, b, d, db in zip(judgments, blind, direct, direct_blind, strict=True):
        assert j.details["raw_scores"] == [p.probs["yes"] + p.probs["Yes"] for p in d]
        assert b.details["raw_scores"] == [p.probs["yes"] + p.probs["Yes"] for p in db] != j.details["raw_scores"]
        assert j.details["scores"] == pytest.approx([10 * p for p in j.details["raw_scores"]])
        assert min(j.details["raw_scores"]) > 0 and max(j.details["raw_scores"]) < 1 and j.cost.calls == 4


# --- the person probes ---------------------------------------------------------------------------------


def test_swap_is_a_seeded_derangement_that_avoids_the_same_preference():
    prefs = ["vegan", "vegan", "vegan", "no flights", "quiet", "quiet"]
    examples = [mcq(f"q{i}", p, ["a", "b"]) for i, p in enumerate(prefs)]
    swapped = swapped_examples(examples, seed=3)
    assert [s.preference for s in swapped] != prefs
    assert all(s.preference != ex.preference for s, ex in zip(swapped, examples, strict=True))
    assert sorted(s.preference for s in swapped) == sorted(prefs)  # everyone's person is used once
    assert [s.model_dump(exclude={"preference"}) for s in swapped] == [
        e.model_dump(exclude={"preference"}) for e in examples
    ]
    assert swapped == swapped_examples(examples, seed=3) and swapped != swapped_examples(examples, seed=4)
    same = derangement(["x"] * 5, seed=0)  # nothing different to hand out: still nobody keeps their own
    assert sorted(same) == list(range(5)) and all(d != i for i, d in enumerate(same))
    with pytest.raises(ValueError, match="at least two"):
        swapped_examples(examples[:1])


def test_a_removed_preference_is_shown_as_not_stated():
    [blind] = blind_examples([mcq("q", "I am vegan.", ["a", "b"])])
    shown = letter_request(blind.preference, "q", ["a", "b"]).messages[-1].content
    assert blind.preference == "" and NOT_STATED in shown


# --- odd-one-out -----------------------------------------------------------------------------------------


def test_odd_one_out_picks_the_option_unlike_the_others(tmp_path):
    options = [
        "Visit the famous steakhouse downtown for a great steak dinner.",
        "Try the famous steakhouse near the river for a steak dinner.",
        "A quiet vegan bistro with seasonal vegetables and lentils.",
        "Book the famous steakhouse for a steak dinner with wine.",
    ]
    odd = oddness(options)
    assert min(odd) >= 0 and max(odd) <= 1 and odd.index(max(odd)) == 2
    [j] = OddOneOut().judge([mcq("q", "I am vegan.", options, gold=2)], None, _context(tmp_path))
    [blind] = OddOneOut().judge(blind_examples([mcq("q", "I am vegan.", options, gold=2)]), None, _context(tmp_path))
    assert j.choice == "2" and j.details == blind.details  # it never reads the preference


def test_meta_eval_reports_accuracy_blind_and_swapped(tiny_rm_dir, tmp_path):
    out = tmp_path / "meta"
    result = CliRunner().invoke(
        app,
        [
            "-q",
            "meta-eval",
            "--data",
            str(PREFEVAL),
            "--out",
            str(out),
            "--max-examples",
            "6",
            "--system",
            f"rm=rm:{tiny_rm_dir}",
            "--system",
            "odd-one-out",
            "--probe",
            "blind",
            "--probe",
            "swap",
        ],
    )
    assert result.exit_code == 0, result.output
    systems = json.loads((out / "metrics.json").read_text())["systems"]
    for probe in ("blind", "swap"):
        assert (out / "judgments" / probe / "rm.jsonl").is_file()
        assert 0 <= systems["rm"][probe]["accuracy"] <= 1
        odd = systems["odd-one-out"]
        assert odd[probe]["accuracy"] == odd["agreement"]["accuracy"] and odd[probe]["accuracy_change"] == 0
    blind_rm = [json.loads(x) for x in (out / "judgments" / "blind" / "rm.jsonl").read_text().splitlines()]
    assert all("person-blind" in j["explanation"] for j in blind_rm)
    assert "blind: accuracy" in (out / "report.md").read_text()


# --- a trained judge as PREF's and AuPEL's scorer ------------------------------------------------------


def test_pref_stage3_and_aupel_comparisons_take_a_trained_scorer(scorer, tiny_rm_dir, tiny_llama_dir, tmp_path):
    from persetrain.evaluators.aupel import AuPEL, AuPELConfig
    from persetrain.evaluators.pref import PREF, PREFConfig
    from persetrain.evaluators.rm import sigmoid
    from persetrain.evaluators.scorers import check_scorer
    from persetrain.prompts.preference import texts_person
    from persetrain.schema import ReferenceExample

    examples = [mcq("q0", "I am vegan.", CANDIDATES), mcq("q1", "I avoid crowds.", CANDIDATES[::-1], gold=2)]
    engine = load_engine(str(tiny_llama_dir))
    try:
        pref = PREF(PREFConfig(variant="base", scorer=f"rm:{tiny_rm_dir}")).judge(examples, engine, _context(tmp_path))
    finally:
        engine.close()
    rm = RewardModelJudge().judge(examples, None, _context(tmp_path, str(tiny_rm_dir)))
    for p, r in zip(pref, rm, strict=True):
        assert p.details["scores"] == close(r.details["scores"], abs=1e-4) and p.choice == r.choice

    record = ReferenceExample(
        id="r1",
        user_id="u",
        input="Review the cafe.",
        profile=["i loved the bakery."],
        outputs={"gold": "great coffee, lovely pastries.", "non": "A cafe."},
    )
    config = AuPELConfig(scorer=f"rm:{tiny_rm_dir}", dimensions=("personalization", "quality"), n_boot=20, draws=20)
    games = AuPEL(config).judge([record], None, _context(tmp_path))
    by_dim = {g.details["dimension"]: g for g in games}
    person = texts_person(record.profile, config.sample_words)
    personal = scorer.score([rm_context(person, record.input, "User profile")] * 2, list(record.outputs.values()))
    quality = scorer.score([rm_context(None, "")] * 2, list(record.outputs.values()))
    assert by_dim["personalization"].details["p_first"] == close([sigmoid(personal[0] - personal[1])] * 2, abs=1e-6)
    assert by_dim["quality"].details["p_first"] == close([sigmoid(quality[0] - quality[1])] * 2, abs=1e-6)
    with pytest.raises(InputError, match="architectures"):
        check_scorer(f"verifier:{tiny_rm_dir}")
    with pytest.raises(ValueError, match="use rm:PATH"):
        check_scorer(str(tiny_rm_dir))


@pytest.mark.slow
def test_expert_matching_takes_a_trained_scorer(scorer, tiny_rm_dir, tmp_path):
    from persetrain.evaluators.expert import ExPerT, ExPerTConfig
    from persetrain.evaluators.expert_pipeline import ExPerTJudge, _Step, aspect_text
    from persetrain.evaluators.rm import sigmoid
    from persetrain.evaluators.scorers import TrainedScorer
    from persetrain.prompts.expert import match_choices, match_request

    ref = [
        {"title": "coffee", "description": "the coffee is great", "evidence": ["great coffee."]},
        {"title": "staff", "description": "the staff are slow", "evidence": ["slow staff."]},
    ]
    out = [
        {"title": "pastry", "description": "fresh pastries", "evidence": ["lovely pastries."]},
        {"title": "service", "description": "waiting a long time", "evidence": ["we waited ages."]},
        {"title": "price", "description": "cheap", "evidence": ["low prices."]},
    ]
    inputs = ["Review the cafe."]

    def steps() -> list[_Step]:
        made = []
        for side, own, other in (("recall", ref, out), ("precision", out, ref)):
            for i, aspect in enumerate(own):
                made.append(_Step(0, side, i, match_request(aspect, other), match_choices(len(other))))
                made[-1].aspect, made[-1].candidates = aspect, other
        return made

    trained = TrainedScorer(f"rm:{tiny_rm_dir}")
    for threshold in (0.0, 0.5, 1.01):
        found = steps()
        config = ExPerTConfig(scorer=f"rm:{tiny_rm_dir}", match_threshold=threshold)
        ExPerTJudge(None, config, "expert", trained, _context(tmp_path)).match_with_scorer(found, inputs)
        for step in found:
            contexts = [rm_context(aspect_text(step.aspect), inputs[0], "Rule")] * len(step.candidates)
            direct = [sigmoid(r) for r in scorer.score(contexts, [aspect_text(c) for c in step.candidates])]
            assert list(step.probs.values()) == close(direct, abs=1e-5)
            assert list(step.probs) == step.choices[:-1]  # the candidates' numbers; "none" is no candidate
            best = max(step.probs, key=step.probs.get)
            assert step.answer == (best if step.probs[best] >= threshold else "none")
            assert step.cost.calls == len(step.candidates)
        if threshold == 0.0:
            assert all(s.answer != "none" for s in found)
        if threshold == 1.01:
            assert all(s.answer == "none" for s in found)
    with pytest.raises(InputError, match="architectures"):
        ExPerT(ExPerTConfig(scorer=f"verifier:{tiny_rm_dir}")).check_model(MODEL)
