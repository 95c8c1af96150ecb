"""The jets CNN in PyTorch: the same network as model.py, a torch.nn.Module.

build_model returns the module only; its loss (BCEWithLogitsLoss: the last layer gives a
logit), optimizer and learning-rate schedule are named in torch.yaml, so they can be
searched like any other parameter. build_particle_model is model.py's Deep Sets network on
the jets' particle lists (particles_torch.yaml), its forward taking the inputs by name.
"""
import torch
from torch import nn


class JetCNN(nn.Module):
    """Two convolutions of `filters` and 2*filters kernels, pooling, a dense layer."""

    def __init__(self, filters: int, kernel_size: int, dense_units: int, dropout: float):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, filters, kernel_size, padding="same"), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(filters, 2 * filters, kernel_size, padding="same"), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Sequential(nn.Linear(2 * filters, dense_units), nn.ReLU(),
                                  nn.Dropout(dropout), nn.Linear(dense_units, 1))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = images.reshape(len(images), 1, 16, 16) * 20.0   # pixels: pT fractions, mostly < 0.1
        return self.head(self.features(x))


def build_model(params):
    return JetCNN(int(params["filters"]), int(params["kernel_size"]),
                  int(params["dense_units"]), float(params["dropout"]))


class DeepSets(nn.Module):
    """The same small network applied to every particle, summed over the real particles
    (the mask), joined with the jet's pT and mass. forward takes the inputs by the names
    the data section gives them: `particles` (n, length, 3), `particles_mask` (n, length)
    and `features` (n, 2)."""

    def __init__(self, dense_units: int, dropout: float):
        super().__init__()
        self.each = nn.Sequential(nn.Linear(3, dense_units), nn.ReLU(),
                                  nn.Linear(dense_units, dense_units), nn.ReLU())
        self.head = nn.Sequential(nn.Linear(dense_units + 2, dense_units), nn.ReLU(),
                                  nn.Dropout(dropout), nn.Linear(dense_units, 1))

    def forward(self, particles, particles_mask, features):
        summed = (self.each(particles) * particles_mask.unsqueeze(-1)).sum(1)
        return self.head(torch.cat([summed, features * 0.01], 1))


def build_particle_model(params):
    return DeepSets(int(params["dense_units"]), float(params["dropout"]))
