"""Examples of kmodels: each uses only the public API and runs on its own.

From the repository root (after `pip install ".[all]"`):

    python -m examples                          # every example, every backend
    python -m examples.seq2seq_dates [--quick]  # the dates translator
    python -m examples.position_embedding [--quick]
    python -m examples.growing_recommender [--quick]
"""
