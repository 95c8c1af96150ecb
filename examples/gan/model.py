"""A conditional 3D GAN of calorimeter showers, a miniature of the seeds' 3D GANs, in
PyTorch Lightning's contract: mpiopt trains it through its own training_step.

The generator makes a shower (the fraction of the primary energy in each of 8 x 8 x 8
cells) from noise and the primary energy; the discriminator tells real showers from
generated ones and, as the 3D GANs' auxiliary output, regresses the primary energy. The
generator is trained to fool it, to give showers whose regressed energy is the one asked
for; its showers' summed cells (the 3D GANs' "ECAL sum") are learned beside their shape.

Two optimizers, stepped by the module (manual optimization); validation_step logs the
figure of merit the physicist computes from the showers (physics.py), which the study
minimizes. A plain torch.nn.Module: with Lightning installed it may as well be a
lightning.LightningModule, trained here without a Trainer.
"""
import torch
from torch import nn
from torch.nn import functional as F

from physics import figure_of_merit

SIZE = 8
SAMPLING = 0.9      # about the fraction of the energy real showers leave in the cells


class Generator(nn.Module):
    """A shower's shape (how its energy spreads over the cells) and its total (the
    fraction of the primary energy the cells see, near the sampling fraction)."""

    def __init__(self, latent: int, width: int):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(latent + 1, width), nn.ReLU(),
                                  nn.Linear(width, width), nn.ReLU(),
                                  nn.Linear(width, SIZE ** 3 + 1))

    def forward(self, noise, energy):
        out = self.body(torch.cat([noise, energy], dim=1))
        shape = out[:, 1:].softmax(dim=1)
        total = SAMPLING * torch.exp(0.2 * torch.tanh(out[:, :1]))
        return (shape * total).reshape(-1, 1, SIZE, SIZE, SIZE)     # fractions of the energy


class Discriminator(nn.Module):
    """(real-or-generated logit, regressed energy) of a shower and its asked-for energy."""

    def __init__(self, width: int):
        super().__init__()
        self.features = nn.Sequential(nn.Flatten(), nn.Linear(SIZE ** 3, width),
                                      nn.LeakyReLU(0.2), nn.Linear(width, width),
                                      nn.LeakyReLU(0.2))
        self.real = nn.Linear(width + 1, 1)
        self.energy = nn.Linear(width, 1)

    def forward(self, cells, energy):
        f = self.features(cells * 10.0)                 # fractions are mostly below 0.1
        return self.real(torch.cat([f, energy], dim=1)), self.energy(f)


class CaloGAN(nn.Module):
    def __init__(self, latent=16, width=64, lr_g=1e-3, lr_d=1e-3, aux=1.0):
        super().__init__()
        self.automatic_optimization = False             # two optimizers: the step takes them
        self.latent, self.lr_g, self.lr_d, self.aux = latent, lr_g, lr_d, aux
        self.generator = Generator(latent, width)
        self.discriminator = Discriminator(width)

    def showers(self, energy):
        """Generated showers for the energies (n, 1) in units of 100 GeV."""
        return self.generator(torch.randn(len(energy), self.latent), energy)

    def training_step(self, batch, batch_idx):
        images, energy = batch
        real, energy = fractions(images, energy), energy.reshape(-1, 1)
        opt_g, opt_d = self.optimizers()
        fake = self.showers(energy)

        self.toggle_optimizer(opt_d)
        real_logit, real_energy = self.discriminator(real, energy)
        fake_logit, _ = self.discriminator(fake.detach(), energy)
        d_loss = (bce(real_logit, 1.0) + bce(fake_logit, 0.0)
                  + self.aux * F.mse_loss(real_energy, energy))
        opt_d.zero_grad()
        self.manual_backward(d_loss)
        opt_d.step()                                    # the group's gradients averaged here
        self.untoggle_optimizer(opt_d)

        self.toggle_optimizer(opt_g)
        fake_logit, fake_energy = self.discriminator(fake, energy)
        g_loss = bce(fake_logit, 1.0) + self.aux * F.mse_loss(fake_energy, energy)
        opt_g.zero_grad()
        self.manual_backward(g_loss)
        opt_g.step()
        self.untoggle_optimizer(opt_g)
        return g_loss

    def validation_step(self, batch, batch_idx):
        images, energy = batch
        real, energy = fractions(images, energy), energy.reshape(-1, 1)
        self.log_dict(figure_of_merit(real, self.showers(energy)))

    def configure_optimizers(self):
        return [torch.optim.Adam(self.generator.parameters(), lr=self.lr_g, betas=(0.5, 0.999)),
                torch.optim.Adam(self.discriminator.parameters(), lr=self.lr_d, betas=(0.5, 0.999))]


def fractions(images, energy):
    """Cells in GeV -> fractions of the primary energy (energy in units of 100 GeV)."""
    return (images / (100.0 * energy.reshape(-1, 1, 1, 1))).unsqueeze(1)


def bce(logits, target: float):
    return F.binary_cross_entropy_with_logits(logits, torch.full_like(logits, target))


def build_model(params):
    return CaloGAN(latent=int(params["latent"]), width=int(params["width"]),
                   lr_g=float(params["lr_g"]), lr_d=float(params["lr_d"]),
                   aux=float(params.get("aux", 1.0)))
