"""Pre-training: the recipe, the RTD and MLM objectives, the training loop, its
checkpoints, health and FLOPs, continued pre-training, and the Hugging Face export
of a run (``electra pretrain``, ``extend-vocab``, ``flops``).

Stage 3 of the pipeline.
"""
