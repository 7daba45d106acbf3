"""Text and vocabulary: corpus formats, reading documents, WordPiece tokenizers.

Stage 1 of the pipeline (``electra tokenizer``); torch-free.
"""
