"""Hugging Face Marian (OPUS-MT) models in and out of attnlab: `importer` (a MarianMTModel folder -> a run),
`exporter` (a run -> a MarianMTModel folder), sharing `config` (config.json <-> `TransformerConfig`) and
`weights` (attnlab modules <-> Marian tensor names; reading a saved weights file)."""

from .config import config_to_marian, marian_to_config
from .exporter import export_hf
from .importer import import_hf

__all__ = ["config_to_marian", "export_hf", "import_hf", "marian_to_config"]
