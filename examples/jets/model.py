"""A small 2D convolutional classifier of jet images (W jets against QCD jets)."""


def build_model(params):
    """Two convolutions of `filters` and 2*filters kernels, pooling, a dense layer."""
    import keras

    return _compiled(keras.Sequential([keras.Input((16, 16, 1)), *_layers(keras, params)]),
                     params)


def build_flat_model(params):
    """The same network for flat inputs (a ROOT file's 256-float `image` branch)."""
    import keras

    return _compiled(keras.Sequential([keras.Input((256,)), keras.layers.Reshape((16, 16, 1)),
                                       *_layers(keras, params)]), params)


def build_particle_model(params, length=32):
    """A Deep Sets network on the jets' particle lists (particles.yaml): the same small
    network applied to every particle, summed over the real particles (the mask), joined
    with the jet's pT and mass. Its inputs are named as the data section makes them:
    `particles` (length, 3), `particles_mask` (length,) and `features` (2,)."""
    import keras

    particles = keras.Input((length, 3), name="particles")
    mask = keras.Input((length,), name="particles_mask")
    jet = keras.Input((2,), name="features")
    each = particles
    for _ in range(2):
        each = keras.layers.Dense(int(params["dense_units"]), activation="relu")(each)
    summed = keras.layers.Dot(axes=1)([mask, each])          # sum over the real particles
    joined = keras.layers.Concatenate()([summed, keras.layers.Rescaling(0.01)(jet)])
    hidden = keras.layers.Dense(int(params["dense_units"]), activation="relu")(joined)
    hidden = keras.layers.Dropout(params["dropout"])(hidden)
    out = keras.layers.Dense(1, activation="sigmoid")(hidden)
    return _compiled(keras.Model({"particles": particles, "particles_mask": mask,
                                  "features": jet}, out), params)


def _layers(keras, params):
    k = int(params["kernel_size"])
    f = int(params["filters"])
    return [
        keras.layers.Rescaling(20.0),  # pixels are pT fractions, mostly far below 0.1
        keras.layers.Conv2D(f, k, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(2),
        keras.layers.Conv2D(2 * f, k, padding="same", activation="relu"),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(int(params["dense_units"]), activation="relu"),
        keras.layers.Dropout(params["dropout"]),
        keras.layers.Dense(1, activation="sigmoid"),
    ]


def _compiled(model, params):
    import keras

    model.compile(optimizer=keras.optimizers.Adam(params["learning_rate"]),
                  loss="binary_crossentropy", metrics=["accuracy", keras.metrics.AUC(name="auc")])
    return model
