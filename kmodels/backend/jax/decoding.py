"""JAX side of `kmodels.backend.decoding`."""


def greedy_loop(
    decoder, context, context_mask, start_id, end_id, max_length, constraints
):
    # Nothing to do: `Translator.generate` compiles its Keras loop here.
    return None


def decoder_step(decoder, context, context_mask):
    # Nothing to do: the samplers' loop is compiled here.
    return None


def beam_loop(
    decoder,
    context,
    context_mask,
    start_id,
    end_id,
    max_length,
    num_beams,
    return_all_beams,
    constraints,
):
    # Nothing to do: `Translator.generate` compiles keras-hub's beam loop.
    return None


def sampling_loop(
    decoder,
    context,
    context_mask,
    start_id,
    end_id,
    max_length,
    rule,
    temperature,
    seed_state,
    constraints,
):
    # Nothing to do: `Translator.generate` compiles keras-hub's sampler loop.
    return None
