"""Every command that writes goes through one guard: what a user made is never overwritten or deleted,
an earlier output is replaced only with --force and only by the same kind, and a refusal comes before
any work (one line, exit 2)."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from attnlab.cli import main
from attnlab.runs.checkpoints import list_checkpoints
from attnlab.runs.layout import MARKER_FILE
from attnlab.runs.outputs import output_kind
from attnlab.runs.weights import read_weights

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ for train_helpers
from train_helpers import DATA, needs_data, tiny_run, train_argv

pytestmark = [needs_data, pytest.mark.usefixtures("one_thread")]


def _digest(folder: Path) -> dict[str, str]:
    """Every file under `folder` with the hash of its bytes: equal digests mean nothing was touched."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()
    }


@pytest.fixture(scope="module")
def run(tmp_path_factory, one_thread):
    out = tmp_path_factory.mktemp("guard") / "run"
    assert main(train_argv(out, "--checkpoint-every", "2", steps=4)) == 0
    return out


def _refused(capsys, *needles: str) -> None:
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err


def test_average_never_replaces_a_file_it_did_not_write(run, capsys):
    before = _digest(run)
    for extra in ([], ["--force"]):
        assert (
            main(["average", "--checkpoint", str(run), "--last", "2", "--out", str(run / "model.safetensors"), *extra])
            == 2
        )
        _refused(capsys, "holds a run's weights; attnlab never replaces it")
    assert _digest(run) == before
    out = run.parent / "avg.safetensors"
    assert main(["average", "--checkpoint", str(run), "--last", "2", "--out", str(out)]) == 0
    assert output_kind(out) == "averaged"
    assert main(["average", "--checkpoint", str(run), "--last", "2", "--out", str(out)]) == 2
    _refused(capsys, "--force")
    assert main(["average", "--checkpoint", str(run), "--last", "2", "--out", str(out), "--force"]) == 0


def test_export_never_replaces_its_source_or_a_users_model(run, tmp_path, capsys):
    pytest.importorskip("transformers")
    before = _digest(run)
    assert main(["export", "--checkpoint", str(run), "--format", "hf", "--out", str(run), "--force"]) == 2
    _refused(capsys, "holds an attnlab run, not a Hugging Face export")
    assert _digest(run) == before
    bert = tmp_path / "bert"
    bert.mkdir()
    (bert / "config.json").write_text('{"model_type": "bert"}')
    assert main(["export", "--checkpoint", str(run), "--format", "hf", "--out", str(bert), "--force"]) == 2
    _refused(capsys, "holds no attnlab output")
    assert (bert / "config.json").read_text() == '{"model_type": "bert"}'
    out = tmp_path / "hf"
    assert main(["export", "--checkpoint", str(run), "--format", "hf", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["export", "--checkpoint", str(run), "--format", "hf", "--out", str(out)]) == 2
    _refused(capsys, "already holds a Hugging Face export; pass --force")
    assert main(["export", "--checkpoint", str(run), "--format", "hf", "--out", str(out), "--force"]) == 0
    assert output_kind(out) == "export-hf"


def test_import_never_replaces_a_run_or_its_own_source(run, tmp_path, capsys):
    pytest.importorskip("transformers")
    pytest.importorskip("sentencepiece")
    from attnlab.testing import tiny_marian

    source = tiny_marian(tmp_path / "marian")
    capsys.readouterr()
    theirs, mine = _digest(source), _digest(run)
    assert main(["import", "hf", str(source), "--out", str(run)]) == 2
    _refused(capsys, "already holds an attnlab run", "--force")
    assert main(["import", "hf", str(source), "--out", str(source), "--force"]) == 2
    _refused(capsys, "holds no attnlab output")
    assert _digest(source) == theirs and _digest(run) == mine
    out = tmp_path / "imported"
    assert main(["import", "hf", str(source), "--out", str(out)]) == 0
    assert main(["import", "hf", str(source), "--out", str(out), "--force"]) == 0
    assert output_kind(out) == "run"


def test_demo_never_deletes_a_run_a_user_put_in_its_folder(run, tmp_path, capsys):
    folder = tmp_path / "demo"
    folder.mkdir()
    (folder / "report.html").write_text("my report")
    (folder / "transformer").symlink_to(run, target_is_directory=True)
    for extra in ([], ["--force"]):
        assert main(["demo", "--out", str(folder), "--scale", "tiny", "--data", str(DATA), *extra]) == 2
        _refused(capsys, "holds no attnlab output")
    assert (folder / "report.html").read_text() == "my report"
    assert list_checkpoints(run)


def test_attention_and_heads_replace_earlier_outputs_only_with_force(run, tmp_path, capsys):
    maps = tmp_path / "maps"
    assert main(["attention", "--checkpoint", str(run), "go .", "--out", str(maps), "--format", "png"]) == 0
    first = _digest(maps)
    assert main(["attention", "--checkpoint", str(run), "go .", "--out", str(maps), "--format", "png"]) == 2
    _refused(capsys, "already holds attention figures; pass --force")
    assert _digest(maps) == first
    assert main(["attention", "--checkpoint", str(run), "i'm home .", "--out", str(maps), "--force"]) == 0
    assert any(p.suffix == ".svg" for p in maps.iterdir())

    heads = tmp_path / "heads"
    flags = ["heads", "--checkpoint", str(run), "--out", str(heads), "--limit", "4", "--no-bleu", "--no-curve"]
    flags += ["--split", "test"]
    assert main(flags) == 0
    first = _digest(heads)
    assert main(flags) == 2
    _refused(capsys, "already holds a head analysis; pass --force")
    # A bad --prune is refused before the earlier heads.json is touched.
    assert main([*flags, "--force", "--prune", "encoder.blocks.9.attention:0"]) == 2
    capsys.readouterr()
    assert _digest(heads) == first
    assert main([*flags, "--force"]) == 0
    assert sorted(p.name for p in heads.iterdir()) == sorted(
        [MARKER_FILE, "heads.json", "importance.png", "importance.svg"]
    )


def test_prepare_replaces_an_earlier_corpus_only_with_force(tmp_path, capsys):
    corpus = tmp_path / "pairs.tsv"
    corpus.write_text("".join(f"go {i} .\tva {i} .\n" for i in range(60)), encoding="utf-8")
    out = tmp_path / "prepared"
    flags = ["prepare", "--data", str(corpus), "--src-lang", "en", "--tgt-lang", "fr", "--out", str(out)]
    flags += ["--min-freq", "1", "--workers", "1"]
    assert main(flags) == 0
    first = _digest(out)
    assert main(flags) == 2
    _refused(capsys, "already holds a prepared corpus; pass --force")
    assert _digest(out) == first
    assert main([*flags, "--force"]) == 0
    assert output_kind(out) == "prepared"
    assert main(["prepare", "--data", str(out / "src_vocab.json"), *flags[3:], "--force"]) == 2
    _refused(capsys)


def test_train_replaces_a_run_only_with_force(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(train_argv(out, steps=2)) == 0
    assert main(train_argv(out, steps=2)) == 2
    _refused(capsys, "--resume", "--force")
    assert main(train_argv(out, "--force", steps=3)) == 0
    assert "after 3 steps" in capsys.readouterr().out


def test_a_run_killed_before_its_first_checkpoint_resumes_from_step_0(tmp_path, monkeypatch, capsys):
    from attnlab.training.trainer import Trainer

    killed = tmp_path / "killed"

    def die(self):
        raise KeyboardInterrupt  # as a SIGKILL would leave it: config and vocabularies, no checkpoint

    with monkeypatch.context() as m:
        m.setattr(Trainer, "fit", die)
        with pytest.raises(KeyboardInterrupt):
            tiny_run(killed, max_steps=3, seed=5)
    assert (killed / "config.json").is_file() and not list_checkpoints(killed)
    assert main(["train", "--resume", str(killed), "--no-progress"]) == 0
    assert "from step 0" in capsys.readouterr().err
    fresh = tmp_path / "fresh"
    tiny_run(fresh, max_steps=3, seed=5)
    assert read_weights(killed / "model.safetensors").keys() == read_weights(fresh / "model.safetensors").keys()
    for key, value in read_weights(fresh / "model.safetensors").items():
        assert read_weights(killed / "model.safetensors")[key].equal(value), key
