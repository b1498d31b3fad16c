"""torch side of `kmodels.backend.decoding`: the greedy and beam search
loops in torch operations, on the Keras layers' variables."""

import math

import torch


def _value(variable, dtype):
    return variable.value.to(dtype)


def decoder_step(decoder, context, context_mask):
    cell = decoder.rnn.cell
    mha = decoder.attention.mha
    norm = decoder.attention.layernorm
    if not (
        cell.reset_after
        and cell.use_bias
        and mha.num_heads == 1
        and mha._use_bias
        and not norm.rms_scaling
        and norm.center
        and norm.scale
    ):
        # Only the configuration `Decoder` builds is written here.
        return None
    dtype = getattr(torch, decoder.compute_dtype)
    units = decoder.units
    with torch.no_grad():
        context = torch.as_tensor(context).to(dtype)
        mask = torch.as_tensor(context_mask).to(torch.bool)
        embeddings = _value(decoder.embedding.embeddings, dtype)
        kernel = _value(cell.kernel, dtype)
        recurrent_kernel = _value(cell.recurrent_kernel, dtype)
        input_bias, recurrent_bias = _value(cell.bias, dtype)
        # MultiHeadAttention's kernels: query/key/value (units, 1, key_dim),
        # output (1, key_dim, units); the query is scaled by 1/sqrt(key_dim).
        wq = _value(mha.query_dense.kernel, dtype)[:, 0]
        bq = _value(mha.query_dense.bias, dtype)[0]
        wk = _value(mha.key_dense.kernel, dtype)[:, 0]
        bk = _value(mha.key_dense.bias, dtype)[0]
        wv = _value(mha.value_dense.kernel, dtype)[:, 0]
        bv = _value(mha.value_dense.bias, dtype)[0]
        wo = _value(mha.output_dense.kernel, dtype)[0]
        bo = _value(mha.output_dense.bias, dtype)
        scale = 1.0 / math.sqrt(mha._key_dim)
        gamma = _value(norm.gamma, torch.float32)
        beta = _value(norm.beta, torch.float32)
        out_kernel = _value(decoder.output_layer.kernel, dtype)
        out_bias = _value(decoder.output_layer.bias, dtype)
        # The context's keys and values do not change between steps.
        keys = context @ wk + bk
        values = context @ wv + bv
        # Keras' masked softmax adds a large negative number at masked
        # positions (a fully masked row becomes uniform, as there).
        negative = -1e9 if dtype == torch.float32 else -3e4
        masked = (~mask).to(dtype) * negative

    def step(token, state):
        with torch.no_grad():
            token = torch.as_tensor(token).long()
            state = torch.as_tensor(state).to(dtype)
            x = embeddings[token]
            # `addmm`: the bias added in the product, not as one more pass.
            xz, xr, xh = torch.addmm(input_bias, x, kernel).split(units, -1)
            hz, hr, hh = torch.addmm(
                recurrent_bias, state, recurrent_kernel
            ).split(units, -1)
            z = torch.sigmoid(xz + hz)
            r = torch.sigmoid(xr + hr)
            state = z * state + (1 - z) * torch.tanh(xh + r * hh)
            query = torch.addmm(bq, state, wq) * scale
            scores = torch.einsum("bd,bsd->bs", query, keys) + masked
            weights = torch.softmax(scores, dim=-1)
            attended = torch.einsum("bs,bsd->bd", weights, values)
            attended = torch.addmm(bo, attended, wo)
            h = torch.nn.functional.layer_norm(
                (state + attended).float(), (units,), gamma, beta, norm.epsilon
            ).to(dtype)
            logits = torch.addmm(out_bias, h, out_kernel).float()
            return logits, state, weights

    return step


def _constrained(constraints):
    """Whether `constraints` (a `kmodels.seq2seq.constraints.Constraints`,
    or None) has anything on. Its processors are applied through their own
    `keras.ops` code, on torch tensors: no second implementation here."""
    return constraints is not None and constraints.active


def greedy_loop(
    decoder, context, context_mask, start_id, end_id, max_length, constraints
):
    step = decoder_step(decoder, context, context_mask)
    if step is None:
        return None
    constrained = _constrained(constraints)
    dtype = getattr(torch, decoder.compute_dtype)
    with torch.no_grad():
        batch, s = context.shape[0], context.shape[1]
        on = dict(device=torch.as_tensor(context).device)
        ids = torch.zeros((batch, max_length), dtype=torch.int32, **on)
        attention = torch.zeros((batch, max_length, s), dtype=dtype, **on)
        scores = torch.zeros((batch,), dtype=torch.float32, **on)
        done = torch.zeros((batch,), dtype=torch.bool, **on)
        token = torch.full((batch,), start_id, dtype=torch.long, **on)
        state = torch.zeros((batch, decoder.units), dtype=dtype, **on)
        for i in range(max_length):
            logits, state, weights = step(token, state)
            # The padding id is never generated.
            logits[:, 0] = -math.inf
            if not constrained:
                nxt = torch.argmax(logits, dim=-1)
            else:
                logits = constraints.transform(logits, ids, i, end_id)
                allowed = constraints.refuse(logits, ids, i, end_id)
                # A row with no allowed id stops, scoring -inf.
                dead = torch.isneginf(allowed).all(dim=-1)
                nxt = torch.argmax(allowed, dim=-1).masked_fill(dead, 0)
            log_probs = torch.log_softmax(logits, dim=-1)
            chosen = log_probs.gather(1, nxt[:, None])[:, 0]
            if constrained:
                chosen = chosen.masked_fill(dead, -math.inf)
            scores = torch.where(done, scores, scores + chosen)
            done = done | (nxt == end_id)
            if constrained:
                done = done | dead
            nxt = torch.where(done, torch.zeros_like(nxt), nxt)
            ids[:, i] = nxt.to(torch.int32)
            attention[:, i] = torch.where(
                done[:, None], torch.zeros_like(weights), weights
            )
            if bool(done.all()):
                break
            token = nxt
        return ids, attention, scores


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
    with torch.no_grad():
        context = torch.as_tensor(context)
        device = context.device
        step = decoder_step(
            decoder,
            context.repeat_interleave(num_beams, dim=0),
            torch.as_tensor(context_mask).repeat_interleave(num_beams, dim=0),
        )
    if step is None:
        return None
    dtype = getattr(torch, decoder.compute_dtype)
    inf = float("inf")
    with torch.no_grad():
        batch, s = context.shape[0], context.shape[1]
        rows = batch * num_beams
        like = dict(dtype=torch.long, device=device)
        # Each step's ids, the flat row of the beam each extends, and the
        # attention weights, in that step's beam order: a sequence is read
        # back once, at the end, rather than reordered at every step.
        tokens = torch.zeros((max_length, rows), **like)
        parents = torch.zeros((max_length, rows), **like)
        weights = torch.zeros((max_length, rows, s), dtype=dtype, device=device)
        # As keras-hub's BeamSampler: one real beam per row and
        # `num_beams - 1` placeholders at -1e9, so that the first step
        # extends the real one only.
        scores = torch.full((batch, num_beams), -1e9, device=device)
        scores[:, 0] = 0.0
        scores = scores.reshape(rows)
        done = torch.zeros((rows,), dtype=torch.bool, device=device)
        token = torch.full((rows,), start_id, **like)
        state = torch.zeros((rows, decoder.units), dtype=dtype, device=device)
        offsets = torch.arange(batch, device=device)[:, None] * num_beams
        constrained = _constrained(constraints)
        keep_history = constrained and constraints.needs_history
        # Each beam's ids so far, reordered with the beams (when a
        # processor reads them).
        history = torch.zeros((rows, max_length if keep_history else 1), **like)
        steps = 0
        for i in range(max_length):
            logits, state, weights[i] = step(token, state)
            vocabulary = logits.shape[-1]
            # The padding id is never generated (probability 0).
            logits[:, 0] = -inf
            if constrained:
                # The transforms change the distribution scored.
                logits = constraints.transform(logits, history, i, end_id)
            candidates = torch.log_softmax(logits, dim=-1)
            if constrained:
                # Refused ids are removed; the others keep their
                # log-probabilities (no renormalisation).
                candidates = constraints.refuse(candidates, history, i, end_id)
            candidates = candidates + scores[:, None]
            if bool(done.any()):
                # An ended beam (its last id the end id or padding) is one
                # candidate, padding, at its unchanged score.
                candidates.masked_fill_(done[:, None], -inf)
                candidates[:, 0] = torch.where(done, scores, -inf)
            # One top-k over every row's (beams * vocabulary) candidates.
            top, index = candidates.reshape(batch, -1).topk(num_beams, dim=1)
            parent = torch.div(index, vocabulary, rounding_mode="floor")
            parent = (parent + offsets).reshape(rows)
            token = (index % vocabulary).reshape(rows)
            scores = top.reshape(rows)
            state = state[parent]
            if keep_history:
                history = history[parent]
                history[:, i] = token
            done = done[parent] | (token == end_id) | (token == 0)
            tokens[i], parents[i] = token, parent
            steps = i + 1
            if bool(done.all()):
                break
        # Backtrack from the final beams to their ids and weights.
        ids = torch.zeros((rows, max_length), **like)
        attention = torch.zeros(
            (rows, max_length, s), dtype=dtype, device=device
        )
        beam = torch.arange(rows, device=device)
        for i in range(steps - 1, -1, -1):
            ids[:, i] = tokens[i, beam]
            # The weights of the step that extended the parent beam.
            beam = parents[i, beam]
            attention[:, i] = weights[i, beam]
        # The end id and everything after it become padding, with zero
        # attention.
        ended = torch.cumsum(ids == end_id, dim=1) > 0
        ids = ids.masked_fill_(ended, 0).to(torch.int32)
        attention.masked_fill_((ids == 0)[..., None], 0.0)
        # A beam that descends from a placeholder is no real sequence.
        scores = torch.where(scores > -1e8, scores, -inf)
        scores = scores.reshape(batch, num_beams)
        # Best first; ties keep the search's order (as `keras.ops.argsort`).
        order = torch.argsort(-scores, dim=1, stable=True)
        scores = scores.gather(1, order)
        flat = (order + offsets).reshape(rows)
        ids = ids[flat].reshape(batch, num_beams, max_length)
        attention = attention[flat].reshape(batch, num_beams, max_length, s)
        if return_all_beams:
            return ids, attention, scores
        return ids[:, 0], attention[:, 0], scores[:, 0]


def _seeded_generator(seed_state, counter, device):
    """The generator keras' `keras.random.categorical` makes on torch from a
    `SeedGenerator` whose state is `(first, counter)`: seeded with their
    sum, as a uint32 (as Keras' torch random module seeds it)."""
    generator = torch.Generator(device=device)
    generator.manual_seed((seed_state + counter) & 0xFFFFFFFF)
    return generator


def _categorical(log_probs, generator):
    # `keras.random.categorical(log_probs, 1)` on torch: a softmax, then
    # one multinomial draw per row.
    probs = torch.softmax(log_probs, dim=-1)
    return torch.multinomial(probs, 1, replacement=True, generator=generator)


def _draw(probabilities, rule, generator):
    """The next ids `(rows,)` as keras-hub's `RandomSampler`,
    `TopKSampler` or `TopPSampler.get_next_token` draws them on torch, with
    the same operations (so the same draws from the same generator)."""
    kind, k, p = rule
    if kind == "random":
        return _categorical(torch.log(probabilities), generator)[:, 0]
    if kind == "top_k":
        top, index = torch.topk(probabilities, k, sorted=False)
        choice = _categorical(torch.log(top), generator)
        return index.gather(1, choice)[:, 0]
    cutoff = probabilities.shape[1] if k is None else k
    top, index = torch.topk(probabilities, cutoff, sorted=True)
    keep = torch.cumsum(top, dim=-1) <= p
    # The most likely id is always kept, and each id whose predecessors sum
    # to at most p.
    keep = torch.cat([torch.ones_like(keep[:, :1]), keep[:, :-1]], dim=-1)
    top = torch.where(keep, top, torch.zeros_like(top))
    choice = _categorical(torch.log(top), generator)
    return index.gather(1, choice)[:, 0]


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
    step = decoder_step(decoder, context, context_mask)
    if step is None:
        return None
    context = torch.as_tensor(context)
    device = context.device
    constrained = _constrained(constraints)
    dtype = getattr(torch, decoder.compute_dtype)
    inf = float("inf")
    with torch.no_grad():
        temperature = torch.as_tensor(temperature, dtype=torch.float32)
        temperature = temperature.to(device)
        unit = bool(temperature == 1.0)
        seed_state = torch.as_tensor(seed_state)
        first, counter = (int(v) for v in seed_state.tolist())
        batch, s = context.shape[0], context.shape[1]
        # The ids as sampled (the end id and what follows are made padding
        # at the end, as in the Keras loop).
        ids = torch.zeros((batch, max_length), dtype=torch.int32, device=device)
        attention = torch.zeros(
            (batch, max_length, s), dtype=dtype, device=device
        )
        scores = torch.zeros((batch,), dtype=torch.float32, device=device)
        token = torch.full((batch,), start_id, dtype=torch.long, device=device)
        state = torch.zeros((batch, decoder.units), dtype=dtype, device=device)
        # A row that has ended may only produce the padding id.
        vocabulary = decoder.output_layer.kernel.shape[-1]
        ended_logits = torch.full((1, vocabulary), -inf, device=device)
        ended_logits[:, 0] = 0.0
        # keras-hub's loop runs until every row has produced the end id (a
        # row with no allowed id never does), drawing one seed per step.
        steps = max_length
        for i in range(max_length):
            logits, state, weights = step(token, state)
            logits[:, 0] = -inf
            ended = (token == end_id) | (token == 0)
            if not constrained:
                stopped, allowed = ended, logits
            else:
                logits = constraints.transform(logits, ids, i, end_id)
                allowed = constraints.refuse(logits, ids, i, end_id)
                # A row with no allowed id stops: it writes padding, whose
                # log-probability (-inf) becomes its score.
                stopped = ended | torch.isneginf(allowed).all(dim=-1)
            if unit:
                # At temperature 1 the Keras loop's logits less their
                # maximum have the same softmax, bit for bit: the softmax
                # subtracts the maximum itself.
                scaled = allowed
            else:
                # The temperature divides the logits less their maximum,
                # the maximum at 0 (a temperature that float32 flushes to 0
                # makes it 0 / 0), as `kmodels.seq2seq.decoding`'s Keras
                # loop.
                top = allowed.amax(dim=-1, keepdim=True)
                scaled = torch.sub(allowed, top).div_(temperature)
                scaled.masked_fill_(allowed == top, 0.0)
                scaled[:, 0] = -inf
            if bool(stopped.any()):
                if scaled is logits:
                    # The logits give the scores below.
                    scaled = scaled.clone()
                scaled[stopped] = ended_logits
            generator = _seeded_generator(first, counter + i, device)
            nxt = _draw(torch.softmax(scaled, dim=-1), rule, generator)
            # The score: the model's own log-probability of the id (0 once
            # a row has ended).
            chosen = torch.log_softmax(logits, dim=-1).gather(1, nxt[:, None])
            scores = scores + torch.where(ended, 0.0, chosen[:, 0])
            ids[:, i] = nxt.to(torch.int32)
            attention[:, i] = weights
            token = nxt
            if bool(((nxt == end_id) | (nxt == 0)).all()):
                # The remaining steps would write padding at no score; the
                # stream advances as keras-hub's loop would have.
                if not bool((ids[:, : i + 1] == end_id).any(dim=1).all()):
                    steps = max_length
                else:
                    steps = i + 1
                break
        ended = torch.cumsum(ids == end_id, dim=1) > 0
        ids = ids.masked_fill_(ended, 0)
        attention.masked_fill_((ids == 0)[..., None], 0.0)
        offset = torch.tensor([0, steps], dtype=seed_state.dtype)
        return (ids, attention, scores), seed_state + offset.to(
            seed_state.device
        )
