"""torch side of `kmodels.backend.decoding`: the greedy loop in torch
operations, on the Keras layers' variables."""

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
        wq = _value(mha._query_dense.kernel, dtype)[:, 0]
        bq = _value(mha._query_dense.bias, dtype)[0]
        wk = _value(mha._key_dense.kernel, dtype)[:, 0]
        bk = _value(mha._key_dense.bias, dtype)[0]
        wv = _value(mha._value_dense.kernel, dtype)[:, 0]
        bv = _value(mha._value_dense.bias, dtype)[0]
        wo = _value(mha._output_dense.kernel, dtype)[0]
        bo = _value(mha._output_dense.bias, dtype)
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
            xz, xr, xh = (x @ kernel + input_bias).split(units, dim=-1)
            hz, hr, hh = (state @ recurrent_kernel + recurrent_bias).split(
                units, dim=-1
            )
            z = torch.sigmoid(xz + hz)
            r = torch.sigmoid(xr + hr)
            state = z * state + (1 - z) * torch.tanh(xh + r * hh)
            query = (state @ wq + bq) * scale
            scores = torch.einsum("bd,bsd->bs", query, keys) + masked
            weights = torch.softmax(scores, dim=-1)
            attended = torch.einsum("bs,bsd->bd", weights, values) @ wo + bo
            h = torch.nn.functional.layer_norm(
                (state + attended).float(), (units,), gamma, beta, norm.epsilon
            ).to(dtype)
            logits = (h @ out_kernel + out_bias).float()
            return logits, state, weights

    return step


def greedy_loop(decoder, context, context_mask, start_id, end_id, max_length):
    step = decoder_step(decoder, context, context_mask)
    if step is None:
        return None
    dtype = getattr(torch, decoder.compute_dtype)
    with torch.no_grad():
        batch, s = context.shape[0], context.shape[1]
        ids = torch.zeros((batch, max_length), dtype=torch.int32)
        attention = torch.zeros((batch, max_length, s), dtype=dtype)
        scores = torch.zeros((batch,), dtype=torch.float32)
        done = torch.zeros((batch,), dtype=torch.bool)
        token = torch.full((batch,), start_id, dtype=torch.long)
        state = torch.zeros((batch, decoder.units), dtype=dtype)
        for i in range(max_length):
            logits, state, weights = step(token, state)
            # The padding id is never generated.
            logits[:, 0] = -1e9
            nxt = torch.argmax(logits, dim=-1)
            log_probs = torch.log_softmax(logits, dim=-1)
            chosen = log_probs.gather(1, nxt[:, None])[:, 0]
            scores = torch.where(done, scores, scores + chosen)
            done = done | (nxt == end_id)
            nxt = torch.where(done, torch.zeros_like(nxt), nxt)
            ids[:, i] = nxt.to(torch.int32)
            attention[:, i] = torch.where(
                done[:, None], torch.zeros_like(weights), weights
            )
            if bool(done.all()):
                break
            token = nxt
        return ids, attention, scores
