"""The benchmark cases: what runs, on which backends, at which sizes."""

import dataclasses

# `kmodels.BACKENDS`, written out: the numpy and tf_keras children must not
# import kmodels (that imports Keras 3 and keras-hub);
# backends_tests/benchmarks/imports_test.py checks that the two agree.
KERAS_BACKENDS = ("tensorflow", "jax", "torch")
# Pseudo-backends: NumPy's BLAS (no Keras) and the original tf.keras code
# under Keras 2 (`tf_keras` with TF_USE_LEGACY_KERAS=1).
NUMPY = "numpy"
TF_KERAS = "tf_keras"
ALL_BACKENDS = (NUMPY, TF_KERAS) + KERAS_BACKENDS


@dataclasses.dataclass(frozen=True)
class Case:
    """One measured thing.

    Attributes:
        name: unique id, used in the JSON results and on the command line.
        workload: the group it belongs to (one block of the table).
        variant: what is measured within the group.
        backends: where it runs (a subset of `ALL_BACKENDS`).
        function: `"module:function"` run in the child process; it takes
            `(sizes, timing)` and returns a dict (see `benchmarks.child`).
        sizes: the workload's key in `FULL_SIZES` / `QUICK_SIZES`.
        unit: `"ms"` (median time per step), `"tokens/s"`, `"keys/s"` or
            `"exact match"` (a trained model's accuracy).
        opt_in: run only when `--cases` names it (a case too slow for the
            default run, such as a whole training).
    """

    name: str
    workload: str
    variant: str
    backends: tuple
    function: str
    sizes: str
    unit: str = "ms"
    opt_in: bool = False


FULL_SIZES = {
    "matmul": {"n": 2048},
    "seq2seq": {
        "batch": 64,
        "source_length": 20,
        "target_length": 20,
        "vocabulary": 5000,
        "units": 256,
    },
    "generate": {
        "batch": 64,
        "source_length": 20,
        "max_length": 50,
        "vocabulary": 5000,
        "units": 256,
    },
    "bigru": {"batch": 64, "length": 20, "vocabulary": 5000, "units": 256},
    "transformer": {
        "batch": 32,
        "length": 128,
        "dim": 128,
        "heads": 4,
        "layers": 2,
        "intermediate_dim": 512,
        "vocabulary": 5000,
        "classes": 2,
    },
    "embedding_small": {"batch": 256, "ids": 8, "dim": 32, "rows": 10_000},
    "embedding_large": {"batch": 256, "ids": 8, "dim": 32, "rows": 1_000_000},
    # Issue 17's notebook call: Translator(10, 10, units=4), batch 2.
    "eager_tiny": {
        "batch": 2,
        "source_length": 6,
        "target_length": 5,
        "vocabulary": 10,
        "units": 4,
    },
    # Issue 17: one date through `TextTranslator.translate`, and the memory
    # over 2,000 eager calls of each model.
    "translate": {"units": 64},
    # Issue 44: `TextTranslator.export` of the dates bundle, timed.
    "export": {"units": 64, "exports": 3},
    # Issue 44: first / steady calls in fresh processes (`first_call`).
    "first_call": {"units": 64, "calls": 20},
    # Issue 44: fresh-process imports, `rounds` rotations (`import_time`).
    "import_time": {"rounds": 7},
    # Issue 44: new shapes and 12 `max_length`s of `generate`, warm process.
    "shapes": {
        "units": 64,
        "batch": 4,
        "length": 8,
        "max_length": 10,
        "calls": 10,
        "values": 12,
    },
    "eager_memory": {"units": 4, "calls": 2000},
    # Issue 15: a batch of 1M keys drawn from 100k, half of them new.
    "keys": {"keys": 1_000_000, "distinct": 100_000},
    # Issue 15: the rows a full LRU index evicted in one step, restarted.
    "eviction_1k": {"batch": 64, "ids": 8, "dim": 32, "rows": 1_000},
    "eviction_1m": {"batch": 64, "ids": 8, "dim": 32, "rows": 1_000_000},
    "delta_100k": {"dim": 32, "rows": 100_000},
    "delta_1m": {"dim": 32, "rows": 1_000_000},
    # Issue 14: the dates demo's own settings (examples/seq2seq_dates.py).
    "dates": {"settings": "full"},
    # Issue 29: one train step at the dates demo's sizes and lengths
    # (`benchmarks.data.dates_batch`).
    "seq2seq_dates": {
        "batch": 256,
        "source_length": 8,
        "vocabulary": 236,
        "target_vocabulary": 136,
        "units": 64,
    },
    # Issue 42: a MovieLens-100k-shaped stream in time order, one fit per
    # chunk (`benchmarks.growable.movielens_stream`).
    "movielens_stream": {
        "users": 943,
        "items": 1682,
        "interactions": 100_000,
        "chunks": 20,
        "batch": 250,
        "dim": 32,
        "initial_capacity": 16,
        "pairs": 3,
    },
    # Issue 45: the real MovieLens-100k, in time order
    # (`benchmarks.growable.movielens_100k`; `None`: every interaction).
    "movielens_100k": {
        "interactions": None,
        "chunks": 20,
        "batch": 250,
        "dim": 32,
        "initial_capacity": 16,
        "pairs": 3,
    },
    # Issue 32: GradientFlowCheck every 100 steps, a small encoder.
    # Issue 44: one `fit` epoch of `batches` dates-demo batches beside a
    # CPU hog per core, default threads against one (`benchmarks.busy`).
    "torch_busy": {
        "batch": 256,
        "source_length": 8,
        "vocabulary": 236,
        "target_vocabulary": 136,
        "units": 64,
        "batches": 4,
        "pairs": 6,
    },
    "gradient_flow": {
        "batch": 32,
        "length": 32,
        "dim": 64,
        "heads": 2,
        "layers": 1,
        "intermediate_dim": 128,
        "vocabulary": 1000,
        "classes": 2,
        "every_n_steps": 100,
    },
}
# The eager-call cases at the tutorial's sizes use "seq2seq".

# Tiny sizes for the smoke test (`--quick`): every code path, seconds each.
QUICK_SIZES = {
    "matmul": {"n": 64},
    "seq2seq": {
        "batch": 4,
        "source_length": 6,
        "target_length": 5,
        "vocabulary": 40,
        "units": 8,
    },
    "generate": {
        "batch": 4,
        "source_length": 6,
        "max_length": 4,
        "vocabulary": 40,
        "units": 8,
    },
    "bigru": {"batch": 4, "length": 6, "vocabulary": 40, "units": 8},
    "transformer": {
        "batch": 2,
        "length": 8,
        "dim": 8,
        "heads": 2,
        "layers": 1,
        "intermediate_dim": 16,
        "vocabulary": 40,
        "classes": 2,
    },
    "embedding_small": {"batch": 8, "ids": 4, "dim": 4, "rows": 100},
    "embedding_large": {"batch": 8, "ids": 4, "dim": 4, "rows": 1000},
    "eager_tiny": {
        "batch": 2,
        "source_length": 4,
        "target_length": 3,
        "vocabulary": 10,
        "units": 4,
    },
    "translate": {"units": 8},
    "export": {"units": 8, "exports": 1},
    "first_call": {"units": 8, "calls": 2},
    "import_time": {"rounds": 1},
    "shapes": {
        "units": 8,
        "batch": 2,
        "length": 4,
        "max_length": 3,
        "calls": 2,
        "values": 2,
    },
    "eager_memory": {"units": 4, "calls": 20},
    "keys": {"keys": 20_000, "distinct": 2_000},
    "eviction_1k": {"batch": 8, "ids": 4, "dim": 4, "rows": 100},
    "eviction_1m": {"batch": 8, "ids": 4, "dim": 4, "rows": 1000},
    "delta_100k": {"dim": 4, "rows": 1000},
    "delta_1m": {"dim": 4, "rows": 10_000},
    "dates": {"settings": "quick"},
    "seq2seq_dates": {
        "batch": 4,
        "source_length": 8,
        "vocabulary": 40,
        "target_vocabulary": 30,
        "units": 8,
    },
    "movielens_stream": {
        "users": 40,
        "items": 60,
        "interactions": 200,
        "chunks": 2,
        "batch": 50,
        "dim": 4,
        "initial_capacity": 16,
        "pairs": 1,
    },
    "movielens_100k": {
        "interactions": 200,
        "chunks": 2,
        "batch": 50,
        "dim": 4,
        "initial_capacity": 16,
        "pairs": 1,
    },
    "torch_busy": {
        "batch": 4,
        "source_length": 8,
        "vocabulary": 40,
        "target_vocabulary": 30,
        "units": 8,
        "batches": 1,
        "pairs": 1,
    },
    "gradient_flow": {
        "batch": 2,
        "length": 8,
        "dim": 8,
        "heads": 2,
        "layers": 1,
        "intermediate_dim": 16,
        "vocabulary": 40,
        "classes": 2,
        "every_n_steps": 3,
    },
}

# How long each case is timed (warm-up calls are not timed).
FULL_TIMING = {"warmup": 3, "min_steps": 5, "max_steps": 30, "max_seconds": 8}
QUICK_TIMING = {"warmup": 1, "min_steps": 2, "max_steps": 2, "max_seconds": 1}

_K = KERAS_BACKENDS
# KeyIndex runs on NumPy whatever the backend: measured once, in one child.
_KEYS = ("jax",)
KEYS_WORKLOAD = "KeyIndex lookup (1M keys, 100k distinct, half new)"
STREAM_WORKLOAD = "KeyIndex lookup, 512-key batches (bounded: full, evicting)"
EVICTION_WORKLOAD = "Eviction reset (rows evicted in one step)"
DELTA_WORKLOAD = "Delta export (delta() of 10% of rows; bytes in the record)"
DATES_WORKLOAD = "Dates demo: held-out exact match (opt-in)"

CASES = (
    Case("matmul_numpy", "Matmul float32", "numpy @", (NUMPY,),
         "benchmarks.matmul:numpy_matmul", "matmul"),
    Case("matmul_keras", "Matmul float32", "keras.ops.matmul", _K,
         "benchmarks.matmul:keras_matmul", "matmul"),
    Case("seq2seq_train_original", "Seq2Seq train step",
         "tutorial Translator (tf.keras)", (TF_KERAS,),
         "benchmarks.original:seq2seq_train_step", "seq2seq"),
    Case("seq2seq_train", "Seq2Seq train step", "kmodels Translator", _K,
         "benchmarks.seq2seq:train_step", "seq2seq"),
    Case("seq2seq_train_bf16", "Seq2Seq train step",
         "kmodels Translator, mixed_bfloat16", _K,
         "benchmarks.seq2seq:train_step_bf16", "seq2seq"),
    Case("seq2seq_breakdown", "Seq2Seq train step",
         "kmodels Translator, timed with its parts", _K,
         "benchmarks.seq2seq:train_breakdown", "seq2seq"),
    Case("seq2seq_train_unchecked", "Seq2Seq train step",
         "kmodels Translator, no input contracts (alternated)", _K,
         "benchmarks.seq2seq:train_step_unchecked", "seq2seq"),
    # Issue 29: the fused projection + loss on real positions only, timed
    # in alternation with the dense path in the same process.
    Case("seq2seq_train_fused", "Seq2Seq train step",
         "kmodels Translator, fused loss vs dense (alternated)", _K,
         "benchmarks.seq2seq:train_step_fused", "seq2seq"),
    Case("seq2seq_train_dates", "Seq2Seq train step, dates demo batch",
         "kmodels Translator, fused loss vs dense (alternated)", _K,
         "benchmarks.seq2seq:train_step_dates", "seq2seq_dates"),
    Case("generate_original", "Seq2Seq generation",
         "tutorial translate loop (tf.keras)", (TF_KERAS,),
         "benchmarks.original:translate", "generate", "tokens/s"),
    Case("generate", "Seq2Seq generation", "kmodels Translator.generate", _K,
         "benchmarks.seq2seq:generate", "generate", "tokens/s"),
    Case("generate_beam", "Seq2Seq generation",
         "generate, beam search (4 beams)", _K,
         "benchmarks.seq2seq:generate_beam", "generate", "tokens/s"),
    Case("generate_beam_constrained", "Seq2Seq generation",
         "beam search, no_repeat_ngram_size=3, length_penalty=1.0", _K,
         "benchmarks.seq2seq:generate_beam_constrained", "generate",
         "tokens/s"),
    Case("generate_top_k", "Seq2Seq generation",
         "generate, top-k sampling (k=10)", _K,
         "benchmarks.seq2seq:generate_top_k", "generate", "tokens/s"),
    Case("bigru_original", "BiGRU encoder train step",
         "tutorial Encoder, masked (tf.keras)", (TF_KERAS,),
         "benchmarks.original:encoder_train_step", "bigru"),
    Case("bigru_unmasked", "BiGRU encoder train step",
         "keras Bidirectional(GRU), no mask", _K,
         "benchmarks.seq2seq:bigru_unmasked", "bigru"),
    Case("bigru_masked_keras", "BiGRU encoder train step",
         "keras Bidirectional(GRU), masked", _K,
         "benchmarks.seq2seq:bigru_masked_keras", "bigru"),
    Case("bigru_masked", "BiGRU encoder train step",
         "kmodels Encoder, masked", _K,
         "benchmarks.seq2seq:bigru_masked_kmodels", "bigru"),
    Case("transformer_hub", "Transformer encoder train step",
         "keras_hub TokenAndPositionEmbedding", _K,
         "benchmarks.position:token_and_position", "transformer"),
    Case("transformer_positional", "Transformer encoder train step",
         "kmodels PositionalEmbedding", _K,
         "benchmarks.position:positional_embedding", "transformer"),
    Case("embedding_10k", "Embedding train step",
         "keras Embedding, small table", _K,
         "benchmarks.growable:keras_embedding", "embedding_small"),
    Case("growable_10k", "Embedding train step",
         "kmodels GrowableEmbedding, small table", _K,
         "benchmarks.growable:growable_embedding", "embedding_small"),
    Case("embedding_1m", "Embedding train step",
         "keras Embedding, large table", _K,
         "benchmarks.growable:keras_embedding", "embedding_large"),
    Case("growable_1m", "Embedding train step",
         "kmodels GrowableEmbedding, large table", _K,
         "benchmarks.growable:growable_embedding", "embedding_large"),
    Case("growth_event", "Embedding growth event",
         "kmodels GrowableEmbedding: fit + 1 growth", _K,
         "benchmarks.growable:growth_event", "embedding_small"),
    # Issue 42: growable / pre-sized keras Embedding, passes alternated.
    Case("movielens_stream", "MovieLens-shaped stream (synthetic, 100k)",
         "GrowableEmbedding + EmbeddingGrowth, one fit per chunk "
         "(alternated with keras Embedding)", _K,
         "benchmarks.growable:movielens_stream", "movielens_stream"),
    # Issue 45: the same passes on the real MovieLens-100k (recbole's wheel).
    Case("movielens_100k", "MovieLens-100k stream (real, 100k)",
         "GrowableEmbedding + EmbeddingGrowth, one fit per chunk "
         "(alternated with keras Embedding)", _K,
         "benchmarks.growable:movielens_100k", "movielens_100k"),
    Case("eager_call_tiny", "Seq2Seq eager call, tiny (batch 2, units 4)",
         "translator((ctx, tin)) eager", _K,
         "benchmarks.eager:eager_call", "eager_tiny"),
    Case("predict_tiny", "Seq2Seq eager call, tiny (batch 2, units 4)",
         "translator.predict_on_batch", _K,
         "benchmarks.eager:predict_on_batch", "eager_tiny"),
    Case("eager_call", "Seq2Seq eager call, tutorial sizes",
         "translator((ctx, tin)) eager", _K,
         "benchmarks.eager:eager_call", "seq2seq"),
    Case("predict", "Seq2Seq eager call, tutorial sizes",
         "translator.predict_on_batch", _K,
         "benchmarks.eager:predict_on_batch", "seq2seq"),
    Case("translate_one", "TextTranslator.translate, one sentence",
         "dates processors, units 64, every step run", _K,
         "benchmarks.eager:translate_one", "translate"),
    # Issue 44: opt-in, each export is seconds (the smoke test would add
    # about 10 s per backend); the export paths are tested in
    # backends_tests/seq2seq (export_test.py, export_in_process_test.py).
    Case("export_time", "TextTranslator.export (opt-in)",
         "dates bundle, units 64: SavedModel with translate", _K,
         "benchmarks.export:export_time", "export", opt_in=True),
    # Issue 44: opt-in, two fresh processes per backend (about 15-25 s).
    Case("first_call", "First calls in a fresh process (opt-in)",
         "dates bundle, units 64: first translate and predict_on_batch / "
         "steady, empty and warm compilation cache", _K,
         "benchmarks.first_call:first_call", "first_call", opt_in=True),
    # Issue 44: opt-in, three fresh processes per round (about 10 s each).
    Case("import_time", "Import time in a fresh process (opt-in)",
         "import kmodels.seq2seq / import keras, rotated rounds", _K,
         "benchmarks.import_time:import_time", "import_time", opt_in=True),
    # Issue 44: opt-in, several traces per backend (tens of seconds).
    Case("new_shape", "New shapes and max_length (opt-in)",
         "generate, dates translator: first call of a new batch size / "
         "length over its steady call", _K,
         "benchmarks.shapes:new_shape", "shapes", opt_in=True),
    Case("max_length_memory", "New shapes and max_length (opt-in)",
         "generate, dates translator: resident memory over 12 max_length "
         "values", _K,
         "benchmarks.shapes:max_length_memory", "shapes", opt_in=True),
    Case("eager_memory", "Eager calls, resident memory",
         "2,000 calls of each model and of translate", _K,
         "benchmarks.eager:eager_memory", "eager_memory"),
    Case("keys_int64_loop", KEYS_WORKLOAD,
         "per-key loop (before), int64 array", _KEYS,
         "benchmarks.keys:loop_int64", "keys", "keys/s"),
    Case("keys_int64", KEYS_WORKLOAD,
         "kmodels KeyIndex.lookup, int64 array", _KEYS,
         "benchmarks.keys:vectorised_int64", "keys", "keys/s"),
    Case("keys_string_loop", KEYS_WORKLOAD,
         "per-key loop (before), list of str", _KEYS,
         "benchmarks.keys:loop_string", "keys", "keys/s"),
    Case("keys_string", KEYS_WORKLOAD,
         "kmodels KeyIndex.lookup, list of str", _KEYS,
         "benchmarks.keys:vectorised_string", "keys", "keys/s"),
    Case("keys_stream", STREAM_WORKLOAD, "KeyIndex, unbounded", _KEYS,
         "benchmarks.keys:stream_unbounded", "keys", "keys/s"),
    Case("keys_stream_unlocked", STREAM_WORKLOAD,
         "KeyIndex, unbounded, 64-key batches, no lock (alternated)", _KEYS,
         "benchmarks.keys:stream_unlocked", "keys", "keys/s"),
    Case("keys_stream_lru_1k", STREAM_WORKLOAD, "KeyIndex, LRU, 1k rows",
         _KEYS, "benchmarks.keys:stream_lru_1k", "keys", "keys/s"),
    Case("keys_stream_lfu_1k", STREAM_WORKLOAD, "KeyIndex, LFU, 1k rows",
         _KEYS, "benchmarks.keys:stream_lfu_1k", "keys", "keys/s"),
    Case("keys_stream_lru_1m", STREAM_WORKLOAD, "KeyIndex, LRU, 1M rows",
         _KEYS, "benchmarks.keys:stream_lru_1m", "keys", "keys/s"),
    Case("keys_stream_lfu_1m", STREAM_WORKLOAD, "KeyIndex, LFU, 1M rows",
         _KEYS, "benchmarks.keys:stream_lfu_1m", "keys", "keys/s"),
    Case("keys_stream_ttl", STREAM_WORKLOAD,
         "KeyIndex, ttl=50 lookups (keys expire)", _KEYS,
         "benchmarks.keys:stream_ttl", "keys", "keys/s"),
    Case("eviction_reset_1k", EVICTION_WORKLOAD,
         "kmodels reset_rows, 1k-row table", _K,
         "benchmarks.growable:eviction_reset", "eviction_1k"),
    Case("eviction_reset_1m", EVICTION_WORKLOAD,
         "kmodels reset_rows, 1M-row table", _K,
         "benchmarks.growable:eviction_reset", "eviction_1m"),
    Case("delta_export_100k", DELTA_WORKLOAD,
         "kmodels GrowableEmbedding.delta, 100k-row table", _KEYS,
         "benchmarks.delta:delta_export", "delta_100k"),
    Case("delta_export_1m", DELTA_WORKLOAD,
         "kmodels GrowableEmbedding.delta, 1M-row table", _KEYS,
         "benchmarks.delta:delta_export", "delta_1m"),
    Case("gradient_flow_check", "GradientFlowCheck overhead (issue 32)",
         "fit with GradientFlowCheck(every_n_steps=100) (alternated)", _K,
         "benchmarks.gradient_flow:monitor_overhead", "gradient_flow"),
    # Issue 44: torch's threads under a CPU hog per core; torch only (the
    # thread count is torch's own setting).
    Case("torch_busy_threads", "torch on a busy machine (CPU hog per core)",
         "fit epoch: kmodels default, torch.set_num_threads(1), torch's "
         "default (alternated)", ("torch",),
         "benchmarks.busy:torch_busy_threads", "torch_busy"),
    Case("dates_float32", DATES_WORKLOAD, "float32 (the demo as shipped)",
         _K, "benchmarks.dates:dates_float32", "dates", "exact match",
         opt_in=True),
    Case("dates_bf16", DATES_WORKLOAD, "mixed_bfloat16", _K,
         "benchmarks.dates:dates_bf16", "dates", "exact match",
         opt_in=True),
)  # fmt: skip

CASES_BY_NAME = {case.name: case for case in CASES}


def sizes_for(case, quick):
    """The size dict of `case` for a full or `--quick` run."""
    return dict((QUICK_SIZES if quick else FULL_SIZES)[case.sizes])


def timing_for(quick):
    """The timing parameters for a full or `--quick` run."""
    return dict(QUICK_TIMING if quick else FULL_TIMING)
