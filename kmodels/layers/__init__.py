"""Keras layers of kmodels (each a plain `keras.layers.Layer`)."""
