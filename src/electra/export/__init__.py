"""Shipping models: ``electra export`` (a run to Hugging Face, a model to ONNX, int8).

``from electra.export import export_cli``, the path before 0.2, still works until
0.3 (``electra.export.command``).
"""

from typing import Any


def __getattr__(name: str) -> Any:
    from electra._moved import moved_attribute

    return moved_attribute("electra.export", name)
