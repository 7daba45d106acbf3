"""The encoder itself and how it is stored: config and presets, the PyTorch model
(ELECTRA, with ConvBERT's mixed attention as an option), checkpoints that never
lose work, Hugging Face directories both ways, and the optimizer both stages use.

Importing this package does not import PyTorch (``electra.model.config`` is
torch-free); ``from electra.model import ElectraModel``, the path before 0.2,
still works until 0.3 (``electra.model.encoder``).
"""

from typing import Any


def __getattr__(name: str) -> Any:
    from electra._moved import moved_attribute

    return moved_attribute("electra.model", name)
