"""``torch.tpu.optimizers``: functional optimizers (AdamW, Sgd, Muon) and
``SingleTraceTrainer``, a training step compiled into one executable."""
from .functional import AdamW, Muon, Optimizer, ParamGroup, Sgd, newton_schulz
from .trainer import SingleTraceTrainer, default_loss

__all__ = ["AdamW", "Muon", "Optimizer", "ParamGroup", "Sgd", "SingleTraceTrainer", "default_loss",
           "newton_schulz"]
