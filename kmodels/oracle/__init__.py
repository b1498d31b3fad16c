"""An independent NumPy reference for the building blocks of kmodels.

Every function here is written from the published equations (cited in each
docstring), in float64, with no Keras import. Tests load the same weights into a
Keras layer and into these functions and compare the results on every backend.

Weight layouts follow Keras' `get_weights()` order so that a test can hand the
same arrays to both, but the arithmetic is the papers', not Keras' code.
"""

from kmodels.oracle.attention import multi_head_attention
from kmodels.oracle.attention import softmax
from kmodels.oracle.dense import dense
from kmodels.oracle.embedding import embedding
from kmodels.oracle.gradients import numerical_gradient
from kmodels.oracle.gru import bidirectional_gru
from kmodels.oracle.gru import gru
from kmodels.oracle.losses import masked_accuracy
from kmodels.oracle.losses import masked_cross_entropy
from kmodels.oracle.losses import sparse_softmax_cross_entropy
from kmodels.oracle.normalization import layer_norm
from kmodels.oracle.patch_embedding import patch_embedding
from kmodels.oracle.position import learned_position_embedding
from kmodels.oracle.position import sine_position_encoding
from kmodels.oracle.seq2seq import seq2seq_decoder
from kmodels.oracle.seq2seq import seq2seq_encoder
from kmodels.oracle.seq2seq import seq2seq_loss
from kmodels.oracle.sparse_optimizer import sparse_optimizer_step
from kmodels.oracle.transformer import transformer_encoder

__all__ = [
    "bidirectional_gru",
    "dense",
    "embedding",
    "gru",
    "layer_norm",
    "learned_position_embedding",
    "masked_accuracy",
    "masked_cross_entropy",
    "multi_head_attention",
    "numerical_gradient",
    "patch_embedding",
    "seq2seq_decoder",
    "seq2seq_encoder",
    "seq2seq_loss",
    "sine_position_encoding",
    "softmax",
    "sparse_optimizer_step",
    "sparse_softmax_cross_entropy",
    "transformer_encoder",
]
