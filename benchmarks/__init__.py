"""Backend benchmarks for kmodels: `python -m benchmarks [--quick]`.

Every workload runs on every installed Keras backend, each backend in a fresh
subprocess (the backend is fixed when Keras is imported), next to the
original tf.keras code (Keras 2 via `tf_keras`) and the machine's measured
float32 matmul throughput. See `docs/benchmarks.md`.
"""
