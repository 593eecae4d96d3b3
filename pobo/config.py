"""Config files for the command line: `--config FILE.toml`, every flag as a key.

A key is a flag's name without its dashes (`ldp-eps` or `ldp_eps`), its value what the
flag would take (a number, a string, true for a switch, a list for a flag that takes
several). One file may hold several commands' settings as tables named after them
(`[curator]`, `[modeler]`); a command uses its own table, else the file's top-level
keys. A flag given on the command line overrides the file. Values go through the same
checks as the flag's (an unknown key, or a value the flag would refuse, is a one-line
error naming the file).
"""
from __future__ import annotations

import argparse
import tomllib
from pathlib import Path

CONFIGURABLE = ("run", "curator", "modeler", "sweep", "export-data", "risk")


MAX_CONFIG_BYTES = 1 << 20


def load_config(path: Path, command: str) -> dict:
    """The settings `path` holds for `command` (its table, else the top-level keys). Only
    a regular file of at most MAX_CONFIG_BYTES is read (a FIFO would wait for ever, a
    device like /dev/zero would fill memory)."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"no config file at {path}")
    if not path.is_file():
        raise ValueError(f"{path} is not a regular file: a config file is TOML text")
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise ValueError(f"{path} is larger than {MAX_CONFIG_BYTES} bytes: not a config file")
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"no config file at {path}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path} is not text: a config file is TOML") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path} is not valid TOML: {exc}") from None
    own = data.get(command)
    if isinstance(own, dict):
        return own
    flat = {k: v for k, v in data.items() if not isinstance(v, dict)}
    tables = sorted(k for k, v in data.items() if isinstance(v, dict))
    if tables and not flat:  # a typo ([rnu]) or another command's file: not silently nothing
        raise ValueError(f"{path} has no [{command}] table and no top-level keys (its tables: "
                         f"{', '.join(tables)})")
    return flat


def apply_config(parser: argparse.ArgumentParser, args: argparse.Namespace,
                 argv: list[str], path: Path) -> None:
    """Fill `args` from the config file at `path` wherever `argv` did not give the flag;
    then refuse (one line) a setting still missing that the command needs."""
    actions = {a.dest: a for a in parser._actions if a.dest not in ("help", "config")}
    for key, value in load_config(path, args.command).items():
        dest = key.replace("-", "_")
        action = actions.get(dest)
        if action is None:
            known = ", ".join(sorted(d.replace("_", "-") for d in actions))
            raise ValueError(f"{path}: unknown key {key!r} for pobo {args.command} "
                             f"(keys: {known})")
        if _given(action, argv, args):
            continue  # the command line overrides the file
        setattr(args, dest, _convert(action, value, f"{path}: {key}"))


def check_required(parser: argparse.ArgumentParser, args: argparse.Namespace,
                   needed: tuple[str, ...]) -> None:
    """A one-line usage error for a needed setting neither the flags nor a file gave."""
    for dest in needed:
        if getattr(args, dest, None) is None:
            flag = dest if dest == "scenario" else "--" + dest.replace("_", "-")
            parser.error(f"{flag.upper() if dest == 'scenario' else flag} is required "
                         "(on the command line or in --config)")


def _given(action: argparse.Action, argv: list[str], args: argparse.Namespace) -> bool:
    """Whether the command line gave this flag (or, for a positional, a value)."""
    if not action.option_strings:
        return getattr(args, action.dest) is not None
    return any(token == opt or token.startswith(opt + "=")
               for token in argv for opt in action.option_strings)


def _convert(action: argparse.Action, value, where: str):
    """`value` as the flag would have parsed it (its type and checks)."""
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        if not isinstance(value, bool):
            raise ValueError(f"{where}: expected true or false, got {value!r}")
        return value if isinstance(action, argparse._StoreTrueAction) else not value
    if isinstance(action, argparse._CountAction):  # -v: true, or how many
        if isinstance(value, bool) or (isinstance(value, int) and value >= 0):
            return int(value)
        raise ValueError(f"{where}: expected true, false or a count, got {value!r}")
    if isinstance(action, argparse.BooleanOptionalAction):
        if not isinstance(value, bool):
            raise ValueError(f"{where}: expected true or false, got {value!r}")
        return value
    many = action.nargs in ("+", "*")
    items = value if isinstance(value, list) else [value]
    if not many and isinstance(value, list):
        raise ValueError(f"{where}: expected one value, got a list")
    out = []
    for item in items:
        if isinstance(item, (dict, list)):
            raise ValueError(f"{where}: expected a value, got {item!r}")
        text = str(item).lower() if isinstance(item, bool) else str(item)
        try:
            converted = action.type(text) if action.type is not None else text
        except (argparse.ArgumentTypeError, ValueError, TypeError) as exc:
            raise ValueError(f"{where}: {exc}") from None
        if action.choices is not None and converted not in action.choices:
            raise ValueError(f"{where}: {converted!r} is not one of "
                             f"{', '.join(map(str, action.choices))}")
        out.append(converted)
    return out if many else out[0]
