"""Inference: predictions from a fine-tuned model, with PyTorch or the torch-free
ONNX runtime (``electra predict``).
"""
