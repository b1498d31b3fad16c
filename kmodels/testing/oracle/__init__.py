"""An independent NumPy reference for the building blocks of kmodels.

Every function here is written from the published equations (cited in each
docstring), in float64, with no Keras import. Tests load the same weights into a
Keras layer and into these functions and compare the results on every backend.

Weight layouts follow Keras' `get_weights()` order so that a test can hand the
same arrays to both, but the arithmetic is the papers', not Keras' code.
"""

from kmodels.testing.oracle.attention import multi_head_attention
from kmodels.testing.oracle.attention import softmax
from kmodels.testing.oracle.dense import dense
from kmodels.testing.oracle.embedding import embedding
from kmodels.testing.oracle.embedding_bag import embedding_bag
from kmodels.testing.oracle.embedding_bag import embedding_bag_row_grads
from kmodels.testing.oracle.embedding_bag import summed_sparse_step
from kmodels.testing.oracle.gradients import numerical_gradient
from kmodels.testing.oracle.gru import bidirectional_gru
from kmodels.testing.oracle.gru import gru
from kmodels.testing.oracle.key_index import key_index_lookup
from kmodels.testing.oracle.losses import masked_accuracy
from kmodels.testing.oracle.losses import masked_cross_entropy
from kmodels.testing.oracle.losses import sparse_softmax_cross_entropy
from kmodels.testing.oracle.normalization import layer_norm
from kmodels.testing.oracle.patch_embedding import patch_embedding
from kmodels.testing.oracle.position import learned_position_embedding
from kmodels.testing.oracle.position import sine_position_encoding
from kmodels.testing.oracle.search import beam_search
from kmodels.testing.oracle.search import exhaustive_search
from kmodels.testing.oracle.search import score_sequences
from kmodels.testing.oracle.seq2seq import seq2seq_decoder
from kmodels.testing.oracle.seq2seq import seq2seq_encoder
from kmodels.testing.oracle.seq2seq import seq2seq_loss
from kmodels.testing.oracle.sparse_optimizer import exponential_decay
from kmodels.testing.oracle.sparse_optimizer import sparse_optimizer_step
from kmodels.testing.oracle.transformer import transformer_encoder

__all__ = [
    "beam_search",
    "bidirectional_gru",
    "dense",
    "embedding",
    "embedding_bag",
    "embedding_bag_row_grads",
    "exhaustive_search",
    "exponential_decay",
    "gru",
    "key_index_lookup",
    "layer_norm",
    "learned_position_embedding",
    "masked_accuracy",
    "masked_cross_entropy",
    "multi_head_attention",
    "numerical_gradient",
    "patch_embedding",
    "score_sequences",
    "seq2seq_decoder",
    "seq2seq_encoder",
    "seq2seq_loss",
    "sine_position_encoding",
    "softmax",
    "sparse_optimizer_step",
    "sparse_softmax_cross_entropy",
    "summed_sparse_step",
    "transformer_encoder",
]
