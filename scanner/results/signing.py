"""`export --bundle DIR --sign KEY`: manifest.json signed with the user's ssh-ed25519 key, offline.

The signing is `cryptography`'s (maintained, constant-time): a signer holds a secret, so its arithmetic
is not ours to write. The key is any OpenSSH ed25519 private key `ssh-keygen -t ed25519` writes,
passphrase-protected ones included: the passphrase is read from ACR_SIGN_PASSPHRASE, else asked on the
terminal. The signature is manifest.json.sig in the format of `ssh-keygen -Y sign -n acr-scanner-bundle`
(OpenSSH's PROTOCOL.sshsig; Ed25519 is deterministic, so it is byte for byte what ssh-keygen writes for
the same key and file), so anyone checks it with `ssh-keygen -Y verify`, with `acr-scan verify --bundle
--signer`, or with the bundle's own recheck.py, which verifies it in pure Python: a verifier holds no
secret, and recheck.py may import nothing but the standard library, torch and transformers.
"""

from __future__ import annotations

import base64
import getpass
import os
import sys
from pathlib import Path

from scanner.errors import InputError, require
from scanner.results.recheck import NAMESPACE, signed_data, ssh_string

BEGIN, END = "-----BEGIN OPENSSH PRIVATE KEY-----", "-----END OPENSSH PRIVATE KEY-----"
PASSPHRASE_ENV = "ACR_SIGN_PASSPHRASE"


def _fix(path: str) -> str:
    return (
        f"--sign {path}: expected an OpenSSH ed25519 private key (ssh-keygen -t ed25519); or sign the "
        f"manifest yourself: ssh-keygen -Y sign -f KEY -n {NAMESPACE} BUNDLE/manifest.json (it writes "
        "BUNDLE/manifest.json.sig)"
    )


def _passphrase(path: str) -> bytes:
    """The key's passphrase: ACR_SIGN_PASSPHRASE, else asked on the terminal (never echoed)."""
    given = os.environ.get(PASSPHRASE_ENV)
    if given is None:
        require(
            sys.stdin.isatty(),
            f"--sign {path}: the key is protected by a passphrase and there is no terminal "
            f"to ask it on; set {PASSPHRASE_ENV} to it",
        )
        given = getpass.getpass(f"passphrase for {path}: ")
    return given.encode()


def read_private_key(path: str):
    """The Ed25519PrivateKey of an OpenSSH private key file, unlocked with its passphrase if it has one."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import load_ssh_private_key

    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise InputError(f"{_fix(path)}; cannot read it ({err})") from err
    require(BEGIN.encode() in data, f"{_fix(path)}; it is not one")
    try:
        try:
            key = load_ssh_private_key(data, None)
        except TypeError:  # "Key is password-protected, but password was not provided"
            key = _unlocked(data, path)
    except UnsupportedAlgorithm as err:  # a cipher or KDF this build lacks (bcrypt)
        raise InputError(
            f"{_fix(path)}; its encryption cannot be read here ({err}): pip install bcrypt"
        ) from err
    except ValueError as err:
        raise InputError(f"{_fix(path)}; it is damaged ({err})") from err
    require(isinstance(key, Ed25519PrivateKey), f"{_fix(path)}; it holds a {type(key).__name__} key")
    return key


def _unlocked(data: bytes, path: str):
    from cryptography.hazmat.primitives.serialization import load_ssh_private_key

    try:
        return load_ssh_private_key(data, _passphrase(path))
    except ValueError as err:  # "Corrupt data: broken checksum": the usual sign of a wrong passphrase
        raise InputError(
            f"--sign {path}: the passphrase does not unlock the key ({err}); give the right one "
            f"(in {PASSPHRASE_ENV}, or on the terminal)"
        ) from err


def ed25519_sign(seed: bytes, message: bytes) -> bytes:
    """RFC 8032: the 64-byte signature of message by the key of the 32-byte seed."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return Ed25519PrivateKey.from_private_bytes(seed).sign(message)


def sign_manifest(manifest: bytes, key: str) -> bytes:
    """manifest.json.sig: the armored SSHSIG signature of the manifest's bytes."""
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    private = read_private_key(key)
    public = private.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    key_blob = ssh_string(b"ssh-ed25519") + ssh_string(public)
    signature = ssh_string(b"ssh-ed25519") + ssh_string(private.sign(signed_data(manifest)))
    blob = (
        b"SSHSIG"
        + (1).to_bytes(4, "big")
        + ssh_string(key_blob)
        + ssh_string(NAMESPACE.encode())
        + ssh_string(b"")
        + ssh_string(b"sha512")
        + ssh_string(signature)
    )
    text = base64.b64encode(blob).decode()
    body = "\n".join(text[i : i + 70] for i in range(0, len(text), 70))
    return f"-----BEGIN SSH SIGNATURE-----\n{body}\n-----END SSH SIGNATURE-----\n".encode()
