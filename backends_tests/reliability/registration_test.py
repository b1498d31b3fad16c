"""`import kmodels` is enough to load a kmodels `.keras` file (issue #16).

Keras finds a custom class only if it was registered in the process, and
it never imports a module a file names: loading a `Translator` after just
`import keras, kmodels` used to raise `TypeError: Could not locate class
'Translator'` (kmodels' subpackages load lazily). `import kmodels` now
imports the subpackages that register classes, when Keras is installed;
without Keras it imports neither Keras nor a backend. Each check runs in a
fresh Python process, the only place where "never imported" holds.
"""

import json
import os
import re
import subprocess
import sys

import keras
import numpy as np
import pytest

from kmodels.seq2seq import TextProcessor
from kmodels.seq2seq import Translator
from kmodels.seq2seq import TranslatorBackbone
from kmodels.seq2seq import TranslatorSeq2SeqLM
from kmodels.seq2seq import TranslatorSeq2SeqLMPreprocessor
from kmodels.seq2seq import masked_loss

HERE = os.path.abspath(__file__)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
MARKER = "REGISTRATION-RESULTS "
CONTEXT = np.array([[4, 5, 6, 0], [7, 8, 9, 10]])
TARGET_IN = np.array([[2, 11, 12], [2, 13, 0]])

_SCRIPT = """
import json, sys
import numpy as np
import keras
result = {}
try:
    keras.saving.load_model(sys.argv[1])
except Exception as error:
    result["before"] = f"{type(error).__name__}: {error}"
import kmodels
def registered():
    return sorted(
        name for name in sys.argv[2].split(",")
        if keras.saving.get_registered_object(name) is not None
    )
result["registered"] = registered()
result["keras_hub_imported"] = "keras_hub" in sys.modules
task = keras.saving.load_model(sys.argv[5])
result["task"] = {
    "class": type(task).__module__ + "." + type(task).__name__,
    "generate": task.generate(["hola casa", "buenos dias"]),
}
context = np.array(json.loads(sys.argv[3]))
target_in = np.array(json.loads(sys.argv[4]))
for how, load in (
    ("keras", keras.saving.load_model),
    ("kmodels", kmodels.saving.load_model),
):
    model = load(sys.argv[1])
    result[how] = {
        "class": type(model).__module__ + "." + type(model).__name__,
        "logits": keras.ops.convert_to_numpy(
            model.predict((context, target_in), verbose=0)
        ).tolist(),
    }
print(MARKER + json.dumps(result))
""".replace("MARKER", repr(MARKER))


def _task():
    """A small keras-hub task (`TranslatorSeq2SeqLM`), trained one step."""
    src, tgt = TextProcessor(6), TextProcessor(6)
    src.adapt(["hola casa", "buenos dias"])
    tgt.adapt(["hello house", "good morning"])
    task = TranslatorSeq2SeqLM(
        TranslatorBackbone(src.vocabulary_size, tgt.vocabulary_size, 4),
        TranslatorSeq2SeqLMPreprocessor(src, tgt),
    )
    task.fit(["hola casa"], ["hello house"], verbose=0)
    return task


def _registered_in_source():
    """`kmodels>Name` for every decorated class or function in kmodels/."""
    names = set()
    pattern = re.compile(
        r'@keras\.saving\.register_keras_serializable\(package="kmodels"\)'
        r"\s*\n(?:@.*\n)*\s*(?:class|def) (\w+)"
    )
    for folder, _, files in os.walk(os.path.join(ROOT, "kmodels")):
        for file in files:
            if file.endswith(".py"):
                with open(os.path.join(folder, file)) as f:
                    names.update(pattern.findall(f.read()))
    return sorted(f"kmodels>{name}" for name in names)


def _run(args, env=None):
    env = dict(os.environ, **(env or {}))
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (ROOT, env.get("PYTHONPATH")) if p
    )
    done = subprocess.run(
        [sys.executable, *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.mark.slow(reason="imports kmodels in fresh processes (13-27 s)")
@pytest.mark.backend_independent(
    reason="registration is `import kmodels` running Python decorators, the "
    "same code on every backend; a fresh process costs 13-39 s"
)
def test_import_kmodels_registers_every_class(tmp_path):
    keras.utils.set_random_seed(2)
    model = Translator(20, 20, units=4)
    model.compile(optimizer="adam", loss=masked_loss)
    expected = keras.ops.convert_to_numpy(
        model.predict((CONTEXT, TARGET_IN), verbose=0)
    )
    path = str(tmp_path / "translator.keras")
    model.save(path)
    task_path = str(tmp_path / "task.keras")
    task = _task()
    task_outputs = task.generate(["hola casa", "buenos dias"])
    task.save(task_path)
    names = _registered_in_source()
    # The source scan finds them all (a guard on the scan itself).
    assert {
        "kmodels>Translator",
        "kmodels>Autoencoder",
        "kmodels>Encoder",
        "kmodels>Decoder",
        "kmodels>CrossAttention",
        "kmodels>GrowableEmbedding",
        "kmodels>KeyIndex",
        "kmodels>PatchEmbedding",
        "kmodels>PositionalEmbedding",
    } <= set(names)
    out = _run(
        [
            "-c",
            _SCRIPT,
            path,
            ",".join(names),
            json.dumps(CONTEXT.tolist()),
            json.dumps(TARGET_IN.tolist()),
            task_path,
        ]
    )
    result = json.loads(
        [line for line in out.splitlines() if line.startswith(MARKER)][-1][
            len(MARKER) :
        ]
    )
    # Without kmodels imported, Keras cannot know the class (documented:
    # nothing kmodels can do about that).
    assert result["before"].startswith("TypeError: Could not locate class")
    assert "'Translator'" in result["before"]
    # The keras-hub task's modules import keras-hub, and TensorFlow with
    # it (2.2-2.4 s more for `import kmodels` on JAX and torch, measured
    # 2026-12-07): `import kmodels` registers stand-ins that import them
    # when a file holds a task.
    assert result["registered"] == names
    assert result["keras_hub_imported"] is False
    assert result["task"] == {
        "class": "kmodels.seq2seq.translator_seq_2_seq_lm.TranslatorSeq2SeqLM",
        "generate": task_outputs,
    }
    for how in ("keras", "kmodels"):
        assert result[how]["class"] == "kmodels.seq2seq.translator.Translator"
        np.testing.assert_array_equal(
            np.asarray(result[how]["logits"], "float32"), expected
        )


@pytest.mark.backend_independent(reason="a fresh process without Keras")
def test_import_kmodels_without_keras_imports_no_backend():
    # The `parity` tox env has NumPy only: `import kmodels` and `python -m
    # kmodels.testing.parity` must not need Keras. Keras is hidden here by
    # a `None` entry in `sys.modules` (what a missing package looks like to
    # `importlib.util.find_spec`).
    script = (
        "import sys\n"
        "sys.modules['keras'] = None\n"
        "import kmodels\n"
        "import kmodels.testing.oracle\n"
        "import kmodels.testing.parity\n"
        "heavy = ('keras', 'keras_hub', 'tensorflow', 'jax', 'torch')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy\n"
        "             and sys.modules[m] is not None))\n"
    )
    out = _run(["-c", script])
    assert out.strip().splitlines()[-1] == "[]"
