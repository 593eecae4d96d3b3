"""Key files on disk, without ZeroMQ: where `pobo keys` puts each key, with which mode.

The Ed25519 signing pairs (`make_signing_keys`) and the file rules every key follows:
generated under umask 077 in a private staging folder, moved into place (0600 secret,
0644 public, 0700 folder), never overwriting an existing key without `force`. The CURVE
pairs (`transport.security.make_keys`) use the same rules; this module needs no zmq, so
that `pobo run` can make a run's signing keys without importing it.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

_SECRET_MODE, _PUBLIC_MODE, _DIR_MODE = 0o600, 0o644, 0o700
_ROLES = ("curator", "modeler")


@contextlib.contextmanager
def _umask(mask: int) -> Iterator[None]:
    """Set the process umask for the block (no file created meanwhile is wider than it)."""
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def _place(source: Path, target: Path, mode: int, force: bool) -> None:
    """Move `source` to `target` with `mode`; without `force` never replace an existing file."""
    os.chmod(source, mode)
    if force:
        os.replace(source, target)
        return
    try:
        os.link(source, target)  # atomic: fails if the target appeared meanwhile
    except FileExistsError:
        raise FileExistsError(f"{target} already exists: pass --force to overwrite it") from None
    except OSError:  # no hard links on this filesystem
        if target.exists():
            raise FileExistsError(
                f"{target} already exists: pass --force to overwrite it") from None
        os.replace(source, target)
        return
    source.unlink()


def _refuse_existing(paths: list[Path]) -> None:
    """FileExistsError (one line, naming the file) if any key file is already there."""
    for path in paths:
        if path.exists():
            raise FileExistsError(f"{path} already exists: pass --force to overwrite it")


def _key_folder(directory: Path) -> Path:
    """Create the key folder (0700) and its allowed/ (0755: public keys only) if
    missing; call under a 077 umask. Returns allowed/."""
    if not directory.is_dir():
        directory.mkdir(parents=True, mode=_DIR_MODE)
        os.chmod(directory, _DIR_MODE)
    allowed = directory / "allowed"
    if not allowed.is_dir():
        allowed.mkdir(mode=0o755)
        os.chmod(allowed, 0o755)
    return allowed


def make_signing_keys(directory: str | Path, force: bool = False) -> dict[str, Path]:
    """Ed25519 signing pairs for a curator and a modeler in `directory`:
    `<role>.sign_secret` (32 raw bytes, 0600) and `<role>.sign_public` (hex, 0644), and
    the modeler's public half in `allowed/` (the curator's --sign-allow folder). The same
    rules as the CURVE keys: umask 077, staged and moved into place, never overwritten
    without `force`."""
    from pobo.protocol.signing import Signer  # transport may use protocol, never the reverse

    directory = Path(directory)
    paths: dict[str, Path] = {}
    for name in _ROLES:
        paths[f"{name}_sign_secret"] = directory / f"{name}.sign_secret"
        paths[f"{name}_sign_public"] = directory / f"{name}.sign_public"
    allowed_sign = directory / "allowed" / "modeler.sign_public"
    if not force:
        _refuse_existing([*paths.values(), allowed_sign])
    with _umask(0o077):
        _key_folder(directory)
        staging = Path(tempfile.mkdtemp(prefix=".pobo-sign-", dir=directory))
        try:
            for name in _ROLES:
                signer = Signer.generate()
                secret, public = staging / f"{name}.sign_secret", staging / f"{name}.sign_public"
                secret.write_bytes(signer.secret_bytes())
                public.write_text(signer.public_hex + "\n")
                if name == "modeler":
                    shutil.copyfile(public, staging / "allowed.sign_public")
                    _place(staging / "allowed.sign_public", allowed_sign, _PUBLIC_MODE, force)
                _place(secret, paths[f"{name}_sign_secret"], _SECRET_MODE, force)
                _place(public, paths[f"{name}_sign_public"], _PUBLIC_MODE, force)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return paths


HOME_ENV = "POBO_HOME"  # the per-user key store's folder (default ~/.pobo), as ssh's ~/.ssh
STORE_KEYS, STORE_TRUSTED = "keys", "trusted"


def pobo_home() -> Path:
    """The user's pobo folder: $POBO_HOME, else ~/.pobo (tests set POBO_HOME)."""
    return Path(os.environ.get(HOME_ENV) or Path.home() / ".pobo")


def store_signing_key(role: str, home: Path | None = None) -> Path:
    """The secret half of `role`'s signing key in the user's key store
    (HOME/keys/<role>.sign_secret, 0600, with <role>.sign_public beside it), made once on
    first use and kept: what a party signs with unless told otherwise."""
    from pobo.protocol.signing import Signer

    if role not in _ROLES:
        raise ValueError(f"role must be one of {_ROLES}, got {role!r}")
    folder = (home or pobo_home()) / STORE_KEYS
    secret, public = folder / f"{role}.sign_secret", folder / f"{role}.sign_public"
    if secret.is_file() and public.is_file():
        return secret
    with _umask(0o077):
        folder.mkdir(parents=True, exist_ok=True, mode=_DIR_MODE)
        staging = Path(tempfile.mkdtemp(prefix=".pobo-sign-", dir=folder))
        try:
            signer = Signer.generate()
            (staging / "s").write_bytes(signer.secret_bytes())
            (staging / "p").write_text(signer.public_hex + "\n")
            try:  # the public half first: a secret without it is never seen as complete
                _place(staging / "p", public, _PUBLIC_MODE, False)
                _place(staging / "s", secret, _SECRET_MODE, False)
            except FileExistsError:
                pass  # another process made them meanwhile: theirs are the store's
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    if not (secret.is_file() and public.is_file()):
        raise FileExistsError(f"the key store {folder} holds half a {role} key pair: remove "
                              f"{secret} or {public}")
    return secret


def trusted_signing_keys(home: Path | None = None) -> dict[str, Path]:
    """The public signing keys the user trusts, hex -> file: the store's own
    (HOME/keys/*.sign_public) and those put in HOME/trusted/ (a peer's sign_public).
    Never a key found beside a transcript."""
    from pobo.protocol.signing import load_verify_key

    base = home or pobo_home()
    found: dict[str, Path] = {}
    for sub in (STORE_KEYS, STORE_TRUSTED):
        folder = base / sub
        if folder.is_dir():
            for path in sorted(folder.glob("*.sign_public")):
                found.setdefault(load_verify_key(path), path)
    return found
