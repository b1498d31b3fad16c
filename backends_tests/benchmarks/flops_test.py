"""FLOP formulas of the benchmark, checked against counts done by hand."""

import pytest

from benchmarks import flops

pytestmark = pytest.mark.backend_independent(
    reason="FLOP counts of shapes, in Python"
)


def test_matmul_counts_two_flops_per_multiply_add():
    # (3, 3) @ (3, 3): 9 outputs x 3 multiply-adds x 2 = 54.
    assert flops.matmul(3) == 54


def test_gru_forward_hand_count():
    # One step, batch 1, input 2, units 3. Per gate: x (2) . W (2x3) = 6
    # MACs and h (3) . U (3x3) = 9 MACs; 3 gates: 45 MACs = 90 FLOPs.
    assert flops.gru_forward(1, 1, 2, 3) == 90
    # Linear in batch and time.
    assert flops.gru_forward(4, 5, 2, 3) == 20 * 90


def test_attention_forward_hand_count():
    # Batch 1, 2 queries, 3 values, width 4. Q: 2 x 16 MACs, K: 3 x 16,
    # V: 3 x 16, output: 2 x 16 -> 160 MACs; scores 2 x 3 x 4 = 24 MACs,
    # weighted sum 24 MACs. 208 MACs = 416 FLOPs.
    assert flops.attention_forward(1, 2, 3, 4) == 416


def test_transformer_layer_hand_count():
    # Batch 1, length 2, dim 4, feed-forward 8. Q, K, V, out: 4 x 2 x 16 =
    # 128 MACs; scores and weighted sum: 2 x (2 x 2 x 4) = 32 MACs;
    # feed-forward: 2 x (4 x 8 + 8 x 4) = 128 MACs. 288 MACs = 576 FLOPs.
    assert flops.transformer_layer_forward(1, 2, 4, 8) == 576
    # Train step: 3 x (layers x layer + head Dense 1 x 4 x 2 MACs x 2).
    assert flops.transformer_classifier_train_step(1, 2, 4, 8, 2, 2) == 3 * (
        2 * 576 + 16
    )


def test_seq2seq_train_step_at_tutorial_sizes():
    # Batch 64, lengths 20, vocabulary 5000, units 256, counted by part:
    b, s, t, v, u = 64, 20, 20, 5000, 256
    bigru = 2 * (2 * b * s * 3 * u * (u + u))  # 2,013,265,920
    decoder_gru = 2 * b * t * 3 * u * (u + u)  # 1,006,632,960
    attention = 2 * u * u * (2 * b * t + 2 * b * s) + 4 * b * t * s * u
    dense = 2 * b * t * u * v  # 3,276,800,000
    assert bigru == 2_013_265_920
    assert attention == 697_303_040
    expected = 3 * (bigru + decoder_gru + attention + dense)
    assert flops.seq2seq_train_step(b, s, t, v, u) == expected
    # About 21 GFLOP, as in the project's measured findings.
    assert expected == 20_982_005_760


def test_generation_counts_context_projections_once():
    one = flops.seq2seq_generate(2, 5, 1, 10, 4)
    two = flops.seq2seq_generate(2, 5, 2, 10, 4)
    # Per token: GRU step 2*2*3*4*8 = 384, Q and output projections
    # 2*16*4 = 128, scores + weighted sum 4*2*5*4 = 160, Dense 2*2*4*10
    # = 160: 832 FLOPs.
    assert two - one == 832
    encoder = flops.bigru_encoder_forward(2, 5, 4)
    context_kv = 2 * 16 * (2 * 2 * 5)
    assert one == encoder + context_kv + 832
