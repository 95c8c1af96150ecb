"""The torch losses, optimizers, schedules and metrics a spec may name, known without torch.

Why a list of our own instead of asking torch: a spec is checked on rank 0 before any
trial (a misspelt name is one line and exit 2, never a study of FAILED trials), and that
check must not import torch (seconds, and a coordinator never trains). Only classes that
fit the standard step are listed: a loss of (output, target), an optimizer whose step
needs no closure, a schedule built from the optimizer and plain arguments.
tests/test_torch_training.py checks that the installed torch has every one.

Names are matched without regard to case (`adamw` is `AdamW`); the canonical spelling is
what the resolved spec stores.
"""
from __future__ import annotations

EXTRA = "pip install 'mpiopt[torch]'"

LOSSES = ("BCELoss", "BCEWithLogitsLoss", "CrossEntropyLoss", "HingeEmbeddingLoss",
          "HuberLoss", "KLDivLoss", "L1Loss", "MSELoss", "MultiLabelMarginLoss",
          "MultiLabelSoftMarginLoss", "MultiMarginLoss", "NLLLoss", "PoissonNLLLoss",
          "SmoothL1Loss", "SoftMarginLoss")
OPTIMIZERS = ("ASGD", "Adadelta", "Adafactor", "Adagrad", "Adam", "AdamW", "Adamax", "NAdam",
              "RAdam", "RMSprop", "Rprop", "SGD")
SCHEDULERS = ("ConstantLR", "CosineAnnealingLR", "CosineAnnealingWarmRestarts", "CyclicLR",
              "ExponentialLR", "LinearLR", "MultiStepLR", "OneCycleLR", "PolynomialLR",
              "ReduceLROnPlateau", "StepLR")
# validation metrics beside the loss; each is recorded as val_NAME
METRICS = ("accuracy", "auc", "mse", "mae")
# when a schedule steps: after every epoch (torch's usual loop) or after every batch
INTERVALS = ("epoch", "step")

# the spec's training field -> the names it takes
KNOWN = {"loss": LOSSES, "optimizer": OPTIMIZERS, "lr_scheduler": SCHEDULERS}


def canonical(field: str, name) -> str | None:
    """The canonical spelling of a name for training.<field>, or None when unknown."""
    if not isinstance(name, str):
        return None
    lowered = name.strip().lower()
    return next((n for n in KNOWN[field] if n.lower() == lowered), None)


def unknown(field: str, name) -> str:
    """The one-line complaint about a name training.<field> does not know."""
    return f"unknown name {name!r}; known: {', '.join(KNOWN[field])}"


def installed() -> bool:
    """Whether torch can be imported here (found, not imported)."""
    import importlib.util

    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        return False
