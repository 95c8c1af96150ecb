"""scikit-learn's handwritten digits (1797 8x8 images, shipped with scikit-learn)."""
import numpy as np


def load():
    """Pixels scaled to [0, 1] as float32 features, digit classes as integer labels."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    return (digits.data / 16.0).astype(np.float32), digits.target.astype(np.int64)
