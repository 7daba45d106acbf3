"""electra: pre-train text encoders with replaced token detection, fine-tune them."""

__version__ = "0.1.0"
