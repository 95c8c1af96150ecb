"""The figure of merit a physicist computes from showers, as the 3D GANs are validated:
how far the generated showers' shapes are from the real ones at the same energies.

- longitudinal: the mean energy profile over depth (each normalised to 1), L1 distance;
- transverse: the mean profiles across x and across y, L1 distance;
- sampling: the relative difference of the mean fraction of the energy the cells see.

Each is a mean over a batch of showers, so mpiopt averages it over the validation set
(and over the group's shards); the figure of merit is their sum (0: the same shapes).
"""
import torch


def profiles(cells):
    """(longitudinal, transverse x, transverse y, sampling) means of showers (n, 1, x, y, z)."""
    mean = cells.mean(dim=0)[0]
    total = mean.sum()
    return (mean.sum(dim=(0, 1)) / total, mean.sum(dim=(1, 2)) / total,
            mean.sum(dim=(0, 2)) / total, total)


def figure_of_merit(real, fake) -> dict:
    rz, rx, ry, rs = profiles(real)
    fz, fx, fy, fs = profiles(fake)
    parts = {"longitudinal": (rz - fz).abs().sum(),
             "transverse": ((rx - fx).abs().sum() + (ry - fy).abs().sum()) / 2,
             "sampling": (rs - fs).abs() / rs}
    return {"fom": sum(parts.values()), **parts}
