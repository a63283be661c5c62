"""`proofpool keys`: local key material, written only as encrypted Ethereum v3 keystores.

A key never appears on screen or in a log; files are created owner-only (mode 600). The
password comes from an environment variable (for scripts) or a prompt with confirmation.
"""

from __future__ import annotations

import json
import os
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from eth_account import Account
from eth_account.signers.local import LocalAccount
from rich.console import Console

from proofpool.core.errors import ConfigError, ProofpoolError
from proofpool.infra.chain.accounts import KEY_PASSWORD_ENV, encrypt_account, keystore_address, password_from_env

app = typer.Typer(no_args_is_help=True)
console = Console()

ROLE_REMINDER = (
    "Each key stays on the machine of its role: the provider key (it holds the stake) never goes to a worker "
    "machine, which needs only its node key."
)


class KdfChoice(StrEnum):
    scrypt = "scrypt"
    pbkdf2 = "pbkdf2"


ForceOption = Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")]
PasswordEnvOption = Annotated[
    str,
    typer.Option(
        "--password-env",
        help="Variable holding the password; when it is unset you are asked (twice) on the terminal.",
    ),
]
KdfOption = Annotated[KdfChoice, typer.Option("--kdf", help="Key derivation: scrypt (memory-hard) or pbkdf2.")]
KdfWorkOption = Annotated[
    int | None,
    typer.Option(
        "--kdf-work",
        min=2,
        help="KDF cost (scrypt n, a power of two; pbkdf2 iterations). Default: eth-account's "
        "(scrypt n=262144). Lower it only for throw-away test keys.",
        show_default=False,
    ),
]


@app.command()
def new(
    out: Annotated[Path, typer.Argument(help="Keystore file to write (Ethereum v3 JSON, mode 600).")],
    force: ForceOption = False,
    password_env: PasswordEnvOption = KEY_PASSWORD_ENV,
    kdf: KdfOption = KdfChoice.scrypt,
    kdf_work: KdfWorkOption = None,
) -> None:
    """Create a new secp256k1 key and store it encrypted with a password."""
    _refuse_existing(out, force)
    password = _new_password(password_env)
    account = Account.create()
    _write_keystore(out, account, password, kdf, kdf_work, force)
    console.print(f"new key {account.address} written to {out} (encrypted keystore, {kdf.value}, mode 600)")
    console.print(
        f"It pays for its transactions with ETH: send {account.address} some before it signs one"
        f" (on a devnet chain: proofpool chain fund {account.address})."
    )
    console.print(ROLE_REMINDER)


@app.command()
def encrypt(
    old: Annotated[Path, typer.Argument(help="Unencrypted key file of an earlier proofpool (address + private_key).")],
    out: Annotated[Path, typer.Argument(help="Keystore file to write (mode 600); then delete OLD yourself.")],
    force: ForceOption = False,
    password_env: PasswordEnvOption = KEY_PASSWORD_ENV,
    kdf: KdfOption = KdfChoice.scrypt,
    kdf_work: KdfWorkOption = None,
) -> None:
    """Turn an unencrypted key file of an earlier proofpool into an encrypted keystore (same address)."""
    _refuse_existing(out, force)
    account = _read_plaintext_key_file(old)
    password = _new_password(password_env)
    _write_keystore(out, account, password, kdf, kdf_work, force)
    console.print(f"key {account.address} from {old} written to {out} (encrypted keystore, {kdf.value}, mode 600)")
    console.print(f"{old} still holds the key in plain text: delete it once you have checked {out}.")


@app.command()
def show(path: Annotated[Path, typer.Argument(help="Keystore file written by `keys new`.")]) -> None:
    """Print the address of a keystore (read from the file; no password needed, nothing decrypted)."""
    console.print(keystore_address(path))


def _refuse_existing(out: Path, force: bool) -> None:
    """Checked before asking for a password, so nobody types one for nothing."""
    if out.exists() and not force:
        raise ProofpoolError(f"{out} exists; pass --force to overwrite it")


def _new_password(password_env: str) -> str:
    """The new keystore's password: `$password_env`, else typed twice on the terminal."""
    password = password_from_env(password_env)
    if password is not None:
        return password
    if not sys.stdin.isatty():
        raise ConfigError(f"no password: set {password_env}, or run in a terminal to be asked for one")
    return typer.prompt("password for the new keystore", hide_input=True, confirmation_prompt=True)


def _read_plaintext_key_file(path: Path) -> LocalAccount:
    """The account in an old `{"address", "private_key"}` file (the only reader of that format)."""
    try:
        data = json.loads(path.read_text())
        account = Account.from_key(data["private_key"])
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"{path} is not an unencrypted proofpool key file ({exc.__class__.__name__})") from None
    if data.get("address") not in (None, account.address):
        raise ConfigError(f"{path} names address {data['address']} but its key is {account.address}")
    return account


def _write_keystore(
    out: Path, account: LocalAccount, password: str, kdf: KdfChoice, work: int | None, force: bool
) -> None:
    """Write the keystore owner-only; without `force` the create is exclusive, with it the file is
    replaced atomically (a reader never sees half a keystore, an old file's looser mode is dropped)."""
    text = json.dumps(encrypt_account(account, password, kdf.value, work))
    out.parent.mkdir(parents=True, exist_ok=True)
    target = out.with_name(f".{out.name}.{os.getpid()}.tmp") if force else out
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise ProofpoolError(f"{target} exists; pass --force to overwrite it") from None
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    if force:
        os.replace(target, out)
