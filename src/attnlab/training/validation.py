"""Validation during training: teacher-forced loss and corpus BLEU of the model's own translations."""

from __future__ import annotations

import torch

from attnlab.data import iterate_batches
from attnlab.decoding.translator import Translator
from attnlab.inference.precision import decoding_model
from attnlab.metrics import corpus_bleu, reference_text
from attnlab.training.loss import sequence_loss


@torch.no_grad()
def validation_scores(model, data, examples, cfg, device, autocast, batching: dict) -> dict:
    """{'valid_loss', 'valid_bleu'} of `model` on `examples` ({} when there are none).

    Args:
        data: the TranslationData (vocabularies).
        cfg: the TrainConfig (eval_limit, eval_beam, num_steps).
        autocast: a callable giving the training's autocast context.
        batching: the training's batch options (batch_tokens / batch_size / num_steps).
    """

    if not examples:
        return {}
    model.eval()
    total, count = 0.0, 0
    for batch in iterate_batches(examples, data.src_vocab, data.tgt_vocab, shuffle=False, **batching):
        batch = batch.to(device)
        with autocast():
            logits = model(batch.src, batch.tgt_in, batch.src_valid_lens)
        loss, n = sequence_loss(logits, batch.tgt_out, batch.tgt_valid_lens)
        total, count = total + loss.item(), count + int(n)
    subset = examples if cfg.eval_limit is None else examples[: cfg.eval_limit]
    model, choice = decoding_model(model, "fp32", device)  # on the CPU: its linear layers packed, in place
    translator = Translator(
        model, data.src_vocab, data.tgt_vocab, config={}, device=device, max_len=cfg.num_steps, precision=choice
    )
    found = translator.search([ex.src_ids for ex in subset], translator.options(beam=cfg.eval_beam, scores=False))
    hyps = [data.tgt_vocab.decode(hs[0].tokens) for hs in found]
    refs = [reference_text(ex.tgt_text, data.tgt_vocab) for ex in subset]
    return {"valid_loss": total / max(count, 1), "valid_bleu": corpus_bleu(hyps, refs)}
