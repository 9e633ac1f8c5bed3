"""The four demonstration commands run end to end with tiny settings and write real images."""

import pytest

from attnlab.cli import main

PNG = b"\x89PNG\r\n\x1a\n"


def _pngs(folder):
    files = sorted(folder.glob("*.png"))
    assert files, f"no PNG written in {folder}"
    for f in files:
        assert f.read_bytes()[:8] == PNG and f.stat().st_size > 1000
        assert f.with_suffix(".svg").is_file()
    return {f.stem for f in files}


def test_kernel_regression_command(tmp_path, capsys):
    out = tmp_path / "kr"
    assert main(["kernel-regression", "--out", str(out), "--epochs", "2", "--n-train", "20"]) == 0
    text = capsys.readouterr().out
    for name in ("average pooling", "gaussian", "boxcar", "epanechnikov", "learned", "test MSE"):
        assert name in text
    assert _pngs(out) >= {"predictions", "loss", "attention_nonparametric", "attention_parametric"}


def test_positional_encoding_command(tmp_path, capsys):
    out = tmp_path / "pe"
    assert main(["positional-encoding", "--out", str(out), "--num-hiddens", "12", "--num-steps", "20"]) == 0
    text = capsys.readouterr().out
    assert "111" in text and "OK" in text
    assert _pngs(out) == {"pe_columns", "pe_heatmap"}


def test_scaling_command(tmp_path, capsys):
    out = tmp_path / "sc"
    assert main(["scaling", "--out", str(out), "--samples", "20", "--num-keys", "8"]) == 0
    text = capsys.readouterr().out
    assert "512" in text and "sqrt" in text
    assert _pngs(out) == {"scaling"}


def test_params_command(capsys):
    assert main(["params", "--num-hiddens", "64", "--num-heads", "4", "--ffn-num-hiddens", "256"]) == 0
    text = capsys.readouterr().out
    assert "16,384" in text  # 4 * 64^2, for one head and for four
    assert "O(n²·d)" in text and "base" in text and "big" in text


def test_params_reports_kv_cache_bytes_per_token(capsys):
    assert main(["params", "--num-hiddens", "64", "--num-heads", "4", "--num-kv-heads", "2", "--num-layers", "3"]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines() if line}
    # keys + values, 3 layers, KV heads of 16 features, 4 bytes: 2 * 3 * Hkv * 16 * 4
    assert rows["multi-head"][1:5] == ["4", "16,384", "1,536", "768"]
    assert rows["grouped-query"][1:5] == ["2", "12,288", "768", "384"]  # W_k, W_v shrink to 64 x 32
    assert rows["multi-query"][1:5] == ["1", "10,240", "384", "192"]


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["kernel-regression", "--kernels", "cosine"], "--kernels"),
        (["kernel-regression", "--bandwidth", "-1"], "--bandwidth"),
        (["kernel-regression", "--n-train", "1"], "--n-train"),
        (["positional-encoding", "--num-hiddens", "7"], "--num-hiddens"),
        (["scaling", "--samples", "0"], "--samples"),
        (["params", "--num-heads", "3"], "--num-heads"),
    ],
)
def test_bad_flags_name_the_flag(tmp_path, capsys, argv, flag):
    assert main(argv + ([] if argv[0] == "params" else ["--out", str(tmp_path / "o")])) == 2
    assert flag in capsys.readouterr().err
    assert not (tmp_path / "o").exists()  # validation happens before any output


def test_unwritable_output_fails_before_work(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["scaling", "--out", str(blocker / "sub")]) == 2
    assert "which is a file" in capsys.readouterr().err
