"""The sampler arguments of `Translator.generate`, checked and planned.

`plan` checks `sampler`, `temperature`, `seed` and the sampler's keyword
arguments the same way on every backend, before anything runs, and returns
a `Plan`: the configuration of the compiled loop (`Plan.key`) and the
inputs of one call. A name is resolved through keras-hub's registry
(`keras_hub.samplers.get`), which gives its class, its arguments and their
defaults; an instance is checked as its name is. The loop itself is
`kmodels.seq2seq.decoding`'s.
"""

import functools
import math
import numbers
import random

import numpy as np

from kmodels.arguments import ArgumentTypeError
from kmodels.arguments import check_bool
from kmodels.arguments import check_float
from kmodels.arguments import check_int
from kmodels.arguments import check_optional_int

# The sampler names `generate` takes: keras-hub's (`keras_hub.samplers.get`)
# less "contrastive" and "speculative", which need the hidden states of a
# causal language model.
NAMES = ("greedy", "random", "top_k", "top_p", "beam")
# `generate`'s defaults where they differ from the keras-hub constructor's
# (`BeamSampler`: 5 beams).
_DEFAULTS = {"beam": {"num_beams": 4}}
_LARGEST_SEED = 2**31 - 1
# Configuration entries that are inputs of the compiled loop, not part of
# its key: the temperature (a tensor) and the seed (the stream's state).
_INPUTS = ("temperature", "seed")


def check_max_length(max_length, owner):
    """Returns `max_length` as an int >= 1; an `ArgumentTypeError` (a
    `TypeError`) for anything but an integer (`2.7`, `"3"`, `True`, `None`,
    NaN), a `ValueError` below 1."""
    return check_int(max_length, "max_length", owner, 1, type_error=True)


def check_seed(seed, owner):
    """Returns `seed` as an int in `[0, 2**31)`, or `None`."""
    return check_optional_int(
        seed, "seed", owner, 0, _LARGEST_SEED, type_error=True
    )


def check_temperature(temperature, owner):
    """Returns `temperature` as a finite float >= 0, or `None`; an
    `ArgumentTypeError` (a `TypeError`) for anything but a real number
    (`"0.5"`, `True`), a `ValueError` for a negative or non-finite one."""
    if temperature is None:
        return None
    described = f"{temperature!r} ({type(temperature).__name__})"
    if isinstance(temperature, (bool, np.bool_)) or not isinstance(
        temperature, (numbers.Real, np.floating, np.integer)
    ):
        raise ArgumentTypeError(
            f"{owner}: temperature must be >= 0 and finite, or None; got "
            f"{described}."
        )
    value = float(temperature)
    if not (math.isfinite(value) and value >= 0.0):
        raise ValueError(
            f"{owner}: temperature must be >= 0 and finite, or None; got "
            f"{described}."
        )
    return value


class Plan:
    """A checked decoding request: the sampler configuration of its
    compiled loop and the inputs of one call.

    Attributes:
        key: hashable; equal keys share a compiled loop. The sampler's
            class and configuration without its temperature and seed
            (inputs of the loop), so a name and an equal instance, or two
            equal instances, share one.
        build: makes the loop's own sampler (temperature 1; beam search
            with `return_all_beams`).
        num_beams: int, 1 unless beam search.
        return_all_beams: bool.
        temperature: float > 0, what the logits are divided by (an input
            of the compiled loop: no retrace per temperature).
        unit_temperature: bool, beam search at temperature 1, whose search
            log-probabilities are the scores (part of the key).
        scaled: bool, the logits are divided by the temperature (not for
            greedy decoding, nor beam search at temperature 1).
        seed: the seed the sampler's stream starts from, or `None`.
        stream: the caller's sampler instance, whose stream the call
            continues (without `seed`) and advances; `None` for a name.
    """

    def __init__(self, cls, config, temperature, seed, stream):
        import keras_hub  # imported on use: not by `import kmodels`

        takes_seed = "seed" in config
        config = {k: v for k, v in config.items() if k not in _INPUTS}
        beam = issubclass(cls, keras_hub.samplers.BeamSampler)
        self.num_beams = config["num_beams"] if beam else 1
        self.return_all_beams = config["return_all_beams"] if beam else False
        self.temperature = temperature
        self.unit_temperature = beam and temperature == 1.0
        # Greedy decoding takes the argmax, the same at any temperature.
        self.scaled = not (
            self.unit_temperature
            or issubclass(cls, keras_hub.samplers.GreedySampler)
        )
        self.key = (cls, _freeze(config), self.unit_temperature)
        self.seed = seed
        self.stream = stream
        built = dict(config, temperature=1.0)
        if takes_seed:
            # Its stream is an input of the loop; a fixed seed keeps a new
            # loop from drawing one from Python's `random` (the caller's).
            built["seed"] = 0
        if beam:
            # All beams and their log-probabilities are read from the loop.
            built["return_all_beams"] = True
        self.build = lambda: cls.from_config(built)


def _freeze(value):
    """A hashable form of a sampler configuration."""
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return (type(value).__name__, value)


@functools.cache
def _registered(name):
    """keras-hub's sampler called `name` (one of `NAMES`), at its defaults,
    from `keras_hub.samplers.get`: `(class, configuration, samples
    randomly)`. Resolved once per name."""
    import keras_hub  # imported on use: not by `import kmodels`

    samplers = keras_hub.samplers
    try:
        # A sampler that draws takes a seed; given one, its generator draws
        # none from Python's `random` (the stream of unseeded calls).
        sampler = samplers.get({"class_name": name, "config": {"seed": 0}})
    except TypeError:
        # The constructor takes no seed: a deterministic sampler.
        sampler = samplers.get(name)
    return type(sampler), sampler.get_config(), bool(sampler.variables)


def plan(sampler, temperature, seed, sampler_kwargs, vocabulary_size, owner):
    """Checks the sampler arguments of `Translator.generate` and returns a
    `Plan`; raises a `ValueError` naming the argument otherwise (an
    `ArgumentTypeError`, also a `TypeError`, for a wrong type).

    `sampler=None` keeps the behaviour of the temperature-only API: greedy
    at `temperature` 0 (or `None`), random sampling at a temperature > 0.
    A sampler instance is checked as its name is (`k`, `p`, `num_beams`,
    `return_all_beams`), and its temperature must be finite and > 0.
    """
    import keras_hub  # imported on use: not by `import kmodels`

    seed = check_seed(seed, owner)
    temperature = check_temperature(temperature, owner)
    if sampler is None:
        sampler = "random" if temperature else "greedy"
    if isinstance(sampler, keras_hub.samplers.Sampler):
        return _instance_plan(
            sampler, temperature, seed, sampler_kwargs, vocabulary_size, owner
        )
    if not isinstance(sampler, str) or sampler not in NAMES:
        error = ValueError if isinstance(sampler, str) else ArgumentTypeError
        raise error(
            f"{owner}: `sampler` must be one of {NAMES} or a "
            "keras_hub.samplers.Sampler; got "
            f"{sampler!r} ({type(sampler).__name__})."
        )
    cls, defaults, random_ = _registered(sampler)
    names = tuple(k for k in defaults if k not in _INPUTS)
    unknown = sorted(set(sampler_kwargs) - set(names))
    if unknown:
        allowed = ", ".join(names) if names else "none"
        raise ValueError(
            f"{owner}: sampler={sampler!r} takes no argument "
            f"{', '.join(map(repr, unknown))}; its arguments: {allowed}. "
            "(`temperature` and `seed` are arguments of generate itself.)"
        )
    kwargs = {**defaults, **_DEFAULTS.get(sampler, {}), **sampler_kwargs}
    kwargs = _check_config(
        cls, kwargs, vocabulary_size, f"{owner} (sampler={sampler!r})"
    )
    if random_:
        if temperature is None:
            temperature = 1.0
        if temperature == 0.0:
            raise ValueError(
                f"{owner}: sampler={sampler!r} needs a temperature > 0 "
                "(1.0 leaves the logits unscaled); got 0.0. For argmax "
                "decoding use sampler='greedy'."
            )
        if seed is None:
            # Each call draws afresh (from Python's `random`, which
            # `keras.utils.set_random_seed` seeds).
            seed = random.randint(0, _LARGEST_SEED)
    else:
        if temperature:
            raise ValueError(
                f"{owner}: sampler={sampler!r} is deterministic and takes no "
                f"temperature; got {temperature}. Sampling at a "
                "temperature: sampler='random', 'top_k' or 'top_p'."
            )
        seed, temperature = None, 1.0
    return Plan(cls, kwargs, temperature, seed, None)


def _check_config(cls, config, vocabulary_size, where):
    """Checks the arguments of a sampler of class `cls` (a name's keyword
    arguments or an instance's configuration) and returns them. keras-hub's
    constructors take any value (`TopKSampler(k=0)` fails, or not, only
    when it runs, differently per backend)."""
    import keras_hub  # imported on use: not by `import kmodels`

    samplers = keras_hub.samplers
    # The padding id is never a candidate: vocabulary_size - 1 ids remain.
    ids = vocabulary_size - 1
    config = dict(config)
    if issubclass(cls, samplers.TopPSampler):
        config["p"] = check_float(
            config["p"],
            "p",
            where,
            0.0,
            1.0,
            exclusive_minimum=True,
            type_error=True,
        )
        config["k"] = check_optional_int(
            config["k"], "k", where, 1, ids, type_error=True
        )
    elif issubclass(cls, samplers.TopKSampler):
        config["k"] = check_int(
            config["k"], "k", where, 1, ids, type_error=True
        )
    elif issubclass(cls, samplers.BeamSampler):
        config["num_beams"] = check_int(
            config["num_beams"], "num_beams", where, type_error=True
        )
        config["return_all_beams"] = check_bool(
            config["return_all_beams"],
            "return_all_beams",
            where,
            type_error=True,
        )
    return config


def _instance_plan(
    sampler, temperature, seed, sampler_kwargs, vocabulary, owner
):
    import keras_hub  # imported on use: not by `import kmodels`

    if sampler_kwargs:
        raise ValueError(
            f"{owner}: sampler arguments {sorted(sampler_kwargs)} go to the "
            f"sampler's constructor when `sampler` is an instance "
            f"({type(sampler).__name__})."
        )
    if temperature:
        raise ValueError(
            f"{owner}: set the temperature on the sampler instance "
            f"({type(sampler).__name__}(temperature=...)); got "
            f"temperature={temperature} as well."
        )
    unsupported = (
        keras_hub.samplers.ContrastiveSampler,
        keras_hub.samplers.SpeculativeSampler,
    )
    if isinstance(sampler, unsupported):
        raise ValueError(
            f"{owner}: {type(sampler).__name__} needs the hidden states of "
            "a causal language model and is not supported; use a name or "
            "a Greedy, Random, TopK, TopP or Beam sampler."
        )
    cls = type(sampler)
    where = f"{owner} (sampler={cls.__name__})"
    config = sampler.get_config()
    temperature = check_float(
        config.get("temperature", sampler.temperature),
        "temperature",
        where,
        0.0,
        exclusive_minimum=True,
        type_error=True,
    )
    config = _check_config(cls, config, vocabulary, where)
    stream = sampler if sampler.variables else None
    if stream is None:
        seed = None
    return Plan(cls, config, temperature, seed, stream)


def check_count(
    count,
    options,
    sampler,
    temperature,
    seed,
    sampler_kwargs,
    vocabulary,
    owner,
):
    """`translate`'s `num_return_sequences` (Hugging Face's and the
    export's name): an int in `[1, num_beams]` (1 for greedy decoding and
    sampling), not with `return_all_beams` (keras-hub's). Asks a beam
    search named `"beam"` for every beam when more than one is wanted.
    Returns the count."""
    if "return_all_beams" in options:
        raise ValueError(
            f"{owner}: pass `num_return_sequences` (the n best) or "
            "`return_all_beams` (every beam), not both; got "
            f"num_return_sequences={count!r} and "
            f"return_all_beams={options['return_all_beams']!r}."
        )
    request = plan(
        sampler, temperature or None, seed, sampler_kwargs, vocabulary, owner
    )
    count = check_int(
        count,
        "num_return_sequences",
        owner,
        1,
        request.num_beams,
        type_error=True,
    )
    if count > 1 and not request.return_all_beams:
        if not isinstance(sampler, str):
            raise ValueError(
                f"{owner}: num_return_sequences={count} needs every beam "
                "of the search: make the sampler with "
                "return_all_beams=True, or pass sampler='beam'."
            )
        options["return_all_beams"] = sampler_kwargs["return_all_beams"] = True
    return count
