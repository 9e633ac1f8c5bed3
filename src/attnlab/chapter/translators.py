"""The demo's translators after training: the book's four sentences with BLEU, attention maps, test-set
quality and which heads matter, each as the report shows it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from attnlab.analysis import analyze_heads
from attnlab.analysis.explanation import explain
from attnlab.analysis.figures import plot_importance, plot_pruning_curves
from attnlab.chapter.report import Section, format_table
from attnlab.data import BOOK_EVAL_PAIRS, load_data
from attnlab.metrics import book_bleu, corpus_bleu, corpus_chrf, group_by_source, reference_text
from attnlab.runs.alignment import save_alignment
from attnlab.runs.config import read_run_config
from attnlab.runs.layout import ALIGNMENT_FILE
from attnlab.runs.loading import load_translator
from attnlab.utils.files import write_json
from attnlab.viz.files import save_figure
from attnlab.viz.heatmaps import attention_figures
from attnlab.viz.plots import plot_loss_curve

if TYPE_CHECKING:
    from attnlab.training.state import TrainResult


@dataclass
class TrainedModel:
    name: str
    model_type: str
    preset: str
    run_dir: Path
    result: TrainResult
    seconds: float
    rows: list = field(default_factory=list)  # the four sentences: [source, translation, reference, BLEU]
    budget: float | None = None  # seconds of training the demo's clock gave it (None: the preset's own)
    threads: int | None = None  # intra-op threads it trained on


def four_sentences(trained: TrainedModel) -> list[list]:
    """The book's four sentences, translated, each with the book's BLEU (k=2) on tokens
    (`metrics.book_bleu`, the same function `attnlab evaluate` prints)."""

    translator = load_translator(trained.run_dir)
    scores = book_bleu(translator, translator.options(beam=1))  # greedy, as the book decodes
    return [[en, out, fr, round(score, 3)] for (en, fr), (_, out, score) in zip(BOOK_EVAL_PAIRS, scores)]


def draw_attention(trained: TrainedModel, sentence: str, fig_dir: Path) -> list[Path]:
    figures = attention_figures(explain(load_translator(trained.run_dir), sentence))
    return [save_figure(fig, fig_dir / f"{trained.name}_{name}", ("png", "svg"))[0] for name, fig in figures]


def evaluate_test(trained: TrainedModel, limit: int) -> list[list]:
    """Corpus BLEU / chrF of the greedy translations of (up to `limit` of) the distinct sources of the
    run's test split, each scored against all of its references."""

    translator = load_translator(trained.run_dir)
    data = load_data(read_run_config(trained.run_dir)["data"])
    test, references = group_by_source(data.test)
    test, references = test[:limit], references[:limit]
    if not test:
        return []
    t0 = time.perf_counter()
    greedy = translator.options(beam=1)  # as the book decodes
    found = translator.search([ex.src_ids for ex in test], replace(greedy, scores=False))
    hyps = [translator.tgt_vocab.decode(hs[0].tokens) for hs in found]
    seconds = time.perf_counter() - t0
    refs = [[reference_text(t, translator.tgt_vocab) for t in rs] for rs in references]
    return [
        [
            trained.name,
            len(test),
            round(corpus_bleu(hyps, refs), 1),
            round(corpus_chrf(hyps, refs), 1),
            round(len(test) / seconds, 1),
        ]
    ]


def which_heads(trained: TrainedModel, fig_dir: Path, limit: int):
    """The "Which heads matter" section: `attnlab.analysis.analyze_heads` on (up to `limit` of) the
    validation split, greedy BLEU. Also writes RUN/heads/heads.json, which `attnlab serve` shows as the
    explorer's head-importance strip. Returns the report Section; its paragraph is made from the numbers."""

    translator = load_translator(trained.run_dir)
    data = load_data(read_run_config(trained.run_dir)["data"])
    examples = (data.valid or data.test)[:limit]
    t0 = time.perf_counter()
    report = analyze_heads(translator, examples, bleu=True, beam=1, curve=True)
    seconds = time.perf_counter() - t0
    heads_dir = trained.run_dir / "heads"
    heads_dir.mkdir(exist_ok=True)
    # The checkpoint is named as the run's folder in the finished demo, not the temp folder it is built in.
    write_json(heads_dir / "heads.json", {"checkpoint": trained.name, "split": "valid", **report})
    if report["alignment"] is not None:  # the run's --align default, as `attnlab heads` saves it
        save_alignment(trained.run_dir / ALIGNMENT_FILE, report["alignment"], "valid", len(examples))
    figures = [
        save_figure(plot_importance(report), fig_dir / f"{trained.name}_head_importance", ("png", "svg"))[0],
        save_figure(plot_pruning_curves(report), fig_dir / f"{trained.name}_pruning", ("png", "svg"))[0],
    ]
    base = report["baseline"]["bleu"]
    headers = [
        "attention",
        "heads",
        "most important (|dL/dg|)",
        "worst single-head mask (BLEU)",
        "heads removable within 1 BLEU",
    ]
    rows = []
    for kind, names in report["kinds"].items():
        grad = [(v, n, h) for n in names for h, v in enumerate(report["gradient_importance"][n])]
        top = max(grad)
        masked = [(report["masked"][n][h]["bleu"], n, h) for n in names for h in range(len(report["masked"][n]))]
        worst = min(masked)
        curve = report["pruning_curves"][kind]
        ok = max(p["removed"] for p in curve if p["bleu"] >= base - 1.0)
        rows.append(
            [
                kind,
                len(grad),
                f"layer {names.index(top[1]) + 1} head {top[2] + 1} ({top[0]:.3g})",
                f"layer {names.index(worst[1]) + 1} head {worst[2] + 1}: {worst[0]:.1f} ({worst[0] - base:+.1f})",
                f"{ok} of {len(grad)}",
            ]
        )
    free = {r[0]: r[-1] for r in rows}
    paragraph = (
        f"Head analysis after Voita et al. 2019 and Michel et al. 2019 on {len(examples)} validation sentences "
        f"({seconds:.0f} s): importance is |d loss / d head gate| (gradient, all heads on); each head was also "
        f"masked alone, and heads were removed greedily, least important first, measuring greedy BLEU after each "
        f"(full model: BLEU {base:.1f}). What this model showed: "
        + "; ".join(f"{k}: {v} heads can go before BLEU falls more than 1 point" for k, v in free.items())
        + ". These are measurements of this small model on few sentences (BLEU on so few is noisy); they need "
        "not match the papers' findings on large WMT models. `attnlab serve` shows these importances beside "
        "the heatmaps and lets you switch heads off."
    )
    print(f"\n== which heads matter ({trained.name}) ==")
    print(format_table(headers, rows))
    return Section("Which heads matter", paragraph, figures=figures, tables=[(headers, rows)])


def book_sentences_section(trained: list[TrainedModel], data_note: str) -> tuple[Section, dict[str, int]]:
    """The book's four sentences through every translator (each `t.rows` filled), and how many each got right."""
    headers = ["model", "English", "translation", "reference", "BLEU (k=2)"]
    rows = []
    for t in trained:
        t.rows = four_sentences(t)
        rows += [[t.name, *r] for r in t.rows]
    print("\n== the book's four sentences ==")
    print(format_table(headers, rows))
    perfect = {t.name: sum(r[-1] == 1.0 for r in t.rows) for t in trained}
    section = Section(
        "Translating the book's four sentences",
        "Each translator's greedy translation of the four sentences the book tests, scored with the book's "
        "per-sentence BLEU (k=2) on tokens. Sentences at 1.000: "
        + ", ".join(f"{name} {n}/4" for name, n in perfect.items())
        + f". {data_note.splitlines()[0]}",
        tables=[(headers, rows)],
    )
    return section, perfect


def training_section(trained: list[TrainedModel], fig_dir: Path) -> Section:
    """Each translator's loss curve and its training table."""
    loss_figs, train_rows = [], []
    for t in trained:
        r = t.result
        if r.losses:
            fig = plot_loss_curve(r.losses, xlabel="step", title=f"{t.name} training loss")
            loss_figs.append(save_figure(fig, fig_dir / f"{t.name}_loss", ("png", "svg"))[0])
        train_rows.append(
            [
                t.name,
                t.preset,
                r.step,
                r.epoch,
                round(r.train_loss, 4) if r.train_loss is not None else "n/a",
                round(t.seconds),
                round(r.tokens_per_second),
            ]
        )
    train_headers = ["model", "preset", "steps", "epochs", "final loss", "seconds", "tokens/s"]
    return Section(
        "Training",
        "Per-token cross-entropy (padding excluded) during training of each translator, "
        "with its preset, length and throughput on this machine.",
        figures=loss_figs,
        tables=[(train_headers, train_rows)],
    )


def attention_sections(trained: list[TrainedModel], fig_dir: Path) -> list[Section]:
    """Heatmaps of every translator but the book's small Transformer on one sentence."""
    sections = []
    sentence = "i'm home ."
    for t in trained:
        if t.name == "transformer-d2l":
            continue  # the demo's Transformer is drawn; the book's small one adds nothing new
        what = (
            "the decoder's additive attention over the source at every output step"
            if t.model_type == "bahdanau"
            else "encoder self-attention, decoder self-attention and encoder–decoder attention, one row per "
            "layer and one column per head (rows are queries, columns keys)"
        )
        sections.append(
            Section(
                f"Attention of {t.name} on “{sentence}”",
                f"Heatmaps of {what}. Grey cells are keys a query may not see.",
                figures=draw_attention(t, sentence, fig_dir),
            )
        )

    return sections


def test_split_section(trained: list[TrainedModel], limit: int) -> tuple[Section | None, list[list]]:
    """The demo's Transformer on the test split: its section (None without test sources) and rows."""
    eval_rows = []
    for t in trained:
        if t.name == "transformer":
            eval_rows += evaluate_test(t, limit=limit)
    if not eval_rows:
        return None, eval_rows
    eval_headers = ["model", "test sources", "BLEU (sacreBLEU, all refs)", "chrF", "sentences/s (greedy)"]
    print("\n== test split ==")
    print(format_table(eval_headers, eval_rows))
    return (
        Section(
            "Test-set quality",
            "Corpus BLEU and chrF (sacreBLEU, detokenized text) of greedy translations of "
            "the distinct held-out English sentences (none occurs in training), each scored against every "
            "French reference it has in the split.",
            tables=[(eval_headers, eval_rows)],
        ),
        eval_rows,
    )
