"""A dense network for scikit-learn's 8x8 handwritten digits, shaped by the hyperparameters."""


def build_model(params):
    """width units in each of depth hidden layers, with dropout; Adam at learning_rate."""
    import keras

    layers = [keras.Input((64,))]
    for _ in range(int(params["depth"])):
        layers.append(keras.layers.Dense(int(params["width"]), activation=params["activation"]))
        if params["dropout"] > 0:
            layers.append(keras.layers.Dropout(params["dropout"]))
    layers.append(keras.layers.Dense(10, activation="softmax"))
    model = keras.Sequential(layers)
    model.compile(optimizer=keras.optimizers.Adam(params["learning_rate"]),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model
