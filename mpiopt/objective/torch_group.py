"""A ready torch.distributed process group for a function objective's group, so the
DistributedDataParallel code a torchrun job runs works unchanged inside a trial:

    import mpiopt
    from torch.nn.parallel import DistributedDataParallel

    def objective(params, comm):
        with mpiopt.torch_group(comm) as group:
            model = DistributedDataParallel(Net().to(group.device))
            optimizer = torch.optim.Adam(model.parameters(), lr=params["lr"])
            start = group.restore(model=model, optimizer=optimizer)   # 0, or its checkpoint's epoch
            for epoch in range(start + 1, 11):
                loss = one_epoch(model, optimizer, group.rank, group.size)
                group.report(epoch, loss)      # Pruned on every rank when the pruner says stop
                group.save(epoch, model=model, optimizer=optimizer)
        return loss

- The group is made per trial from the group's communicator
  (mpiopt.training.frameworks.torch_process_group: a TCP store per group, so two groups
  running at once never meet; NCCL where the rank has a GPU, gloo elsewhere). As the
  block ends, however it ends, the group is destroyed and the store closed: the next
  trial makes its own.
- device: the rank's GPU (one per rank, by node-local rank: mpiopt.training.threads),
  else the CPU, with the rank's intra-op threads pinned as for any trained model.
- report: the group's first rank reports (mpiopt records one value per epoch) and every
  rank gets the coordinator's answer together, so a prune, the trial's deadline or a
  cancel raises on all ranks at the same step and none is left inside a collective.
- save and restore: one file per trial in the study's artifact store,
  `checkpoints/trial-N/torch.pt`, the objects' state_dicts and the epoch, written by the
  first rank every `training.checkpoint_every` epochs (whole or not at all) and read back
  by it for every rank. A trial that runs again after a kill continues after that epoch,
  and its record says so (a "resume" mark, as a resumed fold's); the coordinator deletes
  the folder once the trial is finished. Report an epoch, then save it: a kill between
  the two runs that epoch again, and its report replaces the first.

Why simpler than Optuna's TorchDistributedTrial and Ray Train's TorchTrainer: the group's
ranks already run the same function with the same parameters (mpiopt sends the trial to
each), so nothing is broadcast per suggestion, and no worker is started: the ranks are
there. Outside a trial (the function called by hand under mpirun) the group works the
same, report only answers "go on" and nothing is saved.
"""
from __future__ import annotations

import io
import os
import pickle
from contextlib import contextmanager

from mpiopt.errors import ArtifactStoreError, Pruned, answer_from_word, answer_word
from mpiopt.objective.current import current
from mpiopt.training.frameworks.torch_process_group import TIMEOUT_S, ProcessGroup

CHECKPOINT = "torch.pt"


@contextmanager
def torch_group(comm, timeout: float = TIMEOUT_S):
    """The trial's process group over `comm` (a TorchGroup) while the block runs."""
    group = TorchGroup(comm, timeout)
    try:
        yield group
    finally:
        group.close()


class TorchGroup(ProcessGroup):
    """torch.distributed's default process group over a group's communicator, with the
    rank's device and the trial's report and checkpoints."""

    # ------------------------------------------------------------------ reports
    def report(self, epoch: int, value: float) -> None:
        """The epoch's value to the study, from the group's first rank; raises Pruned (or
        the trial's deadline, a cancel) on every rank together when the answer is stop."""
        word = self._answer(epoch, value) if self.rank == 0 else None
        word = self.comm.bcast(word, root=0)
        if isinstance(word, dict):               # report()'s own refusal, on every rank
            raise (TypeError if word["kind"] == "TypeError" else ValueError)(word["error"])
        answer = answer_from_word(word, epoch, value)
        if answer is False:
            raise Pruned(epoch, value)
        if answer is not True:
            raise answer

    def _answer(self, epoch, value):
        from mpiopt.objective.evaluate import report_args

        trial = current()
        if trial is None or trial.report is None:
            return True
        try:
            return answer_word(trial.report(*report_args(epoch, value)))
        except (TypeError, ValueError) as exc:
            return {"kind": type(exc).__name__, "error": str(exc)}

    # ------------------------------------------------------------------ checkpoints
    def save(self, epoch: int, **objects) -> bool:
        """A checkpoint after `epoch` of the objects' state_dicts (a model, its optimizer,
        a schedule, a GradScaler: anything with state_dict()), every
        training.checkpoint_every epochs; call it on every rank. Returns whether one was
        written. A write that fails stops the study in order (ArtifactStoreError on every
        rank: the trial runs again on resume), as the trainer's."""
        trial = current()
        if trial is None or trial.checkpoints is None or int(epoch) % trial.every:
            return False
        path, error = trial.checkpoints / CHECKPOINT, None
        if self.rank == 0:
            try:
                _write(path, int(epoch), {name: o.state_dict() for name, o in objects.items()})
            except OSError as exc:
                error = f"storage.artifacts: cannot write {path}: {exc.strerror or exc}"
        errors = [e for e in self.comm.allgather(error) if e]
        if errors:
            raise ArtifactStoreError(errors[0])
        return True

    def restore(self, **objects) -> int:
        """The epoch of the trial's last checkpoint, each object's state loaded from it on
        every rank; 0 where there is none (a first run, an unreadable file, no artifact
        store) and the objects are left as they are."""
        trial = current()
        data = None
        if self.rank == 0 and trial is not None and trial.checkpoints is not None:
            path = trial.checkpoints / CHECKPOINT
            data = path.read_bytes() if path.is_file() else None
        saved = _read(self.comm.bcast(data, root=0))
        if saved is None:
            return 0
        missing = sorted(set(objects) - set(saved["state"]))
        if missing:
            raise ValueError(f"torch_group.restore: the trial's checkpoint holds no {missing[0]!r} "
                             f"(it holds {', '.join(sorted(saved['state'])) or 'nothing'}): "
                             "save and restore the same objects")
        for name, o in objects.items():
            o.load_state_dict(saved["state"][name])
        epoch = int(saved["epoch"])
        if trial is not None:
            now = trial.since_start()
            trial.spans.append({"kind": "resume", "fold": 0, "epoch": epoch, "start": now,
                                "end": now})
        return epoch


def _write(path, epoch: int, state: dict) -> None:
    """torch.save of {"epoch", "state"}, whole or not at all (a temporary name, synced,
    then renamed)."""
    import torch

    from mpiopt.artifacts import atomic_path

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = atomic_path(path)
    try:
        with open(tmp, "wb") as f:
            torch.save({"epoch": epoch, "state": state}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _read(data: bytes | None) -> dict | None:
    """The checkpoint in `data` (torch.load with weights_only: no code runs), or None."""
    if data is None:
        return None
    import torch

    try:
        saved = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except (RuntimeError, ValueError, EOFError, pickle.UnpicklingError):
        return None
    return saved if isinstance(saved, dict) and {"epoch", "state"} <= set(saved) else None
