"""SYNTHETIC PARL data: users with planted, checkable writing signatures, in the three task layouts.

Nothing here is real: products, subreddits, towns, articles and every text are generated from
templates by a seeded random generator. The point is a data set where a rubric set that separates a
user's own text from competitors' is *known to exist*: every user writes every text (history and
target) with the same few planted signatures, each of which one yes/no rule can check, and the
negatives for the target are written without them (or with only one of them).

Signatures (``TRAITS``; each user has ``TRAITS_PER_USER`` of them, drawn per user):

* reviews and posts: ``lowercase`` (no capital letters at all), ``signoff`` (a fixed last line,
  e.g. ``cheers, kalo``), ``short_sentences`` (every sentence at most 10 words, an opener included;
  the default style's content sentences have 14 or more), ``question`` (the user's favourite
  rhetorical question, e.g. ``what more could you ask for?``), ``topic_word`` (a recurring topic
  mentioned in every text, e.g. ``my cat``), ``exclaim`` (every sentence ends with ``!``, the
  question with ``?!``), ``opener`` (fixed first words, e.g. ``Okay so,``);
* headlines: ``lowercase``, ``question`` (the headline is a question ending in ``?``), ``colon``
  (``Place: what happened``), ``short`` (at most 6 words; default 9+), ``pet_word`` (a fixed word such
  as ``Finally`` opens the headline), ``exclaim`` (ends in ``!``), ``number`` (contains a digit: the
  article's count).

Negatives (``baselines.jsonl``, the layout ``persetrain generate-baselines`` writes): ``synthetic-non``
is the target's content in the default style (no signature), ``synthetic-rag`` has one of the user's
signatures (the first drawn), as a generator that saw some history would. They stand in for the Non
and RAG generators when no LLM should run (tests, the CPU demo); real negatives come from
``persetrain generate-baselines``.

Layouts (see ``data_prep/README.md``): Amazon reviews in the 2023 dump's layout (``reviews.jsonl``
+ ``meta.jsonl``), Reddit topic writing in the LongLaMP layout (``topic_writing.jsonl``: ``input``
summary, ``output`` content, ``profile`` oldest first), news headlines in the LaMP-4 layout
(``questions.json`` + ``outputs.json``). ``ground_truth.json`` lists every user's traits.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from persetrain.io import write_json, write_jsonl

TRAITS: dict[str, tuple[str, ...]] = {
    "prose": ("lowercase", "signoff", "short_sentences", "question", "topic_word", "exclaim", "opener"),
    "headline": ("lowercase", "question", "colon", "short", "pet_word", "exclaim", "number"),
}
TRAITS_PER_USER = 3

_SYLLABLES = ("ka", "lo", "mi", "ren", "ta", "vel", "or", "sa", "di", "bren", "mar", "tho", "li", "ne", "zo", "ru")
# The signatures' word lists: public because data_prep.parl's checkers and edits must read the same words.
SIGNOFFS = ("cheers, {name}", "- {name} out", "that's all from {name}", "peace, {name}", "over and out, {name}")
QUESTIONS = (
    "what more could you ask for?",
    "who even needs more?",
    "isn't that the whole point?",
    "why settle for less?",
    "what's not to like?",
)
TOPICS = ("my cat", "my morning coffee", "the garden", "my long commute", "my grandkids", "the camper van")
OPENERS = ("Okay so,", "Quick thoughts:", "Well, friends,", "Real talk:", "Alright then,")
PET_WORDS = ("Finally", "Wow", "Breaking", "Again", "Big")

# Amazon-like products: (noun, category, two features).
_PRODUCTS = (
    ("kettle", "Kitchen", "boils fast", "has a long cord"),
    ("desk lamp", "Home", "is bright", "folds flat"),
    ("backpack", "Travel", "holds a laptop", "has many pockets"),
    ("water bottle", "Sports", "keeps drinks cold", "does not leak"),
    ("blender", "Kitchen", "crushes ice", "is easy to clean"),
    ("pillow", "Home", "stays cool", "is firm"),
    ("headphones", "Electronics", "block noise", "charge quickly"),
    ("rain jacket", "Clothing", "keeps the rain out", "packs small"),
    ("frying pan", "Kitchen", "heats evenly", "is nonstick"),
    ("notebook", "Office", "lies flat", "has thick paper"),
    ("phone stand", "Electronics", "holds any phone", "feels solid"),
    ("yoga mat", "Sports", "grips well", "rolls up tight"),
)
_ADJECTIVES = ("Classic", "Compact", "Deluxe", "Everyday", "Pro", "Ultra", "Simple", "Modern")
# Reddit-like posts: (subreddit topic, a question asked, a detail).
_POSTS = (
    ("sourdough baking", "why my loaf stays flat", "I feed the starter twice a day"),
    ("learning guitar", "how to practice chords faster", "I practice after work for an hour"),
    ("running a first marathon", "how to pace the last miles", "my long runs are at ten miles now"),
    ("moving to a new city", "how to meet people", "I work from home most days"),
    ("fixing an old bike", "which chain to buy", "the gears slip on hills"),
    ("growing tomatoes", "why the leaves turn yellow", "I water them every morning"),
    ("saving for a trip", "how to budget for food", "the trip is in six months"),
    ("painting a bedroom", "which roller to use", "the walls are old plaster"),
    ("adopting a dog", "how to crate train", "the dog is two years old"),
    ("learning to code", "which language to start with", "I have weekends free"),
)
# News: (event, subject, a count).
_EVENTS = (
    ("council approves", "new bike lanes", 12),
    ("residents protest", "plan to close the library", 300),
    ("school opens", "solar-powered gym", 2),
    ("storm damages", "harbour boats", 40),
    ("farmers report", "record apple harvest", 5),
    ("museum unveils", "restored train engine", 1),
    ("hospital adds", "night clinic", 3),
    ("market returns", "after two-year break", 60),
    ("team wins", "regional chess title", 4),
    ("bridge closes", "for urgent repairs", 8),
)


def _name(rng: random.Random) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(2))


@dataclass(frozen=True)
class User:
    id: str
    traits: tuple[str, ...]
    signoff: str
    question: str
    topic: str
    opener: str
    pet_word: str


def _user(rng: random.Random, task: str, index: int) -> User:
    kind = "headline" if task == "news" else "prose"
    name = _name(rng)
    return User(
        id=f"{task}-user-{index:03d}",
        traits=tuple(rng.sample(TRAITS[kind], TRAITS_PER_USER)),
        signoff=rng.choice(SIGNOFFS).format(name=name),
        question=rng.choice(QUESTIONS),
        topic=rng.choice(TOPICS),
        opener=rng.choice(OPENERS),
        pet_word=rng.choice(PET_WORDS),
    )


# ------------------------------------------------------------------------------- prose styling
def _prose(long: list[str], short: list[str], user: User, traits: tuple[str, ...]) -> str:
    """Join content sentences (long or short versions) and apply the given signatures."""
    sentences = list(short if "short_sentences" in traits else long)
    if "topic_word" in traits:
        sentences.insert(
            1,
            f"As always, {user.topic} plays a part"
            if "short_sentences" in traits
            else f"As always, {user.topic} plays a part in this, since it shapes most of my days",
        )
    end = "!" if "exclaim" in traits else "."
    text = " ".join(s + end for s in sentences)
    if "question" in traits:  # with ``exclaim`` it ends "?!": every sentence still ends with "!"
        text += " " + user.question.capitalize() + ("!" if "exclaim" in traits else "")
    if "opener" in traits:
        text = f"{user.opener} {text}"
    if "signoff" in traits:
        text += "\n" + user.signoff
    return text.lower() if "lowercase" in traits else text


def _review(user: User, product: tuple, rating: int, traits: tuple[str, ...]) -> tuple[str, str]:
    noun, _, f1, f2 = product
    verdict = {5: "I love it", 4: "I like it a lot", 3: "It is okay", 2: "I am a bit disappointed", 1: "I regret it"}
    long = [
        f"This {noun} {f1}, which is exactly what I was hoping for when I ordered it last month",
        f"It also {f2}, although I would still have liked a slightly lower price for the quality",
        f"{verdict[rating]} after using it every day for a few weeks in a row",
    ]
    short = [f"This {noun} {f1}", f"It also {f2}", f"{verdict[rating]}"]
    title = f"{verdict[rating]} this {noun}"
    return _prose(long, short, user, traits), (title.lower() if "lowercase" in traits else title)


def _post(user: User, post: tuple, traits: tuple[str, ...]) -> str:
    topic, asked, detail = post
    long = [
        f"I have been getting into {topic} lately and I keep running into the same problem every week",
        f"The context is that {detail}, so my routine is fairly steady by now",
        f"Does anyone here know {asked}, because the guides I found did not really help",
    ]
    short = [f"I started {topic}", f"Some context: {detail}", f"I need to know {asked}"]
    return _prose(long, short, user, traits)


def _headline(user: User, event: tuple, place: str, traits: tuple[str, ...]) -> str:
    action, subject, count = event
    if "short" in traits:
        words = f"{place} {action.split()[1]} {subject.split()[-1]}"
    else:
        words = f"{place} {action} {subject} after long local debate this week"
    if "number" in traits:
        words += f" ({count})"
    if "colon" in traits:
        first, rest = words.split(" ", 1)
        words = f"{first}: {rest}"
    if "question" in traits:
        words = f"Did {words}?"
    if "pet_word" in traits:
        words = f"{user.pet_word} {'did' + words[3:] if words.startswith('Did ') else words}"
    if "exclaim" in traits:
        words += "!"
    text = words[0].upper() + words[1:]
    return text.lower() if "lowercase" in traits else text


def _article(event: tuple, place: str) -> str:
    action, subject, count = event
    return (
        f"{place} {action} {subject}, officials said on Tuesday. The decision follows months of meetings, "
        f"and {count} local groups took part in the process. Supporters say the change will help families, "
        f"while critics worry about the cost. Work is expected to start next spring."
    )


# ----------------------------------------------------------------------------------- writing
@dataclass(frozen=True)
class ParlSample:
    root: Path
    files: dict[str, list[Path]]
    ground_truth: Path


def _negatives(user: User, target_id: str, render) -> list[dict]:
    return [
        {"id": target_id, "generator": "synthetic-non", "output": render(())},
        {"id": target_id, "generator": "synthetic-rag", "output": render(user.traits[:1])},
    ]


def _write_amazon(root: Path, seed: int, n_users: int, items_per_user: tuple[int, int], truth: dict) -> list[Path]:
    """Amazon-like reviews of invented products, their metadata and the negatives; users' traits into ``truth``."""
    rng = random.Random(f"{seed}:parl:amazon")
    reviews, meta, baselines = [], {}, []
    for u in range(n_users):
        user = _user(rng, "amazon", u)
        truth["users"][user.id] = list(user.traits)
        n = rng.randint(*items_per_user)
        for j in range(n):
            product = rng.choice(_PRODUCTS)
            asin = f"B{rng.randrange(10**8):08d}"
            meta[asin] = {
                "parent_asin": asin,
                "title": f"{rng.choice(_ADJECTIVES)} {product[0].title()}",
                "main_category": product[1],
                "description": [f"A {product[0]} that {product[2]} and {product[3]}."],
            }
            rating = rng.choice((3, 4, 4, 5, 5, 2))
            text, title = _review(user, product, rating, user.traits)
            reviews.append(
                {
                    "rating": float(rating),
                    "title": title,
                    "text": text,
                    "parent_asin": asin,
                    "user_id": user.id,
                    "timestamp": 1_600_000_000_000 + j * 86_400_000 + u,
                }
            )
            if j == n - 1:
                baselines += _negatives(
                    user, f"amazon:{user.id}", lambda t, p=product, r=rating, user=user: _review(user, p, r, t)[0]
                )
    files = [
        root / "amazon" / "reviews.jsonl",
        root / "amazon" / "meta.jsonl",
        root / "amazon" / "baselines.jsonl",
    ]
    write_jsonl(files[0], reviews)
    write_jsonl(files[1], list(meta.values()))
    write_jsonl(files[2], baselines)
    return files


def _write_reddit(root: Path, seed: int, n_users: int, items_per_user: tuple[int, int], truth: dict) -> list[Path]:
    """LongLaMP-like Reddit posts (topic writing) and the negatives; every user's traits into ``truth``."""
    rng = random.Random(f"{seed}:parl:reddit")
    records, baselines = [], []
    for u in range(n_users):
        user = _user(rng, "reddit", u)
        truth["users"][user.id] = list(user.traits)
        posts = [rng.choice(_POSTS) for _ in range(rng.randint(*items_per_user))]
        profile = [
            {"id": f"{user.id}-{j}", "summary": f"Asking about {p[0]}: {p[1]}", "content": _post(user, p, user.traits)}
            for j, p in enumerate(posts[:-1])
        ]
        target = posts[-1]
        records.append(
            {
                "name": user.id,
                "input": f"Asking about {target[0]}: {target[1]}",
                "output": _post(user, target, user.traits),
                "profile": profile,
            }
        )
        baselines += _negatives(user, f"reddit:{user.id}", lambda t, p=target, user=user: _post(user, p, t))
    files = [root / "reddit" / "topic_writing.jsonl", root / "reddit" / "baselines.jsonl"]
    write_jsonl(files[0], records)
    write_jsonl(files[1], baselines)
    return files


def _write_news(root: Path, seed: int, n_users: int, items_per_user: tuple[int, int], truth: dict) -> list[Path]:
    """LaMP-4-like news headlines (questions, gold outputs) and the negatives; every user's traits into ``truth``."""
    rng = random.Random(f"{seed}:parl:news")
    questions, golds, baselines = [], [], []
    for u in range(n_users):
        user = _user(rng, "news", u)
        truth["users"][user.id] = list(user.traits)
        items = [
            (rng.choice(_EVENTS), _name(rng).capitalize() + rng.choice(("ton", "ville", "ford")))
            for _ in range(rng.randint(*items_per_user))
        ]
        profile = [
            {"id": f"{user.id}-{j}", "text": _article(e, place), "title": _headline(user, e, place, user.traits)}
            for j, (e, place) in enumerate(items[:-1])
        ]
        event, place = items[-1]
        qid = f"news-{u:03d}"
        questions.append(
            {
                "id": qid,
                "user_id": user.id,
                "input": f"Generate a headline for the following article: {_article(event, place)}",
                "profile": profile,
            }
        )
        golds.append({"id": qid, "output": _headline(user, event, place, user.traits)})
        baselines += _negatives(user, f"news:{qid}", lambda t, e=event, p=place, user=user: _headline(user, e, p, t))
    files = [root / "news" / name for name in ("questions.json", "outputs.json", "baselines.jsonl")]
    write_json(files[0], questions)
    write_json(files[1], {"task": "LaMP_4", "golds": golds})
    write_jsonl(files[2], baselines)
    return files


def write_parl_sample(
    out_dir: str | Path, seed: int = 0, n_users: int = 32, items_per_user: tuple[int, int] = (6, 12)
) -> ParlSample:
    """Write the synthetic PARL raw files under ``out_dir`` (``amazon/``, ``reddit/``, ``news/``).

    The same arguments always write the same bytes; each task draws from its own random stream.
    """
    root = Path(out_dir)
    truth: dict = {"synthetic": True, "seed": seed, "traits_per_user": TRAITS_PER_USER, "users": {}}
    # The marker before any data (the users' traits are known only once their files are written, then it is
    # rewritten whole): a run killed midway leaves data that `prepare parl` still knows to be synthetic.
    write_json(root / "ground_truth.json", truth)
    files = {
        task: write(root, seed, n_users, items_per_user, truth)
        for task, write in (("amazon", _write_amazon), ("reddit", _write_reddit), ("news", _write_news))
    }
    write_json(root / "ground_truth.json", truth)
    return ParlSample(root=root, files=files, ground_truth=root / "ground_truth.json")
