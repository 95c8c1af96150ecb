"""Name the device a trial trained on, for its record ("gpu: NVIDIA H100 80GB HBM3").

Why: a study on a mixed cluster compares trials that ran on different hardware; the
record says which. A framework is asked only when the process already imported it
(TensorFlow for a Keras objective, torch for a torch one: the GPU the rank took,
mpiopt.training.frameworks.torch_device): a plain function's trials say the CPU, and no
rank pays a framework's start-up to learn a name.
"""
from __future__ import annotations

import functools
import os
import platform
import sys


def describe_device() -> str:
    """The GPU this process trains on if TensorFlow or torch sees one, else the CPU model."""
    gpu = _gpu_name() if "tensorflow" in sys.modules else None
    if gpu is None and "torch" in sys.modules:
        gpu = _torch_gpu_name()
    return f"gpu: {gpu}" if gpu else f"cpu: {cpu_model()}"


def _torch_gpu_name() -> str | None:
    """The name of torch's current CUDA device (the rank's own), or None without one."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        return torch.cuda.get_device_name(torch.cuda.current_device())
    except Exception:        # a broken driver must not fail the trial that just finished
        return None


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    """/proc/cpuinfo's model name on Linux; the platform's word elsewhere."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


@functools.lru_cache(maxsize=1)
def _gpu_name() -> str | None:
    try:
        import tensorflow as tf

        gpus = tf.config.list_physical_devices("GPU")
        if not gpus:
            return None
        details = tf.config.experimental.get_device_details(gpus[0])
        name = details.get("device_name") or gpus[0].name
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        return name if len(gpus) == 1 or visible else f"{name} (x{len(gpus)})"
    except Exception:        # a broken driver must not fail the trial that just finished
        return None
