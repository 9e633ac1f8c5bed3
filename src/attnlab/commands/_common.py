"""What the subcommand modules share: how each registers itself with the dispatcher (attnlab.cli), the flags
that name a run and how it runs (--checkpoint, --weights, --device, --precision), and the decoding flags, one per
`DecodeOptions` field, generated from the fields' metadata (as `transformers`' HfArgumentParser reads a dataclass)."""

from __future__ import annotations

import argparse
import types
import typing
from pathlib import Path
from typing import Any

from attnlab.decoding.options import DecodeOptions, OptionError, option_fields
from attnlab.runs.layout import DEFAULT_RUN


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The command's docstring as written, and every flag's default: a flag whose help does not say its default
    gets ` (default: X)` appended (a default of None, False or [] means "not given" and is said in words)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        help = action.help or ""
        unset = action.default is None or action.default is False or action.default == []  # 0 is a default
        if not help or "default" in help or not action.option_strings or unset or action.default == argparse.SUPPRESS:
            return help
        return f"{help} (default: %(default)s)"


def add_command(subparsers, name: str, help: str, doc: str | None) -> argparse.ArgumentParser:
    """Register the subcommand `name` (`help`: its line in `attnlab --help`); its own --help shows `doc`,
    the command module's docstring, with its usage lines and line breaks kept as written, and each flag's
    default (`HelpFormatter`)."""
    return subparsers.add_parser(name, help=help, description=doc, formatter_class=HelpFormatter)


def add_force(p: argparse.ArgumentParser, what: str) -> None:
    """--force: replace `what` (an earlier output of the same kind; attnlab.runs.outputs refuses the rest)."""
    p.add_argument("--force", action="store_true", help=f"replace {what}; never anything else")


def add_figures_command(subparsers, name: str, help: str, doc: str | None) -> argparse.ArgumentParser:
    """A chapter command: `add_command` plus --out, the folder for its figures (default runs/NAME)."""
    p = add_command(subparsers, name, help, doc)
    p.add_argument("--out", default=f"runs/{name}", help="folder for PNG+SVG figures")
    add_force(p, "earlier chapter figures in --out")
    return p


def claim_figures(args):
    """The --out folder of a chapter command, claimed before any work (attnlab.runs.outputs)."""
    from attnlab.runs.outputs import claim_output

    return claim_output(args.out, "figures", force=args.force)


def save_figures(result, claim) -> None:
    """Write a chapter section's figures into the claimed folder, then print its paragraph and their names."""
    from attnlab.runs.outputs import write_output

    with write_output(claim) as tmp:
        section = result.save(tmp)
    print(f"\n{result.paragraph}\n")
    print(f"figures (PNG + SVG) in {claim.path}: {', '.join(Path(p).stem for p in section.figures)}")


def run_model_type(checkpoint) -> str | None:
    """The model type a run folder's config.json names; None for no folder (the command's own loading
    then says what is missing)."""
    from attnlab.runs.config import read_run_config

    if checkpoint is None or not Path(checkpoint).is_dir():
        return None
    return read_run_config(checkpoint)["model_type"]


def refuse_model_types(checkpoint, refused: dict[str, str], command: str) -> None:
    """One line naming what `command` cannot do with a run of a refused model type ({type: what instead})."""
    model_type = run_model_type(checkpoint)
    if model_type in refused:
        raise ValueError(f"attnlab {command} does not take {model_type} runs ({checkpoint}); {refused[model_type]}")


def add_checkpoint_arg(p, default: Path | None = DEFAULT_RUN) -> None:
    """--checkpoint DIR (None: not given; the command says what is missing where DEFAULT_RUN is absent)."""
    p.add_argument(
        "--checkpoint",
        metavar="DIR",
        default=None if default is None else str(default),
        help=f"run folder written by `attnlab train` or `attnlab demo` (default: {default or DEFAULT_RUN})",
    )


def add_weights_arg(p) -> None:
    p.add_argument(
        "--weights",
        metavar="FILE",
        help="other weights for that run: a checkpoint folder or an averaged .safetensors (default: the run's "
        "model.safetensors)",
    )


def add_device_arg(p) -> None:
    p.add_argument(
        "--device",
        default="cpu",
        help="cpu (default: a trained run decodes a few sentences fastest where it loads; train's default is "
        "auto, since training is where a GPU pays), cuda, cuda:1 ...",
    )


def add_precision_arg(p) -> None:
    """--precision, shared by translate, evaluate, attention, heads and serve (see attnlab.inference.precision)."""
    p.add_argument(
        "--precision",
        choices=["auto", "fp32", "bf16", "int8"],
        default="fp32",
        help="fp32 (default: the same output on every machine), bf16, int8 (CPU, Transformer), or auto: the "
        "fastest this hardware computes natively and measured to pay (attnlab.inference.precision)",
    )


def add_checkpoint_args(p, default=DEFAULT_RUN) -> None:
    """--checkpoint / --weights / --device / --precision, shared by translate, evaluate, attention and heads."""
    add_checkpoint_arg(p, default)
    add_weights_arg(p)
    add_device_arg(p)
    add_precision_arg(p)


# DecodeOptions field -> the flag that sets it (error messages name the flag): every field with one.
FLAGS = {f.name: f.metadata["cli"].get("flag", "--" + f.name.replace("_", "-")) for f in option_fields("cli")}


def _flag_type(f) -> type:
    """int, float or str: the field's type without None (`int | None` -> int)."""
    hint = typing.get_type_hints(DecodeOptions)[f.name]
    if isinstance(hint, types.UnionType):
        (hint,) = [a for a in typing.get_args(hint) if a is not type(None)]
    return hint


def _shown(value) -> str:
    return "none" if value is None or value == () else "off" if value is False else str(value)


def add_option_flags(g, only: tuple[str, ...] | None = None) -> None:
    """One flag per DecodeOptions field with one (`FLAGS`; `only`: these fields alone), its help the field's;
    each defaults to None: not given, the run's default (its generation.json) holds."""
    from attnlab.decoding.options import TRANSLATOR_DEFAULTS

    for f in option_fields("cli"):
        if only is not None and f.name not in only:
            continue
        kw: dict[str, Any] = {k: v for k, v in f.metadata["cli"].items() if k not in ("flag", "parse")}
        if f.metadata["defaultable"]:
            shown = f"the run's generation.json, else {_shown(getattr(TRANSLATOR_DEFAULTS, f.name))}"
        else:
            shown = _shown(f.default)
        again = "; repeatable" if kw.get("action") == "append" else ""
        kw["help"] = f"{f.metadata['help']}{again} (default: {shown})".replace("%", "%%")
        kw.setdefault("default", None)
        if f.type == "bool" or f.default is False:
            kw["action"] = "store_true"
        elif "type" not in kw:
            kw["type"] = _flag_type(f)
        g.add_argument(FLAGS[f.name], dest=f.name, **kw)


def named(e: OptionError) -> str:
    """An OptionError's message naming its flag."""
    return e.named(FLAGS.get(e.field, e.field))


def merged_options(defaults, changes: dict):
    """`defaults.merged(changes)` (changes: the flags given, by field), or ValueError naming the flag."""
    try:
        return defaults.merged(changes)
    except OptionError as e:
        raise ValueError(named(e)) from None


def decode_options(args, defaults):
    """The decoding flags given (those `add_option_flags` added), over the run's `defaults`, as a validated
    DecodeOptions (ValueError, one line, naming the flag)."""
    changes: dict[str, Any] = {}
    for f in option_fields("cli"):
        value = getattr(args, f.name, None)
        if value is None:
            continue
        parse = f.metadata["cli"].get("parse")
        try:
            changes[f.name] = parse(value) if parse else tuple(value) if isinstance(value, list) else value
        except OptionError as e:
            raise ValueError(named(e)) from None
    return merged_options(defaults, changes)


def run_defaults(args):
    """The decoding defaults of the run --checkpoint names (its generation.json), read before the model loads."""
    from attnlab.decoding.options import TRANSLATOR_DEFAULTS
    from attnlab.runs.generation import read_generation

    run_dir = Path(args.checkpoint)
    return read_generation(run_dir) if run_dir.is_dir() else TRANSLATOR_DEFAULTS
