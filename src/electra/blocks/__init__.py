"""Packed training blocks: building, writing and reading them (``electra prepare``).

Stage 2 of the pipeline; torch-free (the loader converts to tensors on demand).
"""
