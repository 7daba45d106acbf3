"""electra: pre-train text encoders with replaced token detection, fine-tune them.

The packages follow the pipeline, each importing only those before it:
``system`` (files, devices, processes) and ``config`` (typed options);
``model`` (the encoder, its checkpoints and Hugging Face interop); ``text``
(corpora and vocabularies); ``blocks`` (packed training blocks); ``pretrain``
(RTD and MLM, the training loop); ``finetune`` (task families, the paper's
recipe); ``inference`` and ``export`` (predictions, ONNX); ``experiments``
(the demo, ``compare``, reports) and ``cli`` on top.
"""

from electra import _moved

__version__ = "0.1.0"

_moved.install()
