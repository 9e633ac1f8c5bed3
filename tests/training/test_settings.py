"""`attnlab.training.settings`: the settings `attnlab train` resolves, reached from Python without argparse."""

from __future__ import annotations

import json

import pytest

from attnlab.cli import main
from attnlab.training.config import RESUMABLE, check_resumable
from attnlab.training.settings import no_overrides, parse_set, resolve


def test_resolve_gives_what_print_config_prints(capsys):
    over = parse_set(["model.num_layers=1", "train.lr=0.02"])
    settings = resolve("transformer", "tiny", overrides=over)
    assert settings.train.lr == 0.02 and settings.sections["model"]["num_layers"] == 1
    assert main(["train", "--preset", "tiny", "--set", "model.num_layers=1", "--lr", "0.02", "--print-config"]) == 0
    assert json.loads(capsys.readouterr().out) == json.loads(json.dumps(settings.described()))
    assert settings.default_run_dir().endswith("transformer-tiny")


def test_a_config_file_replaces_the_preset(tmp_path):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(resolve("bahdanau", "d2l").described()), encoding="utf-8")
    settings = resolve(config_file=path, overrides={"train": {"epochs": 3}})
    assert settings.model_type == "bahdanau" and settings.train.epochs == 3
    assert settings.default_run_dir().endswith("bahdanau-mine")
    with pytest.raises(ValueError, match="--config replaces --preset"):
        resolve(preset="tiny", config_file=path)
    with pytest.raises(ValueError, match="disagrees with"):
        resolve("transformer", config_file=path)


def test_image_runs_refuse_corpus_settings_and_take_a_folder():
    with pytest.raises(ValueError, match="--max-len: not for image runs"):
        resolve("vit", "tiny", overrides={"data": {"max_len": 5}}, names={"max_len": "--max-len"})
    settings = resolve("vit", "tiny", overrides={"data": {"path": "images/"}})
    assert settings.sections["data"] == {"loader": "folder", "path": "images/"}


def test_resumable_policy():
    check_resumable({"train": {k: 1 for k in RESUMABLE}})
    for over in ({"train": {"lr": 0.1}}, {"model": {"num_layers": 2}}, {"data": {"max_len": 5}}):
        with pytest.raises(ValueError, match="cannot change"):
            check_resumable({**no_overrides(), **over})


@pytest.mark.parametrize("item", ["model.num_layers", "layers=3", "optim.lr=1"])
def test_parse_set_refuses_what_is_not_section_key_value(item):
    with pytest.raises(ValueError, match=r"SECTION\.KEY=VALUE"):
        parse_set([item])
