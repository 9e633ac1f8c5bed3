"""Source sentences as the token strings exported models take."""

from __future__ import annotations


def source_tokens(src_vocab, sentence: str) -> list[str]:
    """`sentence` as the token strings CTranslate2 takes: attnlab's tokenization, unknown words as <unk>,
    without the <eos> (the exported model appends it).

    Examples:
        >>> from attnlab.data import Vocab
        >>> vocab = Vocab.from_counts({"he's": 2, "calm": 2, ".": 2}, min_freq=1)
        >>> source_tokens(vocab, "he's calm , really .")
        ["he's", 'calm', '<unk>', '<unk>', '.']
    """
    return list(src_vocab.to_tokens(src_vocab.encode(sentence)))


__all__ = ["source_tokens"]
