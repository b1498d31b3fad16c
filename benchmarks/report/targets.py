"""The issue's speed and memory targets, checked against one run's records:
one row per target and backend, with the measured ratio, the goal and the
verdict."""

from benchmarks import cases as cases_mod
from benchmarks.report.metrics import index
from benchmarks.report.metrics import peak_gflops


def _ms(table, case, backend):
    record = table.get((case, backend))
    if record and record.get("status") == "ok":
        return record["median_ms"]
    return None


def _contracts_on_ms(table, backend):
    """The checked steps timed in alternation with the unchecked case."""
    if _ms(table, "seq2seq_train_unchecked", backend) is None:
        return None
    return table[("seq2seq_train_unchecked", backend)].get("contracts_on_ms")


def _hub_alternated_ms(table, backend):
    """The keras-hub model's median timed in alternation with the
    PositionalEmbedding case (results before it: the case of its own)."""
    record = table.get(("transformer_positional", backend)) or {}
    if record.get("hub_alternated_ms") is not None:
        return record["hub_alternated_ms"]
    return _ms(table, "transformer_hub", backend)


def _alternated_ms(table, case, backend, partner, key):
    """The `partner` case's median timed in alternation with `case` (its
    record's `key`); results before it: the partner case of its own."""
    record = table.get((case, backend)) or {}
    if record.get(key) is not None:
        return record[key]
    return _ms(table, partner, backend)


def _speedup(table, backend):
    """`(original / kmodels Seq2Seq train step, note)`: issue 48's median
    of alternated process pairs (`python -m benchmarks --pairs N`) where
    the run has them, else the ratio of the two cases' medians, measured
    in different processes minutes apart."""
    record = table.get(("seq2seq_train", backend)) or {}
    if record.get("original_speedup") is not None:
        n = sum(1 for r, c in record["original_pairs"] if r and c)
        return record["original_speedup"], (
            f"median of {n} alternated process pairs "
            f"({record['original_speedup_min']:.2f}-"
            f"{record['original_speedup_max']:.2f})"
        )
    original = _ms(table, "seq2seq_train_original", cases_mod.TF_KERAS)
    value = _ratio(original, _ms(table, "seq2seq_train", backend))
    note = "" if value is None else "medians of two processes, not paired"
    return value, note


def _target(name, backend, value, goal, better, binding=True, note=""):
    """One target row. `better` is ">=" (higher is better) or "<="."""
    if value is None:
        met = "n/a"
    elif not binding:
        met = "info"
    elif better == ">=":
        met = "yes" if value >= goal else "no"
    else:
        met = "yes" if value <= goal else "no"
    return {
        "target": name,
        "backend": backend,
        "value": value,
        "goal": f"{better} {goal:g}" if goal is not None else "",
        "met": met,
        "note": note,
    }


def _ratio(numerator, denominator):
    if numerator is None or denominator is None or denominator == 0:
        return None
    return numerator / denominator


def evaluate_targets(results, backends=cases_mod.KERAS_BACKENDS):
    """The issue's targets as rows `{target, backend, value, goal, met,
    note}`; `met` is "yes", "no", "n/a" (not measured) or "info" (a ratio
    shown for comparison where the issue sets no target)."""
    table = index(results)
    rows = []
    speedups = {b: _speedup(table, b) for b in backends}
    measured = {b: v for b, (v, _) in speedups.items() if v is not None}
    best = max(measured, key=measured.get) if measured else None
    rows.append(
        _target(
            "Seq2Seq train: best speed-up vs original",
            best or "-",
            measured.get(best),
            2.0,
            ">=",
            note=speedups[best][1] if best else "",
        )
    )
    for b in backends:
        rows.append(
            _target(
                "Seq2Seq train: speed-up vs original",
                b,
                speedups[b][0],
                1.3,
                ">=",
                note=speedups[b][1],
            )
        )
    for b in backends:
        rows.append(
            _target(
                "Seq2Seq train: input contracts on / off time",
                b,
                _ratio(
                    _contracts_on_ms(table, b),
                    _ms(table, "seq2seq_train_unchecked", b),
                ),
                1.05,
                "<=",
            )
        )
    peak = peak_gflops(results)
    best_gflops = None
    if best is not None:
        best_gflops = table[("seq2seq_train", best)].get("gflops")
    rows.append(
        _target(
            "Seq2Seq train: best GFLOP/s / matmul peak",
            best or "-",
            _ratio(best_gflops, peak),
            0.5,
            ">=",
        )
    )
    rows.append(_matmul_floor_target(table, backends))
    for b in backends:
        rows.append(
            _target(
                "BiGRU: masked (kmodels) / unmasked time",
                b,
                _ratio(
                    _ms(table, "bigru_masked", b),
                    _ms(table, "bigru_unmasked", b),
                ),
                1.1,
                "<=",
            )
        )
    original_tps = table.get(("generate_original", cases_mod.TF_KERAS), {})
    for b in backends:
        tps = table.get(("generate", b), {}).get("tokens_per_s")
        rows.append(
            _target(
                "Generation: tokens/s vs original loop",
                b,
                _ratio(tps, original_tps.get("tokens_per_s")),
                5.0,
                ">=",
                note="torch: the native greedy loop" if b == "torch" else "",
            )
        )
    for b in backends:
        rows.append(
            _target(
                "Generation: beam search (4 beams) / greedy time",
                b,
                _ratio(
                    _ms(table, "generate_beam", b),
                    _alternated_ms(
                        table,
                        "generate_beam",
                        b,
                        "generate",
                        "greedy_alternated_ms",
                    ),
                ),
                # Issue 29 (was 6.0): TensorFlow and JAX run kmodels' own
                # beam loop (`kmodels.seq2seq.beam_search`), torch its
                # native loop.
                3.0,
                "<=",
            )
        )
    # Issue 29: sampling as cheap as greedy decoding (torch: the native
    # sampling loop, `kmodels.backend.decoding.sampling_loop`).
    for b in backends:
        rows.append(
            _target(
                "Generation: top-k (k=10) / greedy time",
                b,
                _ratio(
                    _ms(table, "generate_top_k", b),
                    _alternated_ms(
                        table,
                        "generate_top_k",
                        b,
                        "generate",
                        "greedy_alternated_ms",
                    ),
                ),
                1.2,
                "<=",
                note="torch: the native sampling loop" if b == "torch" else "",
            )
        )
    for b in backends:
        rows.append(
            _target(
                "Generation: beam + no-repeat 3 + length penalty / beam time",
                b,
                _ratio(
                    _ms(table, "generate_beam_constrained", b),
                    _alternated_ms(
                        table,
                        "generate_beam_constrained",
                        b,
                        "generate_beam",
                        "beam_alternated_ms",
                    ),
                ),
                1.3,
                "<=",
            )
        )
    for b in backends:
        rows.append(
            _target(
                "fit with GradientFlowCheck(every_n_steps=100) / without",
                b,
                table.get(("gradient_flow_check", b), {}).get("overhead_ratio"),
                1.1,
                "<=",
            )
        )
    for b in backends:
        rows.append(
            _target(
                "PositionalEmbedding / TokenAndPosition time",
                b,
                _ratio(
                    _ms(table, "transformer_positional", b),
                    _hub_alternated_ms(table, b),
                ),
                1.05,
                "<=",
            )
        )
    for b in backends:
        rows.append(
            _target(
                "Growable: 1M rows / 10k rows time",
                b,
                _ratio(
                    _ms(table, "growable_1m", b), _ms(table, "growable_10k", b)
                ),
                1.5,
                "<=",
            )
        )
    for b in backends:
        rows.append(
            _target(
                "Growable / keras Embedding time, 10k",
                b,
                _ratio(
                    _ms(table, "growable_10k", b),
                    _ms(table, "embedding_10k", b),
                ),
                1.0,
                "<=",
            )
        )
    for b in backends:
        rows.append(
            _target(
                "keras Embedding: 1M / 10k rows time",
                b,
                _ratio(
                    _ms(table, "embedding_1m", b),
                    _ms(table, "embedding_10k", b),
                ),
                None,
                "<=",
                binding=False,
                note="reference: dense gradient and Adam update",
            )
        )
    for eager, predict, sizes in (
        ("eager_call_tiny", "predict_tiny", "tiny"),
        ("eager_call", "predict", "tutorial sizes"),
    ):
        for b in backends:
            rows.append(
                _target(
                    f"Eager call / predict_on_batch time, {sizes}",
                    b,
                    _ratio(_ms(table, eager, b), _ms(table, predict, b)),
                    3.0,
                    "<=",
                )
            )
    for b in backends:
        rows.append(
            _target(
                "TextTranslator.translate, one sentence (ms)",
                b,
                _ms(table, "translate_one", b),
                10.0,
                "<=",
            )
        )
    for b in backends:
        record = table.get(("eager_memory", b)) or {}
        rows.append(
            _target(
                "Resident memory growth over the eager calls (MB)",
                b,
                record.get("rss_growth_mb"),
                20.0,
                "<=",
                note="the largest of the six (Encoder, Decoder, "
                "CrossAttention, Autoencoder, Translator, translate)",
            )
        )
    rows += _keys_targets(table, backends)
    rows += _mixed_precision_targets(table, backends)
    rows += _growth_targets(table, backends)
    rows += _busy_targets(table, backends)
    rows += _export_targets(table, backends)
    rows += _first_call_targets(table, backends)
    rows += _import_targets(table, backends)
    rows += _shape_targets(table, backends)
    return rows


# Issue 44 (item 2): after warm-up, the first `generate` of a new batch size
# or source length at most this many times a repeat call of its own shape;
# 12 new `max_length` values keep at most this many MB resident.
NEW_SHAPE_GOAL = 3.0
MAX_LENGTH_MEMORY_GOAL_MB = 30.0


def _shape_targets(table, backends):
    """Issue 44: `new_batch_ratio` and `new_length_ratio` of the opt-in
    `new_shape` case and `rss_growth_mb` of `max_length_memory`, binding
    on every backend."""
    everywhere = tuple(backends)

    def ms(key):
        def note(backend, record):
            if not record:
                return ""
            return (
                f"first {record[key + '_ms'] / 1e3:.2f} s, steady "
                f"{record[key + '_steady_ms']:.1f} ms"
            )

        return note

    rows = []
    for key, what in (("new_batch", "batch size"), ("new_length", "length")):
        rows += _binding_on(
            table,
            backends,
            "new_shape",
            f"generate, first call of a new {what} / its steady call",
            NEW_SHAPE_GOAL,
            everywhere,
            lambda record, key=key: record[key + "_ratio"],
            ms(key),
        )
    rows += _binding_on(
        table,
        backends,
        "max_length_memory",
        "generate, resident memory over 12 max_length values (MB)",
        MAX_LENGTH_MEMORY_GOAL_MB,
        everywhere,
        lambda record: record.get("rss_growth_mb"),
        lambda backend, record: (
            f"first calls median {record['median_ms'] / 1e3:.2f} s"
            if record
            else ""
        ),
    )
    return rows


# Issue 44 (item 1): `import kmodels.seq2seq` at most this many times
# `import keras` (ratio of medians, fresh processes) on JAX and torch.
IMPORT_GOAL = 1.3


def _import_targets(table, backends):
    """Issue 44: `seq2seq_ratio` of the opt-in `import_time` case; binding
    on JAX and torch (TensorFlow's Keras imports TensorFlow anyway). The
    note gives `import kmodels`'s ratio and whether the import loaded
    TensorFlow or keras-hub."""

    def note(backend, record):
        if not record:
            return ""
        loaded = [
            name
            for name, key in (
                ("TensorFlow", "seq2seq_loads_tensorflow"),
                ("keras-hub", "seq2seq_loads_keras_hub"),
            )
            if record[key]
        ]
        return (
            f"import kmodels {record['kmodels_ratio']:.2f}x; loads "
            f"{' and '.join(loaded) or 'neither TensorFlow nor keras-hub'}"
        )

    return _binding_on(
        table,
        backends,
        "import_time",
        "import kmodels.seq2seq / import keras, fresh process",
        IMPORT_GOAL,
        ("jax", "torch"),
        lambda record: record["seq2seq_ratio"],
        note,
    )


# Issue 44 (item 3): a second process' first `translate` (compilation cache
# filled by the first) at most this many times its steady call, on JAX.
FIRST_CALL_GOAL = 3.0


def _first_call_targets(table, backends):
    """Issue 44: `translate_warm_first_ratio` of the opt-in `first_call`
    case; binding on JAX (the backend with a persistent compilation
    cache), for information elsewhere. The note gives the fresh process'
    ratio and `predict_on_batch`'s."""

    def note(record):
        return (
            f"fresh process {record['translate_first_ratio']:.0f}x; "
            f"predict_on_batch fresh {record['predict_first_ratio']:.0f}x, "
            f"warm {record['predict_warm_first_ratio']:.0f}x"
        )

    return _binding_on(
        table,
        backends,
        "first_call",
        "First translate / steady, second process (warm cache)",
        FIRST_CALL_GOAL,
        ("jax",),
        lambda record: record["translate_warm_first_ratio"],
        lambda backend, record: note(record) if record else "",
    )


# Issue 44: `TextTranslator.export` of the dates bundle on the TensorFlow
# backend (written in the calling process) takes at most this many seconds.
EXPORT_GOAL_S = 5.0


def _export_targets(table, backends):
    """Issue 44: the median export of the opt-in `export_time` case, in
    seconds; binding on TensorFlow, for information on JAX and torch (a
    TensorFlow worker process writes it there)."""

    def note(backend, record):
        where = (
            "in this process"
            if backend == "tensorflow"
            else ("TensorFlow worker")
        )
        if not record:
            return where
        return (
            f"{where}; median of {record['steps']}, first export "
            f"{record['first_call_ms'] / 1e3:.1f} s"
        )

    return _binding_on(
        table,
        backends,
        "export_time",
        "TextTranslator.export, dates bundle (s)",
        EXPORT_GOAL_S,
        ("tensorflow",),
        lambda record: record["median_ms"] / 1e3,
        note,
    )


def _binding_on(table, backends, case, name, goal, binding, value, note):
    """A `<= goal` row per backend for `case`: binding on the backends
    `binding` (a tuple), for information on the others. `value(record)` and
    `note(backend, record)` read an "ok" record; `note` gets `None` for a
    case not measured."""
    rows = []
    for b in backends:
        record = table.get((case, b)) or {}
        ok = record.get("status") == "ok"
        rows.append(
            _target(
                name,
                b,
                value(record) if ok else None,
                goal,
                "<=",
                binding=b in binding,
                note=note(b, record if ok else None),
            )
        )
    return rows


# Issue 44: beside a CPU hog per core, a torch `fit` epoch with kmodels'
# default thread count at most this many times one with one thread.
BUSY_THREADS_GOAL = 1.5


def _busy_targets(table, backends):
    """Issue 44: `thread_ratio` of the `torch_busy_threads` case (kmodels'
    default / `torch.set_num_threads(1)`, median of rounds alternated in
    one process), and for the record torch's own default count /
    one thread (`torch_default_ratio`, the code before the issue)."""
    if "torch" not in backends:
        return []
    record = table.get(("torch_busy_threads", "torch")) or {}
    ok = record.get("status") == "ok"
    spread = ""
    if ok:
        spread = (
            f"median of {len(record['rounds'])} rounds, "
            f"{record['thread_ratio_min']:.2f}-"
            f"{record['thread_ratio_max']:.2f}"
        )
    return [
        _target(
            "torch under a CPU hog per core: default / one thread",
            "torch",
            record.get("thread_ratio") if ok else None,
            BUSY_THREADS_GOAL,
            "<=",
            note=spread,
        ),
        _target(
            "torch under a CPU hog per core: torch's default / one thread",
            "torch",
            record.get("torch_default_ratio") if ok else None,
            None,
            "<=",
            binding=False,
            note="kmodels' choice of threads off (before issue 44)",
        ),
    ]


# Issue 29: a growth event inside `fit` costs at most this above a step.
GROWTH_GOAL_MS = 200.0


def _growth_targets(table, backends):
    """`growth_cost_ms` of the `growth_event` case (the growth fits'
    median minus the steady fits'), on every backend."""
    rows = []
    for b in backends:
        record = table.get(("growth_event", b)) or {}
        value = record.get("growth_cost_ms")
        if record.get("status") != "ok":
            value = None
        note = "growth fit minus steady fit, median of 3 growths"
        if record.get("recompilations") is not None:
            note += f"; {record['recompilations']} of them recompiled"
        rows.append(
            _target(
                "Embedding growth event: cost above a step (ms)",
                b,
                value,
                GROWTH_GOAL_MS,
                "<=",
                note=note,
            )
        )
    rows += _reserve_targets(table, backends)
    return rows


# Issue 42: a growth within the reserve costs at most this many plain
# steps, and a pass over the MovieLens-shaped stream at most this many
# plain `keras.layers.Embedding` passes, growth included.
RESERVE_STEP_GOAL = 1.1
STREAM_PASS_GOAL = 1.2


def _reserve_targets(table, backends):
    """Issue 42: `reserve_step_ratio` of the `growth_event` case and
    `pass_ratio` of the `movielens_stream` case, each the median of
    ratios measured side by side in one process."""
    rows = []
    for b in backends:
        record = table.get(("growth_event", b)) or {}
        ok = record.get("status") == "ok"
        note = ""
        if ok and record.get("reserve_growths") is not None:
            note = (
                f"median of {record['reserve_growths']} growths, each fit "
                "alternated with a plain one; "
                f"{record.get('reserve_recompiled')} recompiled"
            )
        rows.append(
            _target(
                "Embedding growth within the reserve / plain step",
                b,
                record.get("reserve_step_ratio") if ok else None,
                RESERVE_STEP_GOAL,
                "<=",
                note=note,
            )
        )
    streams = (
        ("movielens_stream", "MovieLens-shaped stream"),
        # Issue 45: the same passes on the real MovieLens-100k.
        ("movielens_100k", "MovieLens-100k (real)"),
    )
    for case, label in streams:
        for b in backends:
            record = table.get((case, b)) or {}
            ok = record.get("status") == "ok"
            note = "passes alternated in one process, median of pair ratios"
            if ok and record.get("compilations") is not None:
                note += (
                    f"; XLA compilations {record['compilations']} vs "
                    f"{record.get('plain_compilations')}"
                )
            rows.append(
                _target(
                    f"{label}: growable / keras Embedding pass",
                    b,
                    record.get("pass_ratio") if ok else None,
                    STREAM_PASS_GOAL,
                    "<=",
                    note=note,
                )
            )
    return rows


# Issue 29: the best backend's Seq2Seq train step within this factor of its
# matmul floor (`benchmarks.matmul.matmul_floor`).
MATMUL_FLOOR_GOAL = 1.25


def _matmul_floor_target(table, backends):
    """Issue 29: the best backend's (the fastest) Seq2Seq train step / its
    `matmul_floor_ms`, the step's matrix products at the rates that
    backend's matmul reaches on their shapes in the same process."""
    steps = {b: _ms(table, "seq2seq_train", b) for b in backends}
    steps = {b: ms for b, ms in steps.items() if ms is not None}
    best = min(steps, key=steps.get) if steps else None
    record = table.get(("seq2seq_train", best)) or {}
    return _target(
        "Seq2Seq train: best step / its matmul floor",
        best or "-",
        _ratio(
            _ms(table, "seq2seq_train", best), record.get("matmul_floor_ms")
        ),
        MATMUL_FLOOR_GOAL,
        "<=",
        note="floor: the step's products at their shapes' measured GFLOP/s",
    )


# The held-out exact match the dates demo must reach (issue 14).
DATES_GOAL = 0.95


def _mixed_precision_targets(table, backends):
    """Issue 14: the `mixed_bfloat16` train step against the float32
    original and kmodels' own float32 step (for the record: the ratio
    depends on the CPU's bfloat16 support), and the dates demo's exact
    match under the policy (>= 0.95) next to float32's."""
    rows = []
    original = _ms(table, "seq2seq_train_original", cases_mod.TF_KERAS)
    for b in backends:
        bf16 = _ms(table, "seq2seq_train_bf16", b)
        rows.append(
            _target(
                "Seq2Seq train: mixed_bfloat16 / float32 original time",
                b,
                _ratio(bf16, original),
                None,
                "<=",
                binding=False,
                note="tutorial tf.keras step in float32",
            )
        )
        rows.append(
            _target(
                "Seq2Seq train: mixed_bfloat16 / float32 time",
                b,
                _ratio(bf16, _ms(table, "seq2seq_train", b)),
                None,
                "<=",
                binding=False,
                note="kmodels Translator, same backend",
            )
        )
    for case, binding in (("dates_bf16", True), ("dates_float32", False)):
        if not any((case, b) in table for b in backends):
            continue
        policy = "mixed_bfloat16" if case == "dates_bf16" else "float32"
        for b in backends:
            record = table.get((case, b)) or {}
            rows.append(
                _target(
                    f"Dates demo: held-out exact match, {policy}",
                    b,
                    record.get("exact_match"),
                    DATES_GOAL,
                    ">=",
                    binding=binding,
                    note="" if binding else "float32 reference",
                )
            )
    return rows


def _keys_targets(table, backends):
    """Issue 15: `KeyIndex.lookup` throughput, in millions of keys/s, and
    its speed-up over the per-key loop (for the record; no target)."""
    rows = []
    measured = cases_mod.CASES_BY_NAME["keys_int64"].backends
    for b in [b for b in backends if b in measured]:
        for dtype, goal in (("int64", 5.0), ("string", 1.0)):
            new = table.get((f"keys_{dtype}", b), {}).get("keys_per_s")
            old = table.get((f"keys_{dtype}_loop", b), {}).get("keys_per_s")
            rows.append(
                _target(
                    f"KeyIndex: M {dtype} keys/s",
                    b,
                    None if new is None else new / 1e6,
                    goal,
                    ">=",
                    note="NumPy-side: one child measures it",
                )
            )
            cpu_ms = table.get((f"keys_{dtype}", b), {}).get("cpu_ms")
            rows.append(
                _target(
                    f"KeyIndex: M {dtype} keys per CPU second",
                    b,
                    _ratio(_keys(table, f"keys_{dtype}", b), cpu_ms),
                    None,
                    ">=",
                    binding=False,
                    note="the process's CPU time: one free core",
                )
            )
            rows.append(
                _target(
                    f"KeyIndex: {dtype} keys/s / per-key loop",
                    b,
                    _ratio(new, old),
                    None,
                    ">=",
                    binding=False,
                    note="speed-up over the loop it replaced",
                )
            )
    for b in [b for b in backends if b in measured]:
        record = table.get(("keys_stream_unlocked", b)) or {}
        rows.append(
            _target(
                "KeyIndex: lock on / off time, 64-key batches",
                b,
                _ratio(
                    record.get("locked_ms"),
                    _ms(table, "keys_stream_unlocked", b),
                ),
                1.1,
                "<=",
                note="one thread; alternated in one process",
            )
        )
    return rows


def _keys(table, case, backend):
    """Thousands of keys per step of a keys case (keys per ms / 1e3 gives
    millions of keys per second), or None."""
    record = table.get((case, backend), {})
    return record["keys"] / 1e3 if record.get("keys") else None
