"""One backend's side of translator_seq_2_seq_lm_test.py's cross-backend
preset test: `python -m backends_tests.seq2seq.preset_worker FOLDER` (its
backend from `KERAS_BACKEND`) builds a task with weights drawn by NumPy
(the same on every backend), saves it as a preset in `FOLDER/<backend>`
with its greedy outputs, waits until the two other backends have saved
theirs, loads them and prints `{"backend", "outputs", "loaded": {backend:
outputs}}` as JSON.
The test's own process (the third backend) calls `main` in-process.
"""

import json
import os
import sys
import time

import keras
import keras_hub
import numpy as np

from kmodels.seq2seq import TextProcessor
from kmodels.seq2seq import TranslatorBackbone
from kmodels.seq2seq import TranslatorSeq2SeqLM
from kmodels.seq2seq import TranslatorSeq2SeqLMPreprocessor

BACKENDS = ("tensorflow", "jax", "torch")
SOURCES = ["hola casa", "buenos dias", "la casa es grande", "el perro come"]
TARGETS = ["hello house", "good morning", "the house is big", "the dog eats"]
DONE = "done.json"
TIMEOUT = 240


def _task():
    src, tgt = TextProcessor(8), TextProcessor(8)
    src.adapt(SOURCES)
    tgt.adapt(TARGETS)
    lm = TranslatorSeq2SeqLM(
        TranslatorBackbone(src.vocabulary_size, tgt.vocabulary_size, 8),
        TranslatorSeq2SeqLMPreprocessor(src, tgt),
    )
    rng = np.random.default_rng(0)
    lm.set_weights(
        [rng.uniform(-1, 1, w.shape).astype("float32") for w in lm.weights]
    )
    return lm


def _outputs(lm):
    # Ids, not strings: random weights write few [END]s, and ids tell more.
    ids = lm.preprocessor.generate_preprocess(SOURCES)
    out, _ = lm.backbone.translator.generate(ids["encoder_token_ids"], 7)
    return keras.ops.convert_to_numpy(out).tolist()


def main(folder):
    backend = keras.backend.backend()
    lm = _task()
    mine = os.path.join(folder, backend)
    lm.save_to_preset(mine)
    outputs = _outputs(lm)
    with open(os.path.join(mine, DONE), "w") as f:
        json.dump(outputs, f)
    loaded = {}
    deadline = time.monotonic() + TIMEOUT
    for other in BACKENDS:
        if other == backend:
            continue
        done = os.path.join(folder, other, DONE)
        while not os.path.exists(done):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{other} saved no preset in {folder}")
            time.sleep(0.2)
        task = keras_hub.models.Seq2SeqLM.from_preset(
            os.path.join(folder, other)
        )
        loaded[other] = _outputs(task)
    return {"backend": backend, "outputs": outputs, "loaded": loaded}


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:])))
