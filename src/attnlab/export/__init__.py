"""Model formats in and out of attnlab: Hugging Face Marian (`hf`), CTranslate2 (`ctranslate2`).

Each format lives in its own module and imports its third-party library only when called, so
`import attnlab` stays light."""
