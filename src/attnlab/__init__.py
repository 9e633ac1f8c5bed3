"""attnlab: attention mechanisms and the Transformer, implemented correctly, fast and visibly."""

__version__ = "0.1.0"
